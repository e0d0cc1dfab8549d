//! The error type shared by every parser and emitter of this crate.

/// Why a header or a datagram could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input ended before a header (or the ICRC) was complete; carries
    /// the length of the input that was too short.
    #[error("packet too short: {0} bytes")]
    Truncated(usize),
    /// The BTH opcode is not one this crate knows (RD, CNP, reserved).
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The BTH transport header version is not 0.
    #[error("unsupported transport header version {0}")]
    BadVersion(u8),
    /// The invariant CRC does not match the packet.
    #[error("bad ICRC")]
    BadIcrc,
    /// The pad count does not fit the packet.
    #[error("bad pad count")]
    BadPad,
    /// The AETH syndrome is a reserved value; carries the syndrome byte.
    #[error("reserved AETH syndrome {0:#04x}")]
    BadSyndrome(u8),
    /// The headers present are not exactly the ones the opcode requires
    /// (or a payload is present where the opcode allows none).
    #[error("headers do not match opcode")]
    HeaderMismatch,
    /// The source and destination addresses are of different families.
    #[error("address families differ")]
    AddressFamily,
    /// The output buffer is too small for the header being emitted.
    #[error("buffer too small")]
    BufferTooSmall,
    /// The datagram is longer than an IP packet can carry; carries the
    /// length of the datagram.
    #[error("datagram too long: {0} bytes")]
    TooLong(usize),
    /// A GRH area holds an IPv4 header whose checksum is wrong.
    #[error("bad IPv4 header checksum")]
    BadIpChecksum,
    /// A GRH area holds neither an IPv4 header without options nor an
    /// IPv6 header.
    #[error("no IPv4 or IPv6 header")]
    NoIpHeader,
    /// A GRH area holds an IPv6 header whose next header is not UDP;
    /// carries the next header.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// A management datagram is not a communication management Send.
    #[error("not a CM MAD")]
    NotCmMad,
    /// A CM MAD of a class version other than 2; carries the version.
    #[error("CM class version {0} is not supported")]
    BadMadVersion(u8),
    /// A CM MAD whose attribute ID names no CM message; carries the ID.
    #[error("unknown CM attribute {0:#06x}")]
    UnknownAttribute(u16),
    /// rdma_cm's address header has an unknown version or IP version;
    /// carries the value.
    #[error("bad rdma_cm address header ({0})")]
    BadCmaHeader(u8),
}

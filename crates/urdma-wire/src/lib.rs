//! RoCEv2 wire format.
//!
//! RoCEv2 carries InfiniBand transport packets in UDP datagrams sent to
//! port [`ROCEV2_UDP_PORT`]. The UDP payload of such a datagram starts with
//! the Base Transport Header ([`Bth`]), continues with the extended transport
//! headers that the opcode calls for, the payload and up to three pad bytes,
//! and ends with the 4-byte invariant CRC (ICRC, see [`icrc`]).
//!
//! Each header has a plain `Repr`-style struct with `parse` (from a byte
//! slice) and `emit` (into a byte slice) in its own module. The [`packet`]
//! module puts them together: [`parse`] checks and splits a whole datagram,
//! [`emit_headers`], [`seal`] and [`build`] produce one. A parsed
//! [`Packet`] displays as a one-line summary of its headers, and [`grh`]
//! reads and writes the IP header area at the start of UD receive buffers.
//!
//! Nothing in this crate panics on any input; every malformed datagram is
//! reported as a [`WireError`].
//!
//! ```
//! use urdma_wire::{build, parse, Bth, IcrcContext, Opcode, PacketRepr, Reth};
//!
//! let ctx = IcrcContext::new(
//!     "192.0.2.1:49152".parse().unwrap(),
//!     "192.0.2.2:4791".parse().unwrap(),
//! );
//! let mut repr = PacketRepr::new(Bth::new(Opcode::RcWriteOnly, 0x12, 100));
//! repr.reth = Some(Reth { va: 0x1000, rkey: 7, dma_len: 5 });
//! let datagram = build(&repr, b"hello", &ctx).unwrap();
//! assert_eq!(datagram.len(), 12 + 16 + 5 + 3 + 4);
//!
//! // The receiver sees the same addresses: the sender as source.
//! let packet = parse(&datagram, &ctx).unwrap();
//! assert_eq!(packet.payload, b"hello");
//! assert_eq!(packet.repr.bth.pad_count, 3);
//! assert_eq!(packet.repr.reth, repr.reth);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cm;
pub mod cnp;
pub mod deth;
mod display;
mod error;
mod field;
pub mod grh;
pub mod icrc;
pub mod ipv4;
pub mod opcode;
pub mod packet;
pub mod reth;

pub use aeth::{rnr_timer_micros, AckSyndrome, Aeth, NakCode};
pub use atomic_ack_eth::AtomicAckEth;
pub use atomic_eth::AtomicEth;
pub use bth::Bth;
pub use deth::Deth;
pub use error::WireError;
pub use grh::{GrhRepr, GRH_LEN};
pub use icrc::{
    check_icrc, check_icrc_any_ident, compute_icrc, compute_icrc_with, reseal, set_ipv4_ident,
    IcrcContext, Ipv4Ident,
};
pub use ipv4::ipv4_header_sum;
pub use opcode::{OpKind, Opcode, OpcodeInfo, Position, Transport};
pub use packet::{
    build, close_unsealed, emit_headers, parse, parse_received, parse_unchecked, seal, Packet,
    PacketRepr,
};
pub use reth::Reth;

/// UDP destination port of RoCEv2 (IANA assigned).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Length of the Base Transport Header.
pub const BTH_LEN: usize = 12;
/// Length of the RDMA Extended Transport Header.
pub const RETH_LEN: usize = 16;
/// Length of the ACK Extended Transport Header.
pub const AETH_LEN: usize = 4;
/// Length of the Atomic Extended Transport Header.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the Atomic Acknowledge Extended Transport Header.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Length of the Datagram Extended Transport Header.
pub const DETH_LEN: usize = 8;
/// Length of the Immediate Data header.
pub const IMMDT_LEN: usize = 4;
/// Length of the Invalidate Extended Transport Header.
pub const IETH_LEN: usize = 4;
/// Length of the invariant CRC at the end of every packet.
pub const ICRC_LEN: usize = 4;

/// Packet sequence numbers are 24 bits wide.
pub const PSN_MASK: u32 = 0x00FF_FFFF;
/// Queue pair numbers are 24 bits wide.
pub const QPN_MASK: u32 = 0x00FF_FFFF;

/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

//! Invariant CRC (IBTA Vol 1, Annex A17.3.3).
//!
//! Every RoCEv2 packet ends with a 4-byte ICRC. It is the standard CRC-32
//! (the Ethernet/zlib polynomial, initial value and final inversion, exactly
//! what [`crc32fast::hash`] computes) over:
//!
//! 1. 8 bytes of `0xFF`, standing in for the InfiniBand LRH;
//! 2. the IP header with its variant fields set to all ones: for IPv4 the
//!    TOS byte (`0xFF`), the TTL (`0xFF`) and the header checksum
//!    (`0xFFFF`); for IPv6 the traffic class (`0xFF`), the flow label
//!    (`0xFFFFF`) and the hop limit (`0xFF`);
//! 3. the UDP header with its checksum set to `0xFFFF`;
//! 4. the BTH with its FECN/BECN/reserved byte (byte 4) set to `0xFF`;
//! 5. the rest of the datagram up to, not including, the ICRC (the other
//!    headers, the payload and the pad).
//!
//! **Byte order on the wire:** the 4 ICRC bytes are the CRC value in
//! little-endian order (least significant byte first), unlike every other
//! field of the packet. [`compute_icrc`] returns the CRC value; the wire
//! bytes are `compute_icrc(..)?.to_le_bytes()`. This was checked against
//! packets built by scapy's RoCE layer (`tests/data/icrc_vectors.txt`, made
//! by `tools/gen_icrc_vectors.py`), which packs the zlib CRC-32 the same
//! way.
//!
//! # The pseudo-header
//!
//! An ordinary UDP socket sees neither the IP header nor the UDP header, so
//! both are rebuilt from the addresses in an [`IcrcContext`] and the
//! datagram length:
//!
//! * IPv4: version 4, IHL 5 (no options), total length
//!   `20 + 8 + datagram length`, identification 0, flags DF with fragment
//!   offset 0, protocol 17 (UDP), source and destination address.
//! * IPv6: version 6, payload length `8 + datagram length`, next header 17,
//!   source and destination address (no extension headers).
//! * UDP: source port, destination port, length `8 + datagram length`.
//!
//! Here "datagram" means the UDP payload including the ICRC itself.
//!
//! The IPv4 identification and flags are not variant fields: a receiver
//! computes the ICRC over the values it actually received. urdma sends from
//! an *unconnected* UDP socket whose `IP_MTU_DISCOVER` option is
//! `IP_PMTUDISC_DO`, for which Linux sends DF with identification 0, so the
//! pseudo-header above is exactly what a receiver that sees the real IP
//! header uses. Other senders pick other values (Linux rxe sets DF and a
//! per-destination counter); [`check_icrc_any_ident`] recovers them from
//! the ICRC itself, see [`Ipv4Ident`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::bth::VARIANT_BYTE;
use crate::grh::{IPV4_HEADER_LEN, IPV4_VERSION_IHL, IPV6_HEADER_LEN, IP_PROTOCOL_UDP};

mod ident;
pub use ident::Ipv4Ident;

/// Offset of the IPv4 identification in the ICRC input: after the stand-in
/// LRH, the version/IHL and TOS bytes and the total length.
const IPV4_IDENT_OFFSET: usize = LRH_STAND_IN.len() + 4;
use crate::{WireError, BTH_LEN, ICRC_LEN};

const LRH_STAND_IN: [u8; 8] = [0xFF; 8];
const UDP_HEADER_LEN: usize = 8;
const MASKED_U8: u8 = 0xFF;
const MASKED_U16: u16 = 0xFFFF;
/// Version 6, traffic class and flow label all ones.
const IPV6_VERSION_TC_FLOW: [u8; 4] = [0x6F, 0xFF, 0xFF, 0xFF];

/// Addresses that the ICRC pseudo-header covers.
///
/// For a packet being sent, `src` is the local socket address and `dst` the
/// peer's; for a received packet, `src` is the peer's address (as returned
/// by `recv_from`) and `dst` the local address the packet was sent to. Both
/// must be IPv4 or both IPv6, where an IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`) counts as IPv4; otherwise ICRC computation fails with
/// [`WireError::AddressFamily`]. IPv6 scope ids and flow info are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcContext {
    /// Source address and UDP port of the datagram.
    pub src: SocketAddr,
    /// Destination address and UDP port of the datagram.
    pub dst: SocketAddr,
}

/// The IP addresses of an [`IcrcContext`] after mapping IPv4-mapped IPv6
/// addresses to IPv4.
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

impl IcrcContext {
    /// A context for a datagram from `src` to `dst`.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> IcrcContext {
        IcrcContext { src, dst }
    }

    /// The same addresses for a datagram going the other way.
    pub fn reversed(self) -> IcrcContext {
        IcrcContext {
            src: self.dst,
            dst: self.src,
        }
    }

    fn addrs(&self) -> Result<Addrs, WireError> {
        match (self.src.ip().to_canonical(), self.dst.ip().to_canonical()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Ok(Addrs::V4(s, d)),
            (IpAddr::V6(s), IpAddr::V6(d)) => Ok(Addrs::V6(s, d)),
            _ => Err(WireError::AddressFamily),
        }
    }
}

/// Converts a length to a 16-bit header field, failing if it does not fit.
fn len16(len: usize, datagram_len: usize) -> Result<[u8; 2], WireError> {
    u16::try_from(len)
        .map(u16::to_be_bytes)
        .map_err(|_| WireError::TooLong(datagram_len))
}

/// ICRC of a complete datagram without its ICRC field (icrc.rs); returned as
/// the u32 whose little-endian bytes are the 4 wire bytes.
///
/// `datagram_without_icrc` runs from the first byte of the BTH to the last
/// pad byte; the lengths in the pseudo-header count the 4 ICRC bytes too.
/// Fails with [`WireError::Truncated`] if it is shorter than a BTH,
/// [`WireError::AddressFamily`] if the context mixes IPv4 and IPv6, and
/// [`WireError::TooLong`] if the datagram does not fit in an IP packet.
pub fn compute_icrc(datagram_without_icrc: &[u8], ctx: &IcrcContext) -> Result<u32, WireError> {
    compute_icrc_with(datagram_without_icrc, ctx, Ipv4Ident::SENT)
}

/// [`compute_icrc`] with the given IPv4 identification and DF flag in the
/// pseudo-header (ignored for IPv6), as another sender may have used.
pub fn compute_icrc_with(
    datagram_without_icrc: &[u8],
    ctx: &IcrcContext,
    ident: Ipv4Ident,
) -> Result<u32, WireError> {
    let len = datagram_without_icrc.len();
    let (bth, rest) = datagram_without_icrc
        .split_at_checked(BTH_LEN)
        .ok_or(WireError::Truncated(len))?;
    let datagram_len = len.checked_add(ICRC_LEN).ok_or(WireError::TooLong(len))?;
    let udp_len = datagram_len
        .checked_add(UDP_HEADER_LEN)
        .ok_or(WireError::TooLong(datagram_len))?;

    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&LRH_STAND_IN);
    match ctx.addrs()? {
        Addrs::V4(src, dst) => {
            let total_len = udp_len
                .checked_add(IPV4_HEADER_LEN)
                .ok_or(WireError::TooLong(datagram_len))?;
            hasher.update(&[IPV4_VERSION_IHL, MASKED_U8]);
            hasher.update(&len16(total_len, datagram_len)?);
            hasher.update(&ident.wire_bytes());
            hasher.update(&[MASKED_U8, IP_PROTOCOL_UDP]);
            hasher.update(&MASKED_U16.to_be_bytes());
            hasher.update(&src.octets());
            hasher.update(&dst.octets());
        }
        Addrs::V6(src, dst) => {
            hasher.update(&IPV6_VERSION_TC_FLOW);
            hasher.update(&len16(udp_len, datagram_len)?);
            hasher.update(&[IP_PROTOCOL_UDP, MASKED_U8]);
            hasher.update(&src.octets());
            hasher.update(&dst.octets());
        }
    }
    hasher.update(&ctx.src.port().to_be_bytes());
    hasher.update(&ctx.dst.port().to_be_bytes());
    hasher.update(&len16(udp_len, datagram_len)?);
    hasher.update(&MASKED_U16.to_be_bytes());

    let mut masked_bth = [0u8; BTH_LEN];
    masked_bth.copy_from_slice(bth);
    if let Some(b) = masked_bth.get_mut(VARIANT_BYTE) {
        *b = MASKED_U8;
    }
    hasher.update(&masked_bth);
    hasher.update(rest);
    Ok(hasher.finalize())
}

/// Length of a datagram's part before its ICRC, if it holds a BTH and
/// an ICRC.
fn body_len(len: usize) -> Result<usize, WireError> {
    len.checked_sub(ICRC_LEN)
        .filter(|&body| body >= BTH_LEN)
        .ok_or(WireError::Truncated(len))
}

/// Splits a complete datagram into its body and the ICRC value it carries.
fn split_icrc(datagram: &[u8]) -> Result<(&[u8], u32), WireError> {
    let len = datagram.len();
    let body_len = body_len(len)?;
    let (body, icrc) = datagram
        .split_at_checked(body_len)
        .ok_or(WireError::Truncated(len))?;
    let wire: [u8; ICRC_LEN] = icrc.try_into().map_err(|_| WireError::Truncated(len))?;
    Ok((body, u32::from_le_bytes(wire)))
}

/// Checks the ICRC at the end of a complete datagram (BTH .. ICRC), over
/// the pseudo-header urdma's own packets carry (for IPv4: identification
/// 0 with DF): all 32 bits of the check.
///
/// Fails with [`WireError::BadIcrc`] on a mismatch, and as
/// [`compute_icrc`] does otherwise.
pub fn check_icrc(datagram: &[u8], ctx: &IcrcContext) -> Result<(), WireError> {
    let (body, received) = split_icrc(datagram)?;
    if compute_icrc(body, ctx)? == received {
        Ok(())
    } else {
        Err(WireError::BadIcrc)
    }
}

/// Checks the ICRC of a datagram from any sender, whatever IPv4
/// identification and DF flag the IP header that carried it held.
///
/// A UDP socket does not reveal those fields; this accepts the ICRC if some
/// value of them makes it valid, and returns that value (`None` for IPv6,
/// which has neither). The price is 17 of the 32 check bits: see
/// [`Ipv4Ident`]. Fails as [`check_icrc`] does.
pub fn check_icrc_any_ident(
    datagram: &[u8],
    ctx: &IcrcContext,
) -> Result<Option<Ipv4Ident>, WireError> {
    let (body, received) = split_icrc(datagram)?;
    let computed = compute_icrc(body, ctx)?;
    match ctx.addrs()? {
        Addrs::V6(..) if computed == received => Ok(None),
        Addrs::V6(..) => Err(WireError::BadIcrc),
        Addrs::V4(..) if computed == received => Ok(Some(Ipv4Ident::SENT)),
        Addrs::V4(..) => {
            let crc_input_len = LRH_STAND_IN.len() + IPV4_HEADER_LEN + UDP_HEADER_LEN + body.len();
            ident::solve(computed, received, crc_input_len)
                .map(Some)
                .ok_or(WireError::BadIcrc)
        }
    }
}

/// Rewrites the ICRC of a complete IPv4 datagram (BTH .. ICRC) whose ICRC
/// was computed for [`Ipv4Ident::SENT`], so that it is valid when the IP
/// header carries `ident` instead: what a sender needs when the kernel
/// gives each segment of a UDP GSO send its own identification (the head
/// 0, the next 1, and so on). For IPv4 datagrams only: an IPv6 header has
/// no such field. Fails with [`WireError::Truncated`] if the datagram is
/// shorter than a BTH and an ICRC.
pub fn set_ipv4_ident(datagram: &mut [u8], ident: Ipv4Ident) -> Result<(), WireError> {
    let len = datagram.len();
    let body_len = body_len(len)?;
    let crc_input_len = LRH_STAND_IN.len() + IPV4_HEADER_LEN + UDP_HEADER_LEN + body_len;
    let delta = ident::delta(ident, crc_input_len).ok_or(WireError::Truncated(len))?;
    let icrc = datagram
        .get_mut(body_len..)
        .ok_or(WireError::Truncated(len))?;
    let wire: [u8; ICRC_LEN] = (&*icrc).try_into().map_err(|_| WireError::Truncated(len))?;
    icrc.copy_from_slice(&(u32::from_le_bytes(wire) ^ delta).to_le_bytes());
    Ok(())
}

/// Write into a complete datagram's ICRC field (whatever it holds, as
/// [`crate::close_unsealed`] leaves it zero) the ICRC of the rest, for
/// urdma's identification ([`Ipv4Ident::SENT`]).
pub fn reseal(datagram: &mut [u8], ctx: &IcrcContext) -> Result<(), WireError> {
    let body_len = body_len(datagram.len())?;
    let (body, field) = datagram.split_at_mut(body_len);
    field.copy_from_slice(&compute_icrc(body, ctx)?.to_le_bytes());
    Ok(())
}

/// IPv4 header plus UDP header length, for callers sizing IP packets.
pub const IP_UDP_OVERHEAD_V4: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN;
/// IPv6 header plus UDP header length.
pub const IP_UDP_OVERHEAD_V6: usize = IPV6_HEADER_LEN + UDP_HEADER_LEN;

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(src: &str, dst: &str) -> IcrcContext {
        let parse = |s: &str| s.parse::<SocketAddr>();
        match (parse(src), parse(dst)) {
            (Ok(s), Ok(d)) => IcrcContext::new(s, d),
            _ => panic!("bad test address"),
        }
    }

    /// A SEND_ONLY to QP 0x11 with PSN 0 and 4 payload bytes.
    const DATAGRAM: [u8; 16] = [
        0x04, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 1, 2, 3, 4,
    ];

    /// The CRC input written out byte by byte for an IPv4 context.
    fn reference_v4() -> Vec<u8> {
        let mut v = vec![0xFF; 8];
        v.extend_from_slice(&[0x45, 0xFF, 0x00, 48, 0x00, 0x00, 0x40, 0x00]);
        v.extend_from_slice(&[0xFF, 17, 0xFF, 0xFF, 10, 0, 0, 1, 10, 0, 0, 2]);
        v.extend_from_slice(&[0xC3, 0x50, 0x12, 0xB7, 0x00, 28, 0xFF, 0xFF]);
        v.extend_from_slice(&[0x04, 0x00, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x11]);
        v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 1, 2, 3, 4]);
        v
    }

    #[test]
    fn ipv4_pseudo_header_layout() {
        let c = ctx("10.0.0.1:50000", "10.0.0.2:4791");
        assert_eq!(
            compute_icrc(&DATAGRAM, &c),
            Ok(crc32fast::hash(&reference_v4()))
        );
    }

    #[test]
    fn ipv6_pseudo_header_layout() {
        let c = ctx("[fe80::1]:50000", "[2001:db8::2]:4791");
        let mut v = vec![0xFF; 8];
        v.extend_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF, 0x00, 28, 17, 0xFF]);
        v.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&[0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(&[0xC3, 0x50, 0x12, 0xB7, 0x00, 28, 0xFF, 0xFF]);
        v.extend_from_slice(&[0x04, 0x00, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x11]);
        v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 1, 2, 3, 4]);
        assert_eq!(compute_icrc(&DATAGRAM, &c), Ok(crc32fast::hash(&v)));
    }

    #[test]
    fn mapped_ipv6_counts_as_ipv4() {
        let plain = ctx("10.0.0.1:50000", "10.0.0.2:4791");
        let mapped = ctx("[::ffff:10.0.0.1]:50000", "10.0.0.2:4791");
        let both = ctx("[::ffff:10.0.0.1]:50000", "[::ffff:10.0.0.2]:4791");
        let expected = compute_icrc(&DATAGRAM, &plain);
        assert!(expected.is_ok());
        assert_eq!(compute_icrc(&DATAGRAM, &mapped), expected);
        assert_eq!(compute_icrc(&DATAGRAM, &both), expected);
    }

    #[test]
    fn mixed_families_fail() {
        let c = ctx("10.0.0.1:1", "[2001:db8::1]:4791");
        assert_eq!(compute_icrc(&DATAGRAM, &c), Err(WireError::AddressFamily));
        assert_eq!(
            compute_icrc(&DATAGRAM, &c.reversed()),
            Err(WireError::AddressFamily)
        );
    }

    #[test]
    fn ecn_byte_is_masked_but_others_are_not() {
        let c = ctx("10.0.0.1:50000", "10.0.0.2:4791");
        let base = compute_icrc(&DATAGRAM, &c);
        let mut ecn = DATAGRAM;
        ecn[VARIANT_BYTE] = 0xC0;
        assert_eq!(compute_icrc(&ecn, &c), base);
        for i in (0..DATAGRAM.len()).filter(|&i| i != VARIANT_BYTE) {
            let mut other = DATAGRAM;
            other[i] ^= 0x01;
            assert_ne!(compute_icrc(&other, &c), base, "byte {i}");
        }
        assert_ne!(compute_icrc(&DATAGRAM, &c.reversed()), base);
    }

    #[test]
    fn check_reads_little_endian_icrc() {
        let c = ctx("10.0.0.1:50000", "10.0.0.2:4791");
        let crc = crc32fast::hash(&reference_v4());
        let mut datagram = DATAGRAM.to_vec();
        datagram.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(check_icrc(&datagram, &c), Ok(()));
        let mut swapped = DATAGRAM.to_vec();
        swapped.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(check_icrc(&swapped, &c), Err(WireError::BadIcrc));
    }

    #[test]
    fn short_and_long_inputs() {
        let c = ctx("10.0.0.1:1", "10.0.0.2:2");
        assert_eq!(compute_icrc(&[0; 11], &c), Err(WireError::Truncated(11)));
        assert_eq!(check_icrc(&[0; 15], &c), Err(WireError::Truncated(15)));
        // The largest datagram that fits an IPv4 packet, and one byte more.
        let max = 65_535 - IP_UDP_OVERHEAD_V4 - ICRC_LEN;
        let big = vec![0u8; max + 1];
        assert!(compute_icrc(big.get(..max).unwrap_or_default(), &c).is_ok());
        assert_eq!(compute_icrc(&big, &c), Err(WireError::TooLong(max + 5)));
        let c6 = ctx("[::1]:1", "[::1]:2");
        let max6 = 65_535 - UDP_HEADER_LEN - ICRC_LEN;
        let big6 = vec![0u8; max6 + 1];
        assert!(compute_icrc(big6.get(..max6).unwrap_or_default(), &c6).is_ok());
        assert_eq!(compute_icrc(&big6, &c6), Err(WireError::TooLong(max6 + 5)));
    }
}

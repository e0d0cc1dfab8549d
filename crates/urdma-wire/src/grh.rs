//! The GRH area at the start of a UD receive buffer.
//!
//! InfiniBand puts the 40-byte Global Route Header of a UD packet in front
//! of its payload in the receive buffer. RoCE v2 has no GRH on the wire; in
//! its place the receive buffer gets the IP header the packet came with:
//!
//! ```text
//!  IPv4:  bytes 0-19   unused, zero
//!         bytes 20-39  IPv4 header without options
//!  IPv6:  bytes 0-39   IPv6 header
//! ```
//!
//! [`GrhRepr`] writes that area for a received packet and reads it back,
//! as a verbs consumer does to address a reply to the sender.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::field::Reader;
use crate::{ipv4_header_sum, WireError};

/// Length of the GRH area at the start of a UD receive buffer.
pub const GRH_LEN: usize = 40;
/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of an IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// First byte of an IPv4 header without options: version 4, header length
/// 5 words.
pub const IPV4_VERSION_IHL: u8 = 0x45;
/// The IP version field of an IPv6 header.
pub const IPV6_VERSION: u8 = 6;
/// The IPv4 flags and fragment offset field with only "don't fragment" set.
pub const IPV4_FLAGS_DF: u16 = 0x4000;
/// The IPv4 identification field of unfragmented packets.
pub const IPV4_IDENTIFICATION: u16 = 0;
/// Time to live (IPv4) or hop limit (IPv6) of the packets urdma builds.
pub const DEFAULT_HOP_LIMIT: u8 = 64;
/// The IP protocol number (IPv6 next header) of UDP.
pub const IP_PROTOCOL_UDP: u8 = 17;

/// Where the IPv4 header starts in the GRH area.
const IPV4_OFFSET: usize = GRH_LEN - IPV4_HEADER_LEN;
/// Offset of the checksum field in an IPv4 header.
const IPV4_CHECKSUM_AT: usize = 10;
/// [`ipv4_header_sum`] of a header whose checksum is right.
const IPV4_SUM_OK: u16 = 0xFFFF;
/// Position of the version in the first 32-bit word of an IPv6 header.
const IPV6_VERSION_SHIFT: u32 = 28;
/// Position of the traffic class in the first word of an IPv6 header.
const IPV6_CLASS_SHIFT: u32 = 20;
/// Width mask of the IPv6 flow label.
const FLOW_LABEL_MASK: u32 = 0x000F_FFFF;

/// The contents of a GRH area: the IP header of a received RoCE v2 packet.
///
/// An area with an IPv4 header yields IPv4 addresses and one with an IPv6
/// header yields IPv6 addresses (IPv4-mapped ones stay IPv6), so the two
/// addresses of a parsed repr are always of the same family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrhRepr {
    /// Source address of the packet (the sender).
    pub src: IpAddr,
    /// Destination address of the packet (the receiver).
    pub dst: IpAddr,
    /// Length of the IP payload, the UDP datagram: the IPv6 payload length,
    /// or the IPv4 total length minus the IPv4 header.
    pub payload_len: u16,
    /// IPv4 time to live or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv4 type of service or IPv6 traffic class.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits; higher bits are not emitted). An IPv4
    /// header has none: it is not emitted and parses as 0.
    pub flow_label: u32,
}

impl GrhRepr {
    /// The IP header of a UDP datagram of `payload_len` bytes from `src` to
    /// `dst`, as urdma sends it: hop limit [`DEFAULT_HOP_LIMIT`], traffic
    /// class and flow label 0.
    pub fn new(src: IpAddr, dst: IpAddr, payload_len: u16) -> GrhRepr {
        GrhRepr {
            src,
            dst,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Reads the first [`GRH_LEN`] bytes of `buf`.
    ///
    /// The area holds IPv4 if its last 20 bytes are an IPv4 header without
    /// options whose checksum is right; the first 20 bytes are then not
    /// looked at, nor are the IPv4 protocol, identification and fragment
    /// fields. Otherwise it holds IPv6 if its version field says 6, and
    /// then the next header must be UDP. A total length below the IPv4
    /// header length gives a `payload_len` of 0.
    ///
    /// Fails with [`WireError::Truncated`] on a short buffer,
    /// [`WireError::NotUdp`] on an IPv6 header of another protocol,
    /// [`WireError::BadIpChecksum`] on an IPv4 header with a wrong checksum
    /// and [`WireError::NoIpHeader`] on an area that holds neither header.
    pub fn parse(buf: &[u8]) -> Result<GrhRepr, WireError> {
        let area = buf
            .first_chunk::<GRH_LEN>()
            .ok_or(WireError::Truncated(buf.len()))?;
        let ipv4 = area
            .last_chunk::<IPV4_HEADER_LEN>()
            .ok_or(WireError::Truncated(buf.len()))?;
        let is_ipv4 = ipv4.first() == Some(&IPV4_VERSION_IHL);
        if is_ipv4 && ipv4_header_sum(ipv4) == IPV4_SUM_OK {
            return Self::parse_ipv4(ipv4);
        }
        let version = area.first().map_or(0, |b| b >> 4);
        if version == IPV6_VERSION {
            Self::parse_ipv6(area)
        } else if is_ipv4 {
            Err(WireError::BadIpChecksum)
        } else {
            Err(WireError::NoIpHeader)
        }
    }

    /// Reads an IPv4 header whose version and checksum were checked.
    fn parse_ipv4(header: &[u8; IPV4_HEADER_LEN]) -> Result<GrhRepr, WireError> {
        let mut r = Reader::new(header);
        let _version_ihl = r.u8()?;
        let traffic_class = r.u8()?;
        let total_len = r.u16()?;
        let _identification = r.u16()?;
        let _flags_fragment = r.u16()?;
        let hop_limit = r.u8()?;
        let _protocol = r.u8()?;
        let _checksum = r.u16()?;
        let src = Ipv4Addr::from(r.array::<4>()?);
        let dst = Ipv4Addr::from(r.array::<4>()?);
        Ok(GrhRepr {
            src: src.into(),
            dst: dst.into(),
            // IPV4_HEADER_LEN is 20: the cast cannot truncate.
            payload_len: total_len.saturating_sub(IPV4_HEADER_LEN as u16),
            hop_limit,
            traffic_class,
            flow_label: 0,
        })
    }

    /// Reads an IPv6 header whose version was checked.
    fn parse_ipv6(header: &[u8; IPV6_HEADER_LEN]) -> Result<GrhRepr, WireError> {
        let mut r = Reader::new(header);
        let word = r.u32()?;
        let payload_len = r.u16()?;
        let next_header = r.u8()?;
        if next_header != IP_PROTOCOL_UDP {
            return Err(WireError::NotUdp(next_header));
        }
        let hop_limit = r.u8()?;
        let src = Ipv6Addr::from(r.array::<16>()?);
        let dst = Ipv6Addr::from(r.array::<16>()?);
        Ok(GrhRepr {
            src: src.into(),
            dst: dst.into(),
            payload_len,
            hop_limit,
            // The mask keeps 8 bits: the cast cannot truncate.
            traffic_class: ((word >> IPV6_CLASS_SHIFT) & 0xFF) as u8,
            flow_label: word & FLOW_LABEL_MASK,
        })
    }

    /// Writes the area into `buf`.
    ///
    /// With two IPv4 addresses: 20 zero bytes, then an IPv4 header with
    /// "don't fragment" set, protocol UDP and a valid checksum (a
    /// `payload_len` too large for the total length field makes it
    /// 0xFFFF). Otherwise an IPv6 header with next header UDP, an IPv4
    /// address being written IPv4-mapped (`::ffff:a.b.c.d`).
    pub fn emit(&self, buf: &mut [u8; GRH_LEN]) {
        *buf = match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let mut area = [0u8; GRH_LEN];
                let (_unused, header) = area.split_at_mut(IPV4_OFFSET);
                header.copy_from_slice(&self.ipv4_header(src, dst));
                area
            }
            (src, dst) => self.ipv6_header(to_ipv6(src), to_ipv6(dst)),
        };
    }

    /// The IPv4 header of this repr, checksum included.
    fn ipv4_header(&self, src: Ipv4Addr, dst: Ipv4Addr) -> [u8; IPV4_HEADER_LEN] {
        // IPV4_HEADER_LEN is 20: the cast cannot truncate.
        let total_len = self.payload_len.saturating_add(IPV4_HEADER_LEN as u16);
        let [len_hi, len_lo] = total_len.to_be_bytes();
        let [id_hi, id_lo] = IPV4_IDENTIFICATION.to_be_bytes();
        let [flags_hi, flags_lo] = IPV4_FLAGS_DF.to_be_bytes();
        let [s0, s1, s2, s3] = src.octets();
        let [d0, d1, d2, d3] = dst.octets();
        let mut header = [
            IPV4_VERSION_IHL,
            self.traffic_class,
            len_hi,
            len_lo,
            id_hi,
            id_lo,
            flags_hi,
            flags_lo,
            self.hop_limit,
            IP_PROTOCOL_UDP,
            0, // checksum, filled in below
            0,
            s0,
            s1,
            s2,
            s3,
            d0,
            d1,
            d2,
            d3,
        ];
        let checksum = !ipv4_header_sum(&header);
        if let Some(field) = header.get_mut(IPV4_CHECKSUM_AT..IPV4_CHECKSUM_AT + 2) {
            field.copy_from_slice(&checksum.to_be_bytes());
        }
        header
    }

    /// The IPv6 header of this repr.
    fn ipv6_header(&self, src: Ipv6Addr, dst: Ipv6Addr) -> [u8; IPV6_HEADER_LEN] {
        let word = u32::from(IPV6_VERSION) << IPV6_VERSION_SHIFT
            | u32::from(self.traffic_class) << IPV6_CLASS_SHIFT
            | (self.flow_label & FLOW_LABEL_MASK);
        let mut header = [0u8; IPV6_HEADER_LEN];
        let fixed = word
            .to_be_bytes()
            .into_iter()
            .chain(self.payload_len.to_be_bytes())
            .chain([IP_PROTOCOL_UDP, self.hop_limit])
            .chain(src.octets())
            .chain(dst.octets());
        for (out, byte) in header.iter_mut().zip(fixed) {
            *out = byte;
        }
        header
    }
}

/// `ip` as an IPv6 address, IPv4 ones mapped.
fn to_ipv6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emitted(repr: &GrhRepr) -> [u8; GRH_LEN] {
        let mut area = [0xEEu8; GRH_LEN];
        repr.emit(&mut area);
        area
    }

    fn ipv4_of(area: &[u8; GRH_LEN]) -> [u8; IPV4_HEADER_LEN] {
        area.last_chunk().copied().unwrap_or_default()
    }

    fn v4_repr() -> GrhRepr {
        let mut repr = GrhRepr::new(
            Ipv4Addr::new(192, 0, 2, 1).into(),
            Ipv4Addr::new(192, 0, 2, 2).into(),
            100,
        );
        repr.traffic_class = 0x28;
        repr.hop_limit = 7;
        repr
    }

    fn v6_repr() -> GrhRepr {
        GrhRepr {
            src: "2001:db8::1"
                .parse()
                .unwrap_or(Ipv6Addr::UNSPECIFIED.into()),
            dst: "2001:db8::2"
                .parse()
                .unwrap_or(Ipv6Addr::UNSPECIFIED.into()),
            payload_len: 1060,
            hop_limit: 3,
            traffic_class: 0xA5,
            flow_label: 0xB_CDEF,
        }
    }

    /// `area` with its IPv4 checksum recomputed.
    fn resummed(mut area: [u8; GRH_LEN]) -> [u8; GRH_LEN] {
        area[IPV4_OFFSET + IPV4_CHECKSUM_AT] = 0;
        area[IPV4_OFFSET + IPV4_CHECKSUM_AT + 1] = 0;
        let sum = !ipv4_header_sum(&ipv4_of(&area));
        area[IPV4_OFFSET + IPV4_CHECKSUM_AT..IPV4_OFFSET + IPV4_CHECKSUM_AT + 2]
            .copy_from_slice(&sum.to_be_bytes());
        area
    }

    #[test]
    fn ipv4_round_trip_and_layout() {
        let repr = v4_repr();
        let area = emitted(&repr);
        assert_eq!(GrhRepr::parse(&area), Ok(repr));
        assert_eq!(area[..IPV4_OFFSET], [0u8; IPV4_OFFSET]);
        let header = ipv4_of(&area);
        assert_eq!(ipv4_header_sum(&header), IPV4_SUM_OK);
        assert_eq!(
            header,
            [0x45, 0x28, 0, 120, 0, 0, 0x40, 0, 7, 17, 0xEF, 0x49, 192, 0, 2, 1, 192, 0, 2, 2]
        );
    }

    #[test]
    fn ipv6_round_trip_and_layout() {
        let repr = v6_repr();
        let area = emitted(&repr);
        assert_eq!(GrhRepr::parse(&area), Ok(repr));
        assert_eq!(
            area[..8],
            [0x6A, 0x5B, 0xCD, 0xEF, 0x04, 0x24, 17, 3],
            "version, class, flow label, length, next header, hop limit"
        );
        assert_eq!(area[8..10], [0x20, 0x01]);
        assert_eq!(area[39], 2);
    }

    #[test]
    fn new_uses_defaults() {
        let repr = GrhRepr::new(
            Ipv4Addr::LOCALHOST.into(),
            Ipv4Addr::new(127, 0, 0, 2).into(),
            5,
        );
        assert_eq!(
            (repr.hop_limit, repr.traffic_class, repr.flow_label),
            (DEFAULT_HOP_LIMIT, 0, 0)
        );
        let area = emitted(&repr);
        assert_eq!(area[IPV4_OFFSET + 8], 64);
        assert_eq!(area[IPV4_OFFSET + 2..IPV4_OFFSET + 4], [0, 25]);
    }

    #[test]
    fn mixed_families_emit_ipv6_with_mapped_addresses() {
        let v4 = Ipv4Addr::new(10, 0, 0, 1);
        let v6: Ipv6Addr = "fe80::1".parse().unwrap_or(Ipv6Addr::LOCALHOST);
        let area = emitted(&GrhRepr::new(v4.into(), v6.into(), 9));
        assert_eq!(
            GrhRepr::parse(&area),
            Ok(GrhRepr::new(v4.to_ipv6_mapped().into(), v6.into(), 9))
        );
    }

    #[test]
    fn wide_fields_are_clamped_or_masked() {
        let mut repr = v4_repr();
        repr.payload_len = u16::MAX;
        let area = emitted(&repr);
        assert_eq!(area[IPV4_OFFSET + 2..IPV4_OFFSET + 4], [0xFF, 0xFF]);
        assert_eq!(
            GrhRepr::parse(&area).map(|r| r.payload_len),
            Ok(u16::MAX - 20)
        );
        let mut repr = v6_repr();
        repr.flow_label = 0xFFF0_0001;
        let area = emitted(&repr);
        assert_eq!(GrhRepr::parse(&area).map(|r| r.flow_label), Ok(1));
    }

    #[test]
    fn ipv4_checksum_errors_are_refused() {
        let area = emitted(&v4_repr());
        for at in IPV4_OFFSET..GRH_LEN {
            let mut bad = area;
            bad[at] ^= 0x01;
            let expected = if at == IPV4_OFFSET {
                // 0x44: no longer an IPv4 header without options.
                Err(WireError::NoIpHeader)
            } else {
                Err(WireError::BadIpChecksum)
            };
            assert_eq!(GrhRepr::parse(&bad), expected, "byte {at}");
        }
    }

    #[test]
    fn ipv4_ignores_the_unused_bytes_and_the_protocol() {
        let repr = v4_repr();
        let mut area = emitted(&repr);
        area[..IPV4_OFFSET].fill(0x5A);
        assert_eq!(GrhRepr::parse(&area), Ok(repr));
        // An IPv6 version field in front does not matter either.
        area[0] = 0x60;
        assert_eq!(GrhRepr::parse(&area), Ok(repr));
        area[IPV4_OFFSET + 9] = 6;
        assert_eq!(GrhRepr::parse(&resummed(area)), Ok(repr));
    }

    #[test]
    fn ipv4_options_and_short_lengths() {
        let mut area = emitted(&v4_repr());
        area[IPV4_OFFSET] = 0x46;
        assert_eq!(GrhRepr::parse(&resummed(area)), Err(WireError::NoIpHeader));
        let mut area = emitted(&v4_repr());
        area[IPV4_OFFSET + 2..IPV4_OFFSET + 4].copy_from_slice(&[0, 19]);
        assert_eq!(
            GrhRepr::parse(&resummed(area)).map(|r| r.payload_len),
            Ok(0)
        );
    }

    #[test]
    fn ipv6_must_carry_udp() {
        let mut area = emitted(&v6_repr());
        area[6] = 6;
        assert_eq!(GrhRepr::parse(&area), Err(WireError::NotUdp(6)));
        let mut zero_but_version = [0u8; GRH_LEN];
        zero_but_version[0] = 0x60;
        assert_eq!(GrhRepr::parse(&zero_but_version), Err(WireError::NotUdp(0)));
        zero_but_version[6] = IP_PROTOCOL_UDP;
        assert_eq!(
            GrhRepr::parse(&zero_but_version).map(|r| r.src),
            Ok(Ipv6Addr::UNSPECIFIED.into())
        );
    }

    #[test]
    fn other_versions_and_short_input_are_refused() {
        assert_eq!(GrhRepr::parse(&[0u8; GRH_LEN]), Err(WireError::NoIpHeader));
        let mut area = emitted(&v6_repr());
        area[0] = 0x40 | (area[0] & 0x0F);
        assert_eq!(GrhRepr::parse(&area), Err(WireError::NoIpHeader));
        let good = emitted(&v4_repr());
        for len in 0..GRH_LEN {
            assert_eq!(GrhRepr::parse(&good[..len]), Err(WireError::Truncated(len)));
        }
        let mut long = good.to_vec();
        long.extend_from_slice(&[1, 2, 3]);
        assert_eq!(GrhRepr::parse(&long), Ok(v4_repr()));
    }
}

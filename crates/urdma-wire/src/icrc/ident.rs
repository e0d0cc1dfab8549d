//! Recovering the IPv4 identification and DF flag a received ICRC covers.
//!
//! A receiver that reads datagrams from a UDP socket never sees the IPv4
//! header, yet the ICRC covers two of its fields that are not masked: the
//! 16-bit identification and the flags (of which only DF may be set on an
//! unfragmented RoCE packet). Senders choose them freely: Linux rxe sets DF
//! and a per-destination counter, urdma's own sockets send DF with
//! identification 0, other stacks may clear DF.
//!
//! The CRC is affine over GF(2): flipping a set of input bits changes the
//! CRC by the XOR of the changes each bit makes alone, and a change in the
//! 4 bytes of identification and flags, followed by `k` more bytes, is the
//! CRC of those 4 bytes alone carried through `k` zero bytes. So the
//! difference between the received ICRC and the one computed with
//! identification 0 and DF set must be a combination of 17 known columns
//! (16 identification bits and the DF bit). Gaussian elimination finds the
//! unique combination, or shows there is none.
//!
//! What this leaves: of the 32 check bits, 17 are spent on the unknown
//! fields, so a corrupted packet passes with probability about 2^-15
//! instead of 2^-32 (an error is missed when its CRC change happens to be
//! a combination of the 17 columns; unlike the full check, this is true of
//! a few single-bit errors too). The link's own CRC and the UDP checksum,
//! when the sender fills it, guard the bytes before this check; callers
//! that know a peer sends identification 0 use the full check instead.

use super::IPV4_IDENT_OFFSET;
use crate::grh::IPV4_FLAGS_DF as DF;

/// Bits that may differ from the values urdma assumes: 16 bits of
/// identification and the DF flag.
const UNKNOWN_BITS: usize = 17;
/// Column index of the DF flag; columns `0..16` are identification bits.
const DF_COLUMN: usize = 16;

/// The IPv4 identification and DF flag of the header that carried a
/// datagram, as far as its ICRC tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Ident {
    /// The IPv4 identification field.
    pub identification: u16,
    /// Whether the "don't fragment" flag was set.
    pub dont_fragment: bool,
}

impl Ipv4Ident {
    /// What urdma's own sockets send: identification 0 with DF set.
    pub const SENT: Ipv4Ident = Ipv4Ident {
        identification: 0,
        dont_fragment: true,
    };

    /// Segments of one UDP GSO send at most: the `k`-th leaves with
    /// identification `k`.
    pub const GSO_SEGMENTS: u16 = 64;

    /// Whether urdma's own sockets send this: DF with identification 0
    /// for a datagram sent alone, or `k` for the `k`-th segment of a GSO
    /// send.
    pub fn is_urdma(self) -> bool {
        self.dont_fragment && self.identification < Self::GSO_SEGMENTS
    }

    /// The identification and flags fields as they appear on the wire
    /// (4 bytes, big-endian).
    pub fn wire_bytes(self) -> [u8; 4] {
        let [id_hi, id_lo] = self.identification.to_be_bytes();
        let flags = if self.dont_fragment { DF } else { 0 };
        let [fl_hi, fl_lo] = flags.to_be_bytes();
        [id_hi, id_lo, fl_hi, fl_lo]
    }
}

/// The CRC change caused by changing the 4 identification/flags bytes by
/// `delta`, when `trailing` bytes of CRC input follow them.
fn column(delta: [u8; 4], trailing: u64) -> u32 {
    let change = crc32fast::hash(&delta) ^ crc32fast::hash(&[0; 4]);
    let mut shifted = crc32fast::Hasher::new_with_initial(change);
    shifted.combine(&crc32fast::Hasher::new_with_initial_len(0, trailing));
    shifted.finalize()
}

/// A column reduced during elimination, with the unknown bits it stands for.
#[derive(Clone, Copy)]
struct Reduced {
    vector: u32,
    bits: u32,
}

/// Finds the identification and DF flag for which the ICRC computed with
/// [`Ipv4Ident::SENT`] (`computed`) becomes `received`, where `crc_input_len`
/// is the length of the whole ICRC input (stand-in LRH, pseudo-headers and
/// datagram without ICRC). `None` if no value of those fields explains the
/// difference: the packet is corrupt.
pub fn solve(computed: u32, received: u32, crc_input_len: usize) -> Option<Ipv4Ident> {
    let columns = columns_for(crc_input_len)?;
    // First the identifications of GSO segments (1, 2, ... with DF), what
    // urdma's own senders use: a few XORs instead of the elimination.
    // The columns are independent, so a match is the only solution.
    let diff = computed ^ received;
    let mut small = [0u32; Ipv4Ident::GSO_SEGMENTS as usize];
    for k in 1..small.len() {
        small[k] = small[k & (k - 1)] ^ columns[k.trailing_zeros() as usize];
        if small[k] == diff {
            return Some(Ipv4Ident {
                identification: k as u16,
                dont_fragment: true,
            });
        }
    }
    // Pivot table: pivots[b] holds a reduced column whose highest set bit
    // is b.
    let mut pivots: [Option<Reduced>; 32] = [None; 32];
    for (index, &vector) in columns.iter().enumerate() {
        let reduced = reduce(
            &pivots,
            Reduced {
                vector,
                bits: 1 << index,
            },
        );
        if reduced.vector != 0 {
            let top = 31 - reduced.vector.leading_zeros() as usize;
            if let Some(slot) = pivots.get_mut(top) {
                *slot = Some(reduced);
            }
        }
    }
    let rest = reduce(
        &pivots,
        Reduced {
            vector: computed ^ received,
            bits: 0,
        },
    );
    if rest.vector != 0 {
        return None;
    }
    let identification = (rest.bits & 0xFFFF) as u16;
    // The DF column flips DF away from the assumed "set".
    let dont_fragment = rest.bits & (1 << DF_COLUMN) == 0;
    Some(Ipv4Ident {
        identification,
        dont_fragment,
    })
}

/// How the ICRC of a packet whose CRC input is `crc_input_len` bytes
/// changes when its IPv4 header carries `ident` instead of
/// [`Ipv4Ident::SENT`] (XOR it into the ICRC). None if the length is
/// shorter than the IPv4 pseudo-header.
pub fn delta(ident: Ipv4Ident, crc_input_len: usize) -> Option<u32> {
    let columns = columns_for(crc_input_len)?;
    let mut d = 0;
    for (bit, c) in columns.iter().take(16).enumerate() {
        if ident.identification & (1 << bit) != 0 {
            d ^= c;
        }
    }
    if !ident.dont_fragment {
        d ^= columns[DF_COLUMN];
    }
    Some(d)
}

/// The CRC change each unknown bit makes alone, for one input length.
type Columns = [u32; UNKNOWN_BITS];

/// Lengths whose columns are kept (packets of a flow mostly share a few).
const CACHED_LENGTHS: usize = 8;

/// The columns for inputs of `crc_input_len` bytes, from a small
/// per-thread cache: each costs 17 CRC shifts to compute.
fn columns_for(crc_input_len: usize) -> Option<Columns> {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<Vec<(usize, Columns)>> = const { RefCell::new(Vec::new()) };
    }
    let trailing = crc_input_len.checked_sub(IPV4_IDENT_OFFSET + 4)? as u64;
    Some(CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(i) = c.iter().position(|(l, _)| *l == crc_input_len) {
            let hit = c.remove(i);
            c.insert(0, hit);
            return hit.1;
        }
        let mut columns = [0u32; UNKNOWN_BITS];
        for (index, col) in columns.iter_mut().enumerate() {
            let delta = if index == DF_COLUMN {
                [0, 0, (DF >> 8) as u8, 0]
            } else {
                let [hi, lo] = (1u16 << index).to_be_bytes();
                [hi, lo, 0, 0]
            };
            *col = column(delta, trailing);
        }
        c.insert(0, (crc_input_len, columns));
        c.truncate(CACHED_LENGTHS);
        columns
    }))
}

/// Eliminates the pivots' leading bits from `r`, highest first.
fn reduce(pivots: &[Option<Reduced>; 32], mut r: Reduced) -> Reduced {
    for bit in (0..32).rev() {
        if r.vector & (1 << bit) == 0 {
            continue;
        }
        if let Some(Some(p)) = pivots.get(bit) {
            r.vector ^= p.vector;
            r.bits ^= p.bits;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{check_icrc, check_icrc_any_ident, compute_icrc_with, IcrcContext};
    use crate::WireError;
    use std::net::SocketAddr;

    fn ctx(src: &str, dst: &str) -> IcrcContext {
        match (src.parse::<SocketAddr>(), dst.parse::<SocketAddr>()) {
            (Ok(s), Ok(d)) => IcrcContext::new(s, d),
            _ => panic!("bad test address"),
        }
    }

    /// A datagram of `len` bytes (BTH onwards) with the ICRC a sender using
    /// `ident` computes.
    fn datagram(len: usize, ident: Ipv4Ident, c: &IcrcContext) -> Vec<u8> {
        let mut d: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let icrc = compute_icrc_with(&d, c, ident);
        assert!(icrc.is_ok());
        d.extend_from_slice(&icrc.unwrap_or_default().to_le_bytes());
        d
    }

    const IDENTS: [Ipv4Ident; 5] = [
        Ipv4Ident::SENT,
        Ipv4Ident {
            identification: 0x1234,
            dont_fragment: true,
        },
        Ipv4Ident {
            identification: 0xFFFF,
            dont_fragment: true,
        },
        Ipv4Ident {
            identification: 0,
            dont_fragment: false,
        },
        Ipv4Ident {
            identification: 0x8001,
            dont_fragment: false,
        },
    ];

    #[test]
    fn an_identification_set_afterwards_matches_one_computed_with_it() {
        let c = ctx("127.0.0.1:49153", "127.0.0.2:4791");
        for len in [12, 28, 4096 + 28] {
            for ident in IDENTS {
                let mut d = datagram(len, Ipv4Ident::SENT, &c);
                assert_eq!(crate::icrc::set_ipv4_ident(&mut d, ident), Ok(()));
                assert_eq!(d, datagram(len, ident, &c), "len {len} {ident:?}");
            }
        }
        let mut short = vec![0u8; 15];
        assert!(crate::icrc::set_ipv4_ident(&mut short, IDENTS[1]).is_err());
    }

    #[test]
    fn gso_segment_identifications_are_recovered() {
        let c = ctx("127.0.0.1:49153", "127.0.0.2:4791");
        for k in 0..Ipv4Ident::GSO_SEGMENTS + 2 {
            let ident = Ipv4Ident {
                identification: k,
                dont_fragment: true,
            };
            let d = datagram(1024 + 28, ident, &c);
            assert_eq!(check_icrc_any_ident(&d, &c), Ok(Some(ident)), "{k}");
            assert_eq!(ident.is_urdma(), k < Ipv4Ident::GSO_SEGMENTS);
        }
    }

    #[test]
    fn the_sender_identification_is_recovered() {
        let c = ctx("169.254.1.1:49153", "169.254.1.2:4791");
        for len in [12, 28, 61, 1024, 4096 + 28] {
            for ident in IDENTS {
                let d = datagram(len, ident, &c);
                assert_eq!(
                    check_icrc_any_ident(&d, &c),
                    Ok(Some(ident)),
                    "len {len} {ident:?}"
                );
                assert_eq!(check_icrc(&d, &c).is_ok(), ident == Ipv4Ident::SENT);
            }
        }
    }

    /// Every single-bit flip of `d` except in the BTH's variant byte.
    fn flips(d: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..d.len() * 8)
            .filter(|bit| bit / 8 != crate::bth::VARIANT_BYTE)
            .map(move |bit| {
                let mut bad = d.to_vec();
                if let Some(b) = bad.get_mut(bit / 8) {
                    *b ^= 1 << (bit % 8);
                }
                bad
            })
    }

    #[test]
    fn the_full_check_refuses_every_single_bit_flip() {
        let c = ctx("169.254.1.1:49153", "169.254.1.2:4791");
        for len in [12, 300] {
            let d = datagram(len, Ipv4Ident::SENT, &c);
            for bad in flips(&d) {
                assert_eq!(check_icrc(&bad, &c), Err(WireError::BadIcrc));
            }
        }
    }

    /// With 15 bits of check left, a few error patterns pass: a fixed set,
    /// since the check is linear, whatever identification the packet
    /// carried. For these packets that is at most one bit position of
    /// about 2,500 (the full check refuses it).
    #[test]
    fn the_recovering_check_misses_the_same_few_bit_flips_whatever_the_identification() {
        let c = ctx("169.254.1.1:49153", "169.254.1.2:4791");
        for len in [12, 300] {
            let missed: Vec<Vec<usize>> = [IDENTS[0], IDENTS[1], IDENTS[4]]
                .iter()
                .map(|&ident| {
                    let d = datagram(len, ident, &c);
                    flips(&d)
                        .enumerate()
                        .filter(|(_, bad)| check_icrc_any_ident(bad, &c).is_ok())
                        .map(|(i, _)| i)
                        .collect()
                })
                .collect();
            assert!(missed.windows(2).all(|w| w[0] == w[1]), "{missed:?}");
            assert!(missed[0].len() <= 1, "len {len}: {missed:?}");
        }
    }

    #[test]
    fn a_wrong_address_or_port_is_refused_whatever_the_identification() {
        let c = ctx("169.254.1.1:49153", "169.254.1.2:4791");
        let d = datagram(64, IDENTS[1], &c);
        for other in [
            ctx("169.254.1.3:49153", "169.254.1.2:4791"),
            ctx("169.254.1.1:49154", "169.254.1.2:4791"),
            c.reversed(),
        ] {
            assert_eq!(check_icrc_any_ident(&d, &other), Err(WireError::BadIcrc));
        }
    }

    #[test]
    fn ipv6_has_no_identification_to_recover() {
        let c = ctx("[fe80::1]:49153", "[fe80::2]:4791");
        let d = datagram(64, Ipv4Ident::SENT, &c);
        assert_eq!(check_icrc_any_ident(&d, &c), Ok(None));
        let mut bad = d.clone();
        if let Some(b) = bad.get_mut(20) {
            *b ^= 0x10;
        }
        assert_eq!(check_icrc_any_ident(&bad, &c), Err(WireError::BadIcrc));
    }
}

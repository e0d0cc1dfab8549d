//! Property tests: parsing never panics, whatever the input, valid packets
//! survive a build/parse round trip, and whatever parses re-emits to the
//! same packet. The same for GRH areas.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use urdma_wire::opcode::TABLE;
use urdma_wire::{
    build, emit_headers, parse, parse_unchecked, seal, AckSyndrome, Aeth, AtomicAckEth, AtomicEth,
    Bth, Deth, GrhRepr, IcrcContext, NakCode, PacketRepr, Reth, BTH_LEN, GRH_LEN, ICRC_LEN,
};

fn arb_ctx() -> impl Strategy<Value = IcrcContext> {
    let v4 = any::<[u8; 4]>().prop_map(|o| IpAddr::V4(Ipv4Addr::from(o)));
    let v6 = any::<[u8; 16]>().prop_map(|o| IpAddr::V6(Ipv6Addr::from(o)));
    let ip = prop_oneof![v4, v6];
    (ip.clone(), any::<u16>(), ip, any::<u16>())
        .prop_map(|(a, pa, b, pb)| IcrcContext::new(SocketAddr::new(a, pa), SocketAddr::new(b, pb)))
}

/// A context whose two addresses are of the same family.
fn arb_good_ctx() -> impl Strategy<Value = IcrcContext> {
    let v4 =
        (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
    let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
        .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
    (prop_oneof![v4, v6], any::<u16>(), any::<u16>()).prop_map(|((a, b), pa, pb)| {
        IcrcContext::new(SocketAddr::new(a, pa), SocketAddr::new(b, pb))
    })
}

fn arb_syndrome() -> impl Strategy<Value = AckSyndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| AckSyndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| AckSyndrome::RnrNak { timer }),
        prop_oneof![
            Just(NakCode::PsnSequenceError),
            Just(NakCode::InvalidRequest),
            Just(NakCode::RemoteAccessError),
            Just(NakCode::RemoteOperationalError),
            Just(NakCode::InvalidRdRequest),
        ]
        .prop_map(AckSyndrome::Nak),
    ]
}

/// A valid header set for a random opcode, with random field values (all
/// within their wire widths) and a payload if the opcode takes one.
fn arb_packet() -> impl Strategy<Value = (PacketRepr, Vec<u8>)> {
    (
        0..TABLE.len(),
        any::<(bool, bool, u16, bool, bool, bool)>(),
        (0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24, any::<u32>()),
        any::<(u64, u32, u32, u64, u64)>(),
        arb_syndrome(),
        any::<(u32, u32)>(),
        proptest::collection::vec(any::<u8>(), 0..80),
    )
        .prop_map(
            |(
                row,
                flags,
                (qp, psn, msn, qkey),
                (va, rkey, len, a, b),
                syndrome,
                (imm, inv),
                payload,
            )| {
                let info = TABLE[row];
                let (solicited, migreq, pkey, fecn, becn, ack_req) = flags;
                let mut bth = Bth::new(info.opcode, qp, psn);
                bth.solicited = solicited;
                bth.migreq = migreq;
                bth.pkey = pkey;
                bth.fecn = fecn;
                bth.becn = becn;
                bth.ack_req = ack_req;
                bth.pad_count = ((4 - payload.len() % 4) % 4) as u8;
                let mut repr = PacketRepr::new(bth);
                if info.has_deth {
                    repr.deth = Some(Deth { qkey, src_qp: psn });
                }
                if info.has_reth {
                    repr.reth = Some(Reth {
                        va,
                        rkey,
                        dma_len: len,
                    });
                }
                if info.has_atomic_eth {
                    repr.atomic_eth = Some(AtomicEth {
                        va,
                        rkey,
                        swap_add: a,
                        compare: b,
                    });
                }
                if info.has_aeth {
                    repr.aeth = Some(Aeth { syndrome, msn });
                }
                if info.has_atomic_ack_eth {
                    repr.atomic_ack_eth = Some(AtomicAckEth { orig: a });
                }
                if info.has_immdt {
                    repr.immdt = Some(imm);
                }
                if info.has_ieth {
                    repr.ieth = Some(inv);
                }
                let payload = if info.has_payload {
                    payload
                } else {
                    repr.bth.pad_count = 0;
                    Vec::new()
                };
                (repr, payload)
            },
        )
}

/// One edit of a datagram.
#[derive(Debug, Clone)]
enum Mutation {
    Xor(usize, u8),
    Set(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
    Remove(usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(i, x)| Mutation::Xor(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Mutation::Set(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 1..12).prop_map(Mutation::Append),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn apply(d: &mut Vec<u8>, m: &Mutation) {
    let len = d.len().max(1);
    match m {
        Mutation::Xor(i, x) => {
            if let Some(b) = d.get_mut(i % len) {
                *b ^= x;
            }
        }
        Mutation::Set(i, v) => {
            if let Some(b) = d.get_mut(i % len) {
                *b = *v;
            }
        }
        Mutation::Truncate(n) => d.truncate(n % len),
        Mutation::Append(extra) => d.extend_from_slice(extra),
        Mutation::Remove(i) => {
            if i % len < d.len() {
                d.remove(i % len);
            }
        }
    }
}

/// The bits `parse` reads in byte `i` of a datagram whose pad starts at
/// `pad_start`: not the reserved bits of BTH bytes 4 (after FECN/BECN) and
/// 8 (after AckReq), not the reserved byte of a DETH, not pad or ICRC.
fn read_bits(i: usize, pad_start: usize, has_deth: bool) -> u8 {
    match i {
        4 => 0xC0,
        8 => 0x80,
        _ if has_deth && i == BTH_LEN + 4 => 0,
        _ if i >= pad_start => 0,
        _ => 0xFF,
    }
}

/// If `data` parses (ICRC unchecked), its headers and payload emit and seal
/// into a datagram of the same length that parses to the same packet and
/// differs from `data` only in bits that parsing ignores. Returns whether
/// `data` parsed.
fn check_re_emit(data: &[u8], ctx: &IcrcContext) -> Result<bool, TestCaseError> {
    let Ok(p) = parse_unchecked(data) else {
        return Ok(false);
    };
    let mut out = Vec::new();
    prop_assert_eq!(emit_headers(&p.repr, p.payload.len(), &mut out), Ok(()));
    out.extend_from_slice(p.payload);
    prop_assert_eq!(seal(&mut out, ctx), Ok(()));
    let q = parse(&out, ctx);
    prop_assert!(q.is_ok(), "{:?}", q);
    prop_assert_eq!(q.map(|q| (q.repr, q.payload)), Ok((p.repr, p.payload)));
    prop_assert_eq!(out.len(), data.len());
    let pad_start = p.repr.header_len() + p.payload.len();
    for (i, (a, b)) in data.iter().zip(&out).enumerate() {
        let mask = read_bits(i, pad_start, p.repr.deth.is_some());
        prop_assert_eq!(a & mask, b & mask, "byte {}", i);
    }
    prop_assert!(!p.to_string().is_empty());
    Ok(true)
}

fn arb_grh() -> impl Strategy<Value = GrhRepr> {
    let v4 = any::<([u8; 4], [u8; 4], u16)>()
        .prop_map(|(s, d, len)| (IpAddr::from(s), IpAddr::from(d), len.min(u16::MAX - 20), 0));
    let v6 = any::<([u8; 16], [u8; 16], u16, u32)>()
        .prop_map(|(s, d, len, flow)| (IpAddr::from(s), IpAddr::from(d), len, flow & 0xF_FFFF));
    (prop_oneof![v4, v6], any::<(u8, u8)>()).prop_map(
        |((src, dst, payload_len, flow_label), (hop_limit, traffic_class))| GrhRepr {
            src,
            dst,
            payload_len,
            hop_limit,
            traffic_class,
            flow_label,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn parsed_packets_re_emit_to_the_same_packet(
        (repr, payload) in arb_packet(),
        ctx in arb_good_ctx(),
        noise in any::<(u8, u8, u8)>(),
        mutations in proptest::collection::vec(arb_mutation(), 0..3),
    ) {
        let mut wire = build(&repr, &payload, &ctx).unwrap_or_default();
        // Reserved bits (but the selective mark), reserved byte and pad
        // bytes, which parsing ignores.
        let (bth4, bth8, other) = noise;
        let pad = repr.header_len() + payload.len()..wire.len().saturating_sub(ICRC_LEN);
        for (i, b) in wire.iter_mut().enumerate() {
            match i {
                4 => *b |= bth4 & 0x3F,
                8 => *b |= bth8 & 0x3F,
                16 if repr.deth.is_some() => *b = other,
                _ if pad.contains(&i) => *b = other,
                _ => {}
            }
        }
        if mutations.is_empty() {
            prop_assert_eq!(
                parse_unchecked(&wire).map(|p| (p.repr, p.payload)),
                Ok((repr, &payload[..]))
            );
        }
        for m in &mutations {
            apply(&mut wire, m);
        }
        check_re_emit(&wire, &ctx)?;
    }

    #[test]
    fn plausible_bytes_that_parse_re_emit(
        row in 0..TABLE.len(),
        flags in any::<u8>(),
        rest in proptest::collection::vec(any::<u8>(), 10..120),
        ctx in arb_good_ctx(),
    ) {
        let mut data = vec![TABLE[row].opcode.as_u8(), flags & 0xF0];
        data.extend_from_slice(&rest);
        check_re_emit(&data, &ctx)?;
    }

    #[test]
    fn grh_areas_round_trip(repr in arb_grh()) {
        let mut area = [0u8; GRH_LEN];
        repr.emit(&mut area);
        prop_assert_eq!(GrhRepr::parse(&area), Ok(repr));
    }

    #[test]
    fn parsed_grh_areas_re_emit(data in proptest::collection::vec(any::<u8>(), 0..60), v4 in any::<bool>()) {
        let mut data = data;
        if v4 {
            // Often enough an IPv4 header with a right checksum.
            if let Some(h) = data.get_mut(20..40) {
                h[0] = 0x45;
                h[10] = 0;
                h[11] = 0;
                let mut header = [0u8; 20];
                header.copy_from_slice(h);
                let sum = !urdma_wire::ipv4_header_sum(&header);
                h[10..12].copy_from_slice(&sum.to_be_bytes());
            }
        }
        if let Ok(repr) = GrhRepr::parse(&data) {
            let mut area = [0u8; GRH_LEN];
            repr.emit(&mut area);
            prop_assert_eq!(GrhRepr::parse(&area), Ok(repr));
        }
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..160), ctx in arb_ctx()) {
        let _ = parse_unchecked(&data);
        let _ = parse(&data, &ctx);
    }

    #[test]
    fn plausible_bytes_never_panic(
        row in 0..TABLE.len(),
        flags in any::<u8>(),
        rest in proptest::collection::vec(any::<u8>(), 0..120),
        ctx in arb_ctx(),
    ) {
        // A known opcode and version 0, so that parsing gets past the BTH.
        let mut data = vec![TABLE[row].opcode.as_u8(), flags & 0xF0];
        data.extend_from_slice(&rest);
        let _ = parse_unchecked(&data);
        let _ = parse(&data, &ctx);
    }

    #[test]
    fn valid_packets_round_trip((repr, payload) in arb_packet(), ctx in arb_good_ctx()) {
        let wire = build(&repr, &payload, &ctx);
        prop_assert!(wire.is_ok(), "{:?}", wire);
        let wire = wire.unwrap_or_default();
        prop_assert_eq!(wire.len() % 4, 0);
        let parsed = parse(&wire, &ctx);
        prop_assert!(parsed.is_ok(), "{:?}", parsed);
        if let Ok(p) = parsed {
            prop_assert_eq!(p.repr, repr);
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(p.repr.header_len(), repr.bth.opcode.info().header_len);
        }
    }

    #[test]
    fn mutated_packets_never_panic(
        (repr, payload) in arb_packet(),
        ctx in arb_good_ctx(),
        other_ctx in arb_ctx(),
        mutations in proptest::collection::vec(arb_mutation(), 1..4),
    ) {
        let mut wire = build(&repr, &payload, &ctx).unwrap_or_default();
        for m in &mutations {
            apply(&mut wire, m);
        }
        let _ = parse_unchecked(&wire);
        let _ = parse(&wire, &ctx);
        let _ = parse(&wire, &other_ctx);
        if let Some(bth) = wire.get(..BTH_LEN) {
            let _ = Bth::parse(bth);
        }
    }

    #[test]
    fn header_parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
        let _ = Bth::parse(&data);
        let _ = Reth::parse(&data);
        let _ = Aeth::parse(&data);
        let _ = AtomicEth::parse(&data);
        let _ = AtomicAckEth::parse(&data);
        let _ = Deth::parse(&data);
        let _ = GrhRepr::parse(&data);
    }
}

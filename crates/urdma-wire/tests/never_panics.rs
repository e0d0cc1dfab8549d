//! Property tests: parsing never panics, whatever the input, and valid
//! packets survive a build/parse round trip.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use urdma_wire::opcode::TABLE;
use urdma_wire::{
    build, parse, parse_unchecked, AckSyndrome, Aeth, AtomicAckEth, AtomicEth, Bth, Deth,
    IcrcContext, NakCode, PacketRepr, Reth, BTH_LEN,
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

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
    }
}

//! Parse and emit of whole packets: round trips, ICRC, pad and header checks.

use super::*;
use crate::opcode::TABLE;
use crate::{AckSyndrome, NakCode, Opcode};
use std::net::SocketAddr;

fn ctx() -> IcrcContext {
    let src: SocketAddr = ([192, 168, 7, 1], 49152).into();
    let dst: SocketAddr = ([192, 168, 7, 2], crate::ROCEV2_UDP_PORT).into();
    IcrcContext::new(src, dst)
}

/// A repr for `op` with exactly the headers it needs.
fn sample(op: Opcode) -> PacketRepr {
    let info = op.info();
    let mut bth = Bth::new(op, 0x00AB_CDEF, 0x0012_3456);
    bth.ack_req = true;
    let mut repr = PacketRepr::new(bth);
    if info.has_deth {
        repr.deth = Some(Deth {
            qkey: 0x1111_2222,
            src_qp: 0x33,
        });
    }
    if info.has_reth {
        repr.reth = Some(Reth {
            va: 0x0000_7F00_1234_5678,
            rkey: 0xCAFE,
            dma_len: 4096,
        });
    }
    if info.has_atomic_eth {
        repr.atomic_eth = Some(AtomicEth {
            va: 0x1000,
            rkey: 7,
            swap_add: 5,
            compare: 6,
        });
    }
    if info.has_aeth {
        repr.aeth = Some(Aeth {
            syndrome: AckSyndrome::Ack { credits: 31 },
            msn: 9,
        });
    }
    if info.has_atomic_ack_eth {
        repr.atomic_ack_eth = Some(AtomicAckEth { orig: 0xDEAD_BEEF });
    }
    if info.has_immdt {
        repr.immdt = Some(0x0102_0304);
    }
    if info.has_ieth {
        repr.ieth = Some(0x0506_0708);
    }
    repr
}

fn payload_for(op: Opcode) -> Vec<u8> {
    if op.info().has_payload {
        (0u8..13).collect()
    } else {
        Vec::new()
    }
}

#[test]
fn every_opcode_round_trips_with_exactly_its_headers() {
    for info in &TABLE {
        let repr = sample(info.opcode);
        assert_eq!(repr.header_len(), info.header_len, "{}", info.name);
        assert_eq!(repr.validate(), Ok(()));
        let payload = payload_for(info.opcode);
        let wire = build(&repr, &payload, &ctx());
        let Ok(wire) = wire else {
            panic!("{}: {wire:?}", info.name)
        };
        let pad = pad_len(payload.len());
        assert_eq!(wire.len(), info.header_len + payload.len() + pad + ICRC_LEN);
        let mut expected = repr;
        expected.bth.pad_count = pad as u8;
        let parsed = parse(&wire, &ctx());
        assert_eq!(
            parsed,
            Ok(Packet {
                repr: expected,
                payload: &payload
            }),
            "{}",
            info.name
        );
        assert_eq!(parse_unchecked(&wire), parsed);
    }
}

#[test]
fn headers_follow_in_the_specified_order() {
    let mut repr = sample(Opcode::UdSendOnlyImm);
    repr.immdt = Some(0xA1A2_A3A4);
    let mut out = Vec::new();
    assert_eq!(emit_headers(&repr, 0, &mut out), Ok(()));
    assert_eq!(out.len(), BTH_LEN + DETH_LEN + IMMDT_LEN);
    assert_eq!(out.get(12..16), Some(&[0x11, 0x11, 0x22, 0x22][..]));
    assert_eq!(out.get(20..24), Some(&[0xA1, 0xA2, 0xA3, 0xA4][..]));

    let repr = sample(Opcode::RcAtomicAck);
    out.clear();
    assert_eq!(emit_headers(&repr, 0, &mut out), Ok(()));
    assert_eq!(out.get(12), Some(&0x1F));
    assert_eq!(
        out.get(16..24),
        Some(&[0, 0, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF][..])
    );

    let repr = sample(Opcode::RcWriteOnlyImm);
    out.clear();
    assert_eq!(emit_headers(&repr, 4, &mut out), Ok(()));
    assert_eq!(out.get(24..28), Some(&[0, 0, 0x10, 0][..]));
    assert_eq!(out.get(28..32), Some(&[1, 2, 3, 4][..]));
}

#[test]
fn wrong_header_sets_are_refused() {
    for info in &TABLE {
        let good = sample(info.opcode);
        let mut variants = Vec::new();
        let mut r = good;
        r.deth = if r.deth.is_some() {
            None
        } else {
            Some(Deth { qkey: 0, src_qp: 0 })
        };
        variants.push(r);
        let mut r = good;
        r.reth = if r.reth.is_some() {
            None
        } else {
            Some(Reth {
                va: 0,
                rkey: 0,
                dma_len: 0,
            })
        };
        variants.push(r);
        let mut r = good;
        r.aeth = if r.aeth.is_some() {
            None
        } else {
            Some(Aeth {
                syndrome: AckSyndrome::Ack { credits: 0 },
                msn: 0,
            })
        };
        variants.push(r);
        let mut r = good;
        r.immdt = if r.immdt.is_some() { None } else { Some(0) };
        variants.push(r);
        let mut r = good;
        r.ieth = if r.ieth.is_some() { None } else { Some(0) };
        variants.push(r);
        let mut r = good;
        r.atomic_eth = if r.atomic_eth.is_some() {
            None
        } else {
            Some(AtomicEth {
                va: 0,
                rkey: 0,
                swap_add: 0,
                compare: 0,
            })
        };
        variants.push(r);
        let mut r = good;
        r.atomic_ack_eth = if r.atomic_ack_eth.is_some() {
            None
        } else {
            Some(AtomicAckEth { orig: 0 })
        };
        variants.push(r);
        for bad in variants {
            let mut out = vec![0xAA];
            assert_eq!(
                emit_headers(&bad, 0, &mut out),
                Err(WireError::HeaderMismatch),
                "{}",
                info.name
            );
            assert_eq!(out, [0xAA]);
        }
    }
}

#[test]
fn payload_on_opcode_without_payload_is_refused() {
    for info in TABLE.iter().filter(|i| !i.has_payload) {
        let mut out = Vec::new();
        assert_eq!(
            emit_headers(&sample(info.opcode), 1, &mut out),
            Err(WireError::HeaderMismatch)
        );
        assert!(out.is_empty());
    }
}

#[test]
fn pad_follows_payload_length() {
    for len in 0..12usize {
        let payload = vec![0x77u8; len];
        let repr = sample(Opcode::RcSendOnly);
        let Ok(wire) = build(&repr, &payload, &ctx()) else {
            panic!("build failed")
        };
        let pad = (4 - len % 4) % 4;
        assert_eq!(pad_len(len), pad);
        assert_eq!(wire.len() % 4, 0);
        assert_eq!(wire.get(1).map(|b| (b >> 4) & 3), Some(pad as u8));
        let pad_bytes = wire.get(BTH_LEN + len..BTH_LEN + len + pad);
        assert_eq!(pad_bytes, Some(&vec![0u8; pad][..]));
        let parsed = parse(&wire, &ctx()).map(|p| p.payload.len());
        assert_eq!(parsed, Ok(len));
    }
}

#[test]
fn emit_headers_appends_and_ignores_given_pad_count() {
    let mut repr = sample(Opcode::RcSendFirst);
    repr.bth.pad_count = 3;
    let mut out = Vec::new();
    assert_eq!(emit_headers(&repr, 8, &mut out), Ok(()));
    assert_eq!(out.get(1), Some(&0x00));
    out.extend_from_slice(&[1; 8]);
    assert_eq!(seal(&mut out, &ctx()), Ok(()));
    assert_eq!(out.len(), BTH_LEN + 8 + ICRC_LEN);
}

#[test]
fn seal_checks_payload_against_pad_count() {
    let repr = sample(Opcode::RcSendOnly);
    let mut out = Vec::new();
    assert_eq!(emit_headers(&repr, 5, &mut out), Ok(()));
    out.extend_from_slice(&[9; 4]);
    let before = out.clone();
    assert_eq!(seal(&mut out, &ctx()), Err(WireError::BadPad));
    assert_eq!(out, before);
    let mut empty = Vec::new();
    assert_eq!(seal(&mut empty, &ctx()), Err(WireError::Truncated(0)));
    let mixed = IcrcContext::new(ctx().src, "[::1]:4791".parse().unwrap_or(ctx().dst));
    out.push(9);
    assert_eq!(seal(&mut out, &mixed), Err(WireError::AddressFamily));
    assert_eq!(out.len(), before.len() + 1);
}

#[test]
fn parse_rejects_bad_structure() {
    let c = ctx();
    let reseal = |mut body: Vec<u8>| {
        if let Ok(icrc) = compute_icrc(&body, &c) {
            body.extend_from_slice(&icrc.to_le_bytes());
        }
        body
    };
    let Ok(ack) = build(&sample(Opcode::RcAck), &[], &c) else {
        panic!("build failed")
    };
    let body = ack.get(..ack.len() - ICRC_LEN).unwrap_or_default().to_vec();

    // Version.
    let mut v = body.clone();
    v[1] |= 0x01;
    assert_eq!(parse(&reseal(v), &c), Err(WireError::BadVersion(1)));
    // Unknown opcode.
    for op in [0x15u8, 0x18, 0x1F, 0x40, 0x81, 0xFF] {
        let mut v = body.clone();
        v[0] = op;
        assert_eq!(parse(&reseal(v), &c), Err(WireError::UnknownOpcode(op)));
    }
    // Payload after an ACK.
    let mut v = body.clone();
    v.extend_from_slice(&[0; 4]);
    assert_eq!(parse(&reseal(v), &c), Err(WireError::HeaderMismatch));
    // Pad count without room for the pad.
    let mut v = body.clone();
    v[1] |= 0x20;
    assert_eq!(parse(&reseal(v), &c), Err(WireError::BadPad));
    // Reserved syndrome.
    let mut v = body.clone();
    v[BTH_LEN] = 0x40;
    assert_eq!(parse(&reseal(v), &c), Err(WireError::BadSyndrome(0x40)));
    // Every shorter datagram.
    for len in 0..ack.len() {
        let short = ack.get(..len).unwrap_or_default();
        assert_eq!(parse_unchecked(short), Err(WireError::Truncated(len)));
        assert!(parse(short, &c).is_err());
    }
    // Wrong addresses.
    assert_eq!(parse(&ack, &c.reversed()), Err(WireError::BadIcrc));
    assert_eq!(
        parse(&ack, &c),
        Ok(Packet {
            repr: sample(Opcode::RcAck),
            payload: &[]
        })
    );
}

#[test]
fn parse_rejects_misaligned_payload() {
    let c = ctx();
    let Ok(wire) = build(&sample(Opcode::RcSendOnly), &[1, 2, 3, 4], &c) else {
        panic!("build failed")
    };
    let mut body = wire
        .get(..wire.len() - ICRC_LEN)
        .unwrap_or_default()
        .to_vec();
    body.push(5);
    let Ok(icrc) = compute_icrc(&body, &c) else {
        panic!("icrc failed")
    };
    body.extend_from_slice(&icrc.to_le_bytes());
    assert_eq!(parse(&body, &c), Err(WireError::BadPad));
}

#[test]
fn nak_and_rnr_survive_the_trip() {
    let c = ctx();
    for syndrome in [
        AckSyndrome::Nak(NakCode::RemoteAccessError),
        AckSyndrome::RnrNak { timer: 18 },
    ] {
        let mut repr = sample(Opcode::RcAck);
        repr.aeth = Some(Aeth {
            syndrome,
            msn: 0x00FF_FFFF,
        });
        let parsed = build(&repr, &[], &c).and_then(|w| parse(&w, &c).map(|p| p.repr));
        assert_eq!(parsed, Ok(repr));
    }
}

/// An ACK that Linux rxe sent (169.254.70.1, UDP source port 59731, IPv4
/// identification 0xf8de with DF) to 169.254.70.2: its ICRC covers that
/// identification, so only `parse_received` takes it, and a flipped bit
/// is still refused.
#[test]
fn received_from_rxe_with_its_ipv4_identification() {
    let hex = "1100ffff0000190500dd50f91f000001d980511f";
    let d: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let ctx = IcrcContext::new(
        "169.254.70.1:59731".parse().unwrap(),
        "169.254.70.2:4791".parse().unwrap(),
    );
    assert_eq!(parse(&d, &ctx).map(|p| p.repr), Err(WireError::BadIcrc));
    let p = parse_received(&d, &ctx).expect("rxe's ACK");
    assert_eq!(p.repr.bth.opcode, Opcode::RcAck);
    assert_eq!(p.repr.bth.dest_qp, 0x1905);
    assert_eq!(
        crate::check_icrc_any_ident(&d, &ctx)
            .unwrap()
            .unwrap()
            .identification,
        0xf8de
    );
    for bit in 0..(d.len() - 4) * 8 {
        let mut bad = d.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        if bit / 8 == 4 {
            continue; // FECN, BECN and reserved bits: masked from the ICRC
        }
        assert!(
            parse_received(&bad, &ctx).is_err(),
            "bit {bit} flipped, accepted"
        );
    }
}

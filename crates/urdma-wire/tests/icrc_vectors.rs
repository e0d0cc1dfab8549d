//! Known-good ICRC vectors built by scapy's RoCE layer
//! (`tools/gen_icrc_vectors.py` writes `tests/data/icrc_vectors.txt`).

use std::net::{IpAddr, SocketAddr};

use urdma_wire::{build, compute_icrc, parse, parse_unchecked, IcrcContext, WireError, ICRC_LEN};

const VECTORS: &str = include_str!("data/icrc_vectors.txt");

/// Byte of the BTH that the ICRC treats as all ones (FECN, BECN, reserved).
const BTH_ECN_BYTE: usize = 4;

struct Vector {
    name: String,
    expect_ok: bool,
    ctx: IcrcContext,
    datagram: Vec<u8>,
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("bad hex"))
        .collect()
}

fn vectors() -> Vec<Vector> {
    let mut out = Vec::new();
    for line in VECTORS.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, expect, src_ip, src_port, dst_ip, dst_port, data] = fields[..] else {
            panic!("bad vector line: {line}");
        };
        let addr = |ip: &str, port: &str| {
            SocketAddr::new(
                ip.parse::<IpAddr>().expect("bad ip"),
                port.parse().expect("bad port"),
            )
        };
        out.push(Vector {
            name: name.to_string(),
            expect_ok: match expect {
                "ok" => true,
                "badicrc" => false,
                other => panic!("bad expectation {other}"),
            },
            ctx: IcrcContext::new(addr(src_ip, src_port), addr(dst_ip, dst_port)),
            datagram: hex(data),
        });
    }
    out
}

#[test]
fn there_are_enough_vectors() {
    let v = vectors();
    assert!(v.iter().filter(|v| v.expect_ok).count() >= 8);
    assert!(v.iter().any(|v| v.ctx.src.is_ipv6() && v.expect_ok));
    assert!(v.iter().any(|v| v.ctx.src.is_ipv4() && v.expect_ok));
    assert!(v.iter().any(|v| !v.expect_ok));
}

#[test]
fn compute_icrc_matches_scapy() {
    for v in vectors().iter().filter(|v| v.expect_ok) {
        let (body, icrc) = v.datagram.split_at(v.datagram.len() - ICRC_LEN);
        let wire = u32::from_le_bytes(icrc.try_into().expect("4 bytes"));
        assert_eq!(compute_icrc(body, &v.ctx), Ok(wire), "{}", v.name);
        // The wire carries the CRC least significant byte first.
        assert_ne!(
            compute_icrc(body, &v.ctx),
            Ok(u32::from_be_bytes(icrc.try_into().expect("4 bytes"))),
            "{}",
            v.name
        );
    }
}

#[test]
fn parse_accepts_every_good_vector_and_build_reproduces_it() {
    for v in vectors().iter().filter(|v| v.expect_ok) {
        let packet = parse(&v.datagram, &v.ctx).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_eq!(parse_unchecked(&v.datagram), Ok(packet), "{}", v.name);
        let rebuilt = build(&packet.repr, packet.payload, &v.ctx);
        assert_eq!(rebuilt.as_ref(), Ok(&v.datagram), "{}", v.name);
    }
}

#[test]
fn ipv4_identification_and_flags_are_fixed_by_convention() {
    for v in vectors().iter().filter(|v| !v.expect_ok) {
        assert_eq!(
            parse(&v.datagram, &v.ctx),
            Err(WireError::BadIcrc),
            "{}",
            v.name
        );
        assert!(parse_unchecked(&v.datagram).is_ok(), "{}", v.name);
    }
}

#[test]
fn any_single_bit_flip_is_caught_except_in_the_masked_bth_byte() {
    for v in vectors().iter().filter(|v| v.expect_ok) {
        let Ok(original) = parse(&v.datagram, &v.ctx) else {
            panic!("{}", v.name)
        };
        for byte in 0..v.datagram.len() {
            for bit in 0..8 {
                let mut d = v.datagram.clone();
                d[byte] ^= 1 << bit;
                let result = parse(&d, &v.ctx);
                if byte == BTH_ECN_BYTE {
                    // FECN, BECN and the reserved bits are variant: the ICRC
                    // does not cover them, so the packet stays valid.
                    let Ok(p) = result else {
                        panic!("{}: ECN byte flip rejected: {result:?}", v.name)
                    };
                    let mut expected = original.repr;
                    expected.bth.fecn ^= bit == 7;
                    expected.bth.becn ^= bit == 6;
                    assert_eq!(p.repr, expected, "{}", v.name);
                    assert_eq!(p.payload, original.payload);
                } else {
                    assert!(
                        result.is_err(),
                        "{}: flip of byte {byte} bit {bit} accepted",
                        v.name
                    );
                }
            }
        }
    }
}

#[test]
fn addresses_and_ports_are_covered() {
    for v in vectors().iter().filter(|v| v.expect_ok) {
        let mut ctx = v.ctx;
        ctx.src.set_port(ctx.src.port() ^ 1);
        assert_eq!(
            parse(&v.datagram, &ctx),
            Err(WireError::BadIcrc),
            "{}",
            v.name
        );
        let mut ctx = v.ctx;
        ctx.dst.set_port(ctx.dst.port() ^ 1);
        assert_eq!(
            parse(&v.datagram, &ctx),
            Err(WireError::BadIcrc),
            "{}",
            v.name
        );
        let ctx = IcrcContext::new(
            SocketAddr::new(flip_low_bit(v.ctx.src.ip()), v.ctx.src.port()),
            v.ctx.dst,
        );
        assert_eq!(
            parse(&v.datagram, &ctx),
            Err(WireError::BadIcrc),
            "{}",
            v.name
        );
        if v.ctx.src != v.ctx.dst {
            assert_eq!(
                parse(&v.datagram, &v.ctx.reversed()),
                Err(WireError::BadIcrc),
                "{}",
                v.name
            );
        }
    }
}

#[test]
fn mapped_ipv4_addresses_verify_as_ipv4() {
    let vs = vectors();
    let mapped: Vec<&Vector> = vs
        .iter()
        .filter(|v| v.ctx.src.ip().to_canonical().is_ipv4() && v.ctx.src.is_ipv6())
        .collect();
    assert!(!mapped.is_empty());
    for v in mapped {
        assert!(parse(&v.datagram, &v.ctx).is_ok(), "{}", v.name);
        let plain = IcrcContext::new(
            SocketAddr::new(v.ctx.src.ip().to_canonical(), v.ctx.src.port()),
            SocketAddr::new(v.ctx.dst.ip().to_canonical(), v.ctx.dst.port()),
        );
        assert!(parse(&v.datagram, &plain).is_ok(), "{}", v.name);
    }
    // And the IPv4 vectors verify with mapped addresses too.
    for v in vs.iter().filter(|v| v.expect_ok && v.ctx.src.is_ipv4()) {
        let map = |a: SocketAddr| match a.ip() {
            IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), a.port()),
            IpAddr::V6(_) => a,
        };
        let ctx = IcrcContext::new(map(v.ctx.src), map(v.ctx.dst));
        assert!(parse(&v.datagram, &ctx).is_ok(), "{}", v.name);
        let half = IcrcContext::new(map(v.ctx.src), v.ctx.dst);
        assert!(parse(&v.datagram, &half).is_ok(), "{}", v.name);
    }
}

fn flip_low_bit(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mut o = a.octets();
            o[3] ^= 1;
            IpAddr::from(o)
        }
        IpAddr::V6(a) => {
            let mut o = a.octets();
            o[15] ^= 1;
            IpAddr::from(o)
        }
    }
}

//! Fuzz the RoCEv2 packet decoder: any bytes parse or fail cleanly, and
//! whatever parses re-encodes to the same headers and payload. The same
//! holds for the GRH area of UD receives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use urdma_wire::{
    build, emit_headers, parse, parse_unchecked, seal, GrhRepr, IcrcContext, WireError, BTH_LEN,
    GRH_LEN,
};

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

fuzz_target!(|data: &[u8]| {
    let ctx = IcrcContext {
        src: "127.0.0.1:4791".parse().unwrap(),
        dst: "127.0.0.2:4791".parse().unwrap(),
    };
    let _ = parse(data, &ctx);
    if let Ok(p) = parse_unchecked(data) {
        let _ = p.to_string();
        // Headers that parsed always emit again.
        let mut out = Vec::new();
        emit_headers(&p.repr, p.payload.len(), &mut out).expect("parsed headers must emit");
        out.extend_from_slice(p.payload);
        match seal(&mut out, &ctx) {
            Ok(()) => {}
            // Longer than an IP packet: nothing to compare.
            Err(WireError::TooLong(_)) => return,
            Err(e) => panic!("sealing a parsed packet failed: {e}"),
        }
        // The re-emitted packet parses (with a valid ICRC) to the same
        // headers, pad count included, and payload.
        let q = parse(&out, &ctx).expect("re-emitted packet must parse");
        assert_eq!(q.repr, p.repr);
        assert_eq!(q.payload, p.payload);
        // Emitting is a fixed point.
        assert_eq!(build(&q.repr, q.payload, &ctx).as_ref(), Ok(&out));
        // Parsing drops nothing but reserved bits, pad bytes and the ICRC.
        assert_eq!(out.len(), data.len());
        let pad_start = p.repr.header_len() + p.payload.len();
        for (i, (a, b)) in data.iter().zip(&out).enumerate() {
            let mask = read_bits(i, pad_start, p.repr.deth.is_some());
            assert_eq!(a & mask, b & mask, "byte {i} differs");
        }
    }
    if let Ok(g) = GrhRepr::parse(data) {
        let mut area = [0u8; GRH_LEN];
        g.emit(&mut area);
        assert_eq!(GrhRepr::parse(&area), Ok(g));
    }
});

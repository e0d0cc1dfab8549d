//! Fuzz the RoCEv2 packet decoder: any bytes parse or fail cleanly, and
//! whatever parses re-encodes to the same headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use urdma_wire::{build, parse, parse_unchecked, IcrcContext};

fuzz_target!(|data: &[u8]| {
    let ctx = IcrcContext {
        src: "127.0.0.1:4791".parse().unwrap(),
        dst: "127.0.0.2:4791".parse().unwrap(),
    };
    let _ = parse(data, &ctx);
    if let Ok(p) = parse_unchecked(data) {
        // A packet that parses can be rebuilt, and the rebuilt packet
        // parses (with a valid ICRC) to the same headers and payload.
        if let Ok(bytes) = build(&p.repr, p.payload, &ctx) {
            let q = parse(&bytes, &ctx).expect("rebuilt packet must parse");
            assert_eq!(q.repr.bth.opcode, p.repr.bth.opcode);
            assert_eq!(q.payload, p.payload);
        }
    }
});

//! Fuzz the CM MAD decoder: any bytes parse or fail cleanly, and whatever
//! parses emits a MAD that parses to the same message, so emitting is a
//! fixed point. The same holds for rdma_cm's address header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use urdma_wire::cm::{CmMad, CmaHeader, CMA_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(mad) = CmMad::parse(data) {
        let bytes = mad.emit();
        let again = CmMad::parse(&bytes).expect("an emitted MAD must parse");
        assert_eq!(again, mad);
        assert_eq!(again.emit(), bytes);
        // Only the bits the message has are kept: the emitted MAD never
        // holds a bit the input did not.
        for (i, (a, b)) in data.iter().zip(bytes.iter()).enumerate() {
            assert_eq!(b & !a, 0, "byte {i} gained bits");
        }
    }
    if let Ok(h) = CmaHeader::parse(data) {
        let mut out = [0u8; CMA_HEADER_LEN];
        h.emit(&mut out).expect("a parsed header must emit");
        assert_eq!(CmaHeader::parse(&out), Ok(h));
    }
});

//! Unit tests of the opcode table and its lookups.

use super::*;

/// The opcode bytes this crate knows, written out independently of the
/// table.
const KNOWN: [u8; 37] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x2B, 0x64, 0x65,
];

#[test]
fn exactly_the_known_bytes_decode() {
    for v in 0..=255u8 {
        match Opcode::from_u8(v) {
            Some(op) => {
                assert!(KNOWN.contains(&v), "{v:#04x} should be unknown");
                assert_eq!(op.as_u8(), v);
                assert_eq!(u8::from(op), v);
                assert_eq!(op.info().opcode, op);
                assert_eq!(Opcode::try_from(v), Ok(op));
            }
            None => {
                assert!(!KNOWN.contains(&v), "{v:#04x} should be known");
                assert_eq!(Opcode::try_from(v), Err(WireError::UnknownOpcode(v)));
            }
        }
    }
}

#[test]
fn reserved_rd_and_cnp_are_unknown() {
    for v in [
        0x15u8, 0x18, 0x1F, 0x2C, 0x3F, 0x40, 0x4C, 0x60, 0x63, 0x66, 0x80, 0x81, 0xFF,
    ] {
        assert_eq!(Opcode::from_u8(v), None, "{v:#04x}");
    }
    for v in 0x18..=0x1Fu8 {
        assert_eq!(Opcode::from_u8(v), None, "{v:#04x}");
    }
}

#[test]
fn table_is_in_opcode_order() {
    for pair in TABLE.windows(2) {
        if let [a, b] = pair {
            assert!(a.opcode.as_u8() < b.opcode.as_u8());
        }
    }
    assert_eq!(TABLE.len(), KNOWN.len());
}

#[test]
fn transport_matches_prefix() {
    for info in &TABLE {
        let expected = match info.opcode.as_u8() >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            3 => Transport::Ud,
            other => panic!("unexpected prefix {other}"),
        };
        assert_eq!(info.transport, expected, "{}", info.name);
        let prefix = match expected {
            Transport::Rc => "RC ",
            Transport::Uc => "UC ",
            Transport::Ud => "UD ",
        };
        assert!(info.name.starts_with(prefix), "{}", info.name);
    }
}

#[test]
fn names_and_display() {
    assert_eq!(Opcode::RcSendFirst.name(), "RC SEND_FIRST");
    assert_eq!(Opcode::RcAck.to_string(), "RC ACKNOWLEDGE");
    assert_eq!(
        Opcode::UcWriteOnlyImm.name(),
        "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE"
    );
    assert_eq!(Opcode::UdSendOnlyImm.name(), "UD SEND_ONLY_WITH_IMMEDIATE");
    assert_eq!(Opcode::RcSendOnlyInv.name(), "RC SEND_ONLY_WITH_INVALIDATE");
}

#[test]
fn uc_rows_mirror_rc_send_and_write_rows() {
    for uc in TABLE.iter().filter(|i| i.transport == Transport::Uc) {
        let rc = Opcode::from_u8(uc.opcode.as_u8() - 0x20).map(Opcode::info);
        let Some(rc) = rc else {
            panic!("no RC twin for {}", uc.name)
        };
        assert_eq!(rc.name.get(3..), uc.name.get(3..));
        assert_eq!((rc.kind, rc.position), (uc.kind, uc.position));
        assert_eq!(rc.header_len, uc.header_len);
        assert_eq!(
            (rc.has_reth, rc.has_immdt, rc.has_payload),
            (uc.has_reth, uc.has_immdt, uc.has_payload)
        );
    }
}

#[test]
fn every_opcode_without_ieth_is_found_by_its_row() {
    let mut found = 0;
    for info in &TABLE {
        let answer = Opcode::find(info.transport, info.kind, info.position, info.has_immdt);
        if info.has_ieth {
            // The plain SEND at the same position.
            let plain = match info.opcode {
                Opcode::RcSendLastInv => Opcode::RcSendLast,
                Opcode::RcSendOnlyInv => Opcode::RcSendOnly,
                other => panic!("unexpected IETH opcode {other}"),
            };
            assert_eq!(answer, Some(plain), "{}", info.name);
        } else {
            assert_eq!(answer, Some(info.opcode), "{}", info.name);
            found += 1;
        }
    }
    assert_eq!(found, TABLE.len() - 2);
}

#[test]
fn find_answers_the_requester_questions() {
    use OpKind::*;
    use Position::*;
    use Transport::*;
    let find = Opcode::find;
    assert_eq!(find(Rc, Send, First, false), Some(Opcode::RcSendFirst));
    assert_eq!(find(Uc, Send, Middle, false), Some(Opcode::UcSendMiddle));
    assert_eq!(find(Rc, Send, Last, false), Some(Opcode::RcSendLast));
    assert_eq!(find(Uc, Send, Last, true), Some(Opcode::UcSendLastImm));
    assert_eq!(find(Rc, Send, Only, true), Some(Opcode::RcSendOnlyImm));
    assert_eq!(find(Rc, Write, First, false), Some(Opcode::RcWriteFirst));
    assert_eq!(find(Uc, Write, Middle, false), Some(Opcode::UcWriteMiddle));
    assert_eq!(find(Rc, Write, Last, true), Some(Opcode::RcWriteLastImm));
    assert_eq!(find(Uc, Write, Only, false), Some(Opcode::UcWriteOnly));
    assert_eq!(find(Rc, Write, Only, true), Some(Opcode::RcWriteOnlyImm));
    assert_eq!(
        find(Rc, ReadRequest, Only, false),
        Some(Opcode::RcReadRequest)
    );
    assert_eq!(
        find(Rc, CompareSwap, Only, false),
        Some(Opcode::RcCompareSwap)
    );
    assert_eq!(find(Rc, FetchAdd, Only, false), Some(Opcode::RcFetchAdd));
    assert_eq!(find(Ud, Send, Only, false), Some(Opcode::UdSendOnly));
    assert_eq!(find(Ud, Send, Only, true), Some(Opcode::UdSendOnlyImm));
    assert_eq!(
        find(Rc, ReadResponse, Middle, false),
        Some(Opcode::RcReadResponseMiddle)
    );
    assert_eq!(find(Rc, Ack, Only, false), Some(Opcode::RcAck));
}

#[test]
fn find_refuses_what_no_opcode_carries() {
    use OpKind::*;
    use Position::*;
    use Transport::*;
    let none = [
        (Rc, Send, First, true),
        (Uc, Write, Middle, true),
        (Uc, ReadRequest, Only, false),
        (Uc, CompareSwap, Only, false),
        (Uc, FetchAdd, Only, false),
        (Ud, Write, Only, false),
        (Ud, Send, First, false),
        (Ud, Send, Last, false),
        (Rc, ReadRequest, First, false),
        (Rc, ReadRequest, Only, true),
        (Rc, FetchAdd, Only, true),
        (Rc, Ack, Last, false),
        (Uc, Ack, Only, false),
        (Ud, ReadResponse, Only, false),
    ];
    for (t, k, p, imm) in none {
        assert_eq!(Opcode::find(t, k, p, imm), None, "{t:?} {k:?} {p:?} {imm}");
    }
}

#[test]
fn header_layouts() {
    let check = |op: Opcode, len: usize| assert_eq!(op.info().header_len, len, "{op}");
    check(Opcode::RcSendMiddle, 12);
    check(Opcode::RcSendOnlyImm, 16);
    check(Opcode::RcSendOnlyInv, 16);
    check(Opcode::RcWriteFirst, 28);
    check(Opcode::RcWriteOnlyImm, 32);
    check(Opcode::RcWriteLastImm, 16);
    check(Opcode::RcReadRequest, 28);
    check(Opcode::RcReadResponseFirst, 16);
    check(Opcode::RcReadResponseMiddle, 12);
    check(Opcode::RcAck, 16);
    check(Opcode::RcAtomicAck, 24);
    check(Opcode::RcCompareSwap, 40);
    check(Opcode::RcFetchAdd, 40);
    check(Opcode::UdSendOnly, 20);
    check(Opcode::UdSendOnlyImm, 24);

    let no_payload = [
        Opcode::RcReadRequest,
        Opcode::RcAck,
        Opcode::RcAtomicAck,
        Opcode::RcCompareSwap,
        Opcode::RcFetchAdd,
    ];
    for info in &TABLE {
        assert_eq!(info.has_payload, !no_payload.contains(&info.opcode));
        assert!(!(info.has_immdt && info.has_ieth));
        assert!(!(info.has_reth && info.has_atomic_eth));
        if info.has_immdt || info.has_ieth {
            assert!(matches!(info.position, Position::Last | Position::Only));
        }
    }
}

//! BTH opcodes and the table of what each opcode carries.
//!
//! The opcode byte is a 3-bit transport prefix (RC `0x00`, UC `0x20`,
//! RD `0x40`, UD `0x60`, CNP `0x80`) followed by a 5-bit operation. This
//! crate knows the RC, UC and UD opcodes; RD and CNP packets are rejected as
//! [`WireError::UnknownOpcode`].
//!
//! [`TABLE`] lists, for every known opcode, which extended transport headers
//! follow the BTH and whether a payload may follow them (IBTA Vol 1, 9.2 and
//! 9.3).

use core::fmt;

use crate::{
    WireError, AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, IETH_LEN,
    IMMDT_LEN, RETH_LEN,
};

/// A known BTH opcode (transport prefix and operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// RC SEND_FIRST.
    RcSendFirst = 0x00,
    /// RC SEND_MIDDLE.
    RcSendMiddle,
    /// RC SEND_LAST.
    RcSendLast,
    /// RC SEND_LAST_WITH_IMMEDIATE.
    RcSendLastImm,
    /// RC SEND_ONLY.
    RcSendOnly,
    /// RC SEND_ONLY_WITH_IMMEDIATE.
    RcSendOnlyImm,
    /// RC RDMA_WRITE_FIRST.
    RcWriteFirst,
    /// RC RDMA_WRITE_MIDDLE.
    RcWriteMiddle,
    /// RC RDMA_WRITE_LAST.
    RcWriteLast,
    /// RC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    RcWriteLastImm,
    /// RC RDMA_WRITE_ONLY.
    RcWriteOnly,
    /// RC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    RcWriteOnlyImm,
    /// RC RDMA_READ_REQUEST.
    RcReadRequest,
    /// RC RDMA_READ_RESPONSE_FIRST.
    RcReadResponseFirst,
    /// RC RDMA_READ_RESPONSE_MIDDLE.
    RcReadResponseMiddle,
    /// RC RDMA_READ_RESPONSE_LAST.
    RcReadResponseLast,
    /// RC RDMA_READ_RESPONSE_ONLY.
    RcReadResponseOnly,
    /// RC ACKNOWLEDGE.
    RcAck,
    /// RC ATOMIC_ACKNOWLEDGE.
    RcAtomicAck,
    /// RC COMPARE_SWAP.
    RcCompareSwap,
    /// RC FETCH_ADD.
    RcFetchAdd,
    /// RC SEND_LAST_WITH_INVALIDATE.
    RcSendLastInv = 0x16,
    /// RC SEND_ONLY_WITH_INVALIDATE.
    RcSendOnlyInv = 0x17,
    /// UC SEND_FIRST.
    UcSendFirst = 0x20,
    /// UC SEND_MIDDLE.
    UcSendMiddle,
    /// UC SEND_LAST.
    UcSendLast,
    /// UC SEND_LAST_WITH_IMMEDIATE.
    UcSendLastImm,
    /// UC SEND_ONLY.
    UcSendOnly,
    /// UC SEND_ONLY_WITH_IMMEDIATE.
    UcSendOnlyImm,
    /// UC RDMA_WRITE_FIRST.
    UcWriteFirst,
    /// UC RDMA_WRITE_MIDDLE.
    UcWriteMiddle,
    /// UC RDMA_WRITE_LAST.
    UcWriteLast,
    /// UC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    UcWriteLastImm,
    /// UC RDMA_WRITE_ONLY.
    UcWriteOnly,
    /// UC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    UcWriteOnlyImm,
    /// UD SEND_ONLY.
    UdSendOnly = 0x64,
    /// UD SEND_ONLY_WITH_IMMEDIATE.
    UdSendOnlyImm = 0x65,
}

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// The operation an opcode is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A SEND (with or without immediate data or invalidate).
    Send,
    /// An RDMA WRITE (with or without immediate data).
    Write,
    /// An RDMA READ request.
    ReadRequest,
    /// An RDMA READ response.
    ReadResponse,
    /// An acknowledgement (ACK, NAK or RNR NAK).
    Ack,
    /// The acknowledgement of an atomic operation.
    AtomicAck,
    /// An atomic compare-and-swap request.
    CompareSwap,
    /// An atomic fetch-and-add request.
    FetchAdd,
}

/// Where a packet stands in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of its message (also used for single-packet
    /// operations such as read requests, acknowledgements and atomics).
    Only,
}

/// One row of the opcode table (a static table, data not code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode this row describes.
    pub opcode: Opcode,
    /// Its name in the "RC SEND_FIRST" style.
    pub name: &'static str,
    /// Its transport service.
    pub transport: Transport,
    /// The operation it belongs to.
    pub kind: OpKind,
    /// Its place in the message.
    pub position: Position,
    /// A DETH follows the BTH.
    pub has_deth: bool,
    /// A RETH follows the BTH.
    pub has_reth: bool,
    /// An AtomicETH follows the BTH.
    pub has_atomic_eth: bool,
    /// An AETH follows the BTH.
    pub has_aeth: bool,
    /// An AtomicAckETH follows the AETH.
    pub has_atomic_ack_eth: bool,
    /// Immediate data follows the other headers.
    pub has_immdt: bool,
    /// An IETH follows the other headers.
    pub has_ieth: bool,
    /// A payload may follow the headers (it may still be empty).
    pub has_payload: bool,
    /// total header bytes incl. BTH
    pub header_len: usize,
}

const DETH: u8 = 1 << 0;
const RETH: u8 = 1 << 1;
const ATOMIC_ETH: u8 = 1 << 2;
const AETH: u8 = 1 << 3;
const ATOMIC_ACK_ETH: u8 = 1 << 4;
const IMMDT: u8 = 1 << 5;
const IETH: u8 = 1 << 6;
const PAYLOAD: u8 = 1 << 7;

/// Whether the header set `parts` contains `flag`.
const fn has(parts: u8, flag: u8) -> bool {
    parts & flag != 0
}

/// `len` if the header set `parts` contains `flag`, else 0.
const fn len_if(parts: u8, flag: u8, len: usize) -> usize {
    if has(parts, flag) {
        len
    } else {
        0
    }
}

/// Builds one table row; `parts` is a set of the header flags above.
const fn row(
    opcode: Opcode,
    name: &'static str,
    transport: Transport,
    kind: OpKind,
    position: Position,
    parts: u8,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        transport,
        kind,
        position,
        has_deth: has(parts, DETH),
        has_reth: has(parts, RETH),
        has_atomic_eth: has(parts, ATOMIC_ETH),
        has_aeth: has(parts, AETH),
        has_atomic_ack_eth: has(parts, ATOMIC_ACK_ETH),
        has_immdt: has(parts, IMMDT),
        has_ieth: has(parts, IETH),
        has_payload: has(parts, PAYLOAD),
        header_len: BTH_LEN
            + len_if(parts, DETH, DETH_LEN)
            + len_if(parts, RETH, RETH_LEN)
            + len_if(parts, ATOMIC_ETH, ATOMIC_ETH_LEN)
            + len_if(parts, AETH, AETH_LEN)
            + len_if(parts, ATOMIC_ACK_ETH, ATOMIC_ACK_ETH_LEN)
            + len_if(parts, IMMDT, IMMDT_LEN)
            + len_if(parts, IETH, IETH_LEN),
    }
}

/// Every known opcode with the headers it carries, in opcode order.
#[rustfmt::skip]
pub const TABLE: [OpcodeInfo; 37] = {
    use OpKind::*;
    use Opcode::*;
    use Position::*;
    use Transport::*;
    [
        row(RcSendFirst, "RC SEND_FIRST", Rc, Send, First, PAYLOAD),
        row(RcSendMiddle, "RC SEND_MIDDLE", Rc, Send, Middle, PAYLOAD),
        row(RcSendLast, "RC SEND_LAST", Rc, Send, Last, PAYLOAD),
        row(RcSendLastImm, "RC SEND_LAST_WITH_IMMEDIATE", Rc, Send, Last, IMMDT | PAYLOAD),
        row(RcSendOnly, "RC SEND_ONLY", Rc, Send, Only, PAYLOAD),
        row(RcSendOnlyImm, "RC SEND_ONLY_WITH_IMMEDIATE", Rc, Send, Only, IMMDT | PAYLOAD),
        row(RcWriteFirst, "RC RDMA_WRITE_FIRST", Rc, Write, First, RETH | PAYLOAD),
        row(RcWriteMiddle, "RC RDMA_WRITE_MIDDLE", Rc, Write, Middle, PAYLOAD),
        row(RcWriteLast, "RC RDMA_WRITE_LAST", Rc, Write, Last, PAYLOAD),
        row(RcWriteLastImm, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", Rc, Write, Last, IMMDT | PAYLOAD),
        row(RcWriteOnly, "RC RDMA_WRITE_ONLY", Rc, Write, Only, RETH | PAYLOAD),
        row(RcWriteOnlyImm, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", Rc, Write, Only, RETH | IMMDT | PAYLOAD),
        row(RcReadRequest, "RC RDMA_READ_REQUEST", Rc, ReadRequest, Only, RETH),
        row(RcReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", Rc, ReadResponse, First, AETH | PAYLOAD),
        row(RcReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", Rc, ReadResponse, Middle, PAYLOAD),
        row(RcReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", Rc, ReadResponse, Last, AETH | PAYLOAD),
        row(RcReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", Rc, ReadResponse, Only, AETH | PAYLOAD),
        row(RcAck, "RC ACKNOWLEDGE", Rc, Ack, Only, AETH),
        row(RcAtomicAck, "RC ATOMIC_ACKNOWLEDGE", Rc, AtomicAck, Only, AETH | ATOMIC_ACK_ETH),
        row(RcCompareSwap, "RC COMPARE_SWAP", Rc, CompareSwap, Only, ATOMIC_ETH),
        row(RcFetchAdd, "RC FETCH_ADD", Rc, FetchAdd, Only, ATOMIC_ETH),
        row(RcSendLastInv, "RC SEND_LAST_WITH_INVALIDATE", Rc, Send, Last, IETH | PAYLOAD),
        row(RcSendOnlyInv, "RC SEND_ONLY_WITH_INVALIDATE", Rc, Send, Only, IETH | PAYLOAD),
        row(UcSendFirst, "UC SEND_FIRST", Uc, Send, First, PAYLOAD),
        row(UcSendMiddle, "UC SEND_MIDDLE", Uc, Send, Middle, PAYLOAD),
        row(UcSendLast, "UC SEND_LAST", Uc, Send, Last, PAYLOAD),
        row(UcSendLastImm, "UC SEND_LAST_WITH_IMMEDIATE", Uc, Send, Last, IMMDT | PAYLOAD),
        row(UcSendOnly, "UC SEND_ONLY", Uc, Send, Only, PAYLOAD),
        row(UcSendOnlyImm, "UC SEND_ONLY_WITH_IMMEDIATE", Uc, Send, Only, IMMDT | PAYLOAD),
        row(UcWriteFirst, "UC RDMA_WRITE_FIRST", Uc, Write, First, RETH | PAYLOAD),
        row(UcWriteMiddle, "UC RDMA_WRITE_MIDDLE", Uc, Write, Middle, PAYLOAD),
        row(UcWriteLast, "UC RDMA_WRITE_LAST", Uc, Write, Last, PAYLOAD),
        row(UcWriteLastImm, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", Uc, Write, Last, IMMDT | PAYLOAD),
        row(UcWriteOnly, "UC RDMA_WRITE_ONLY", Uc, Write, Only, RETH | PAYLOAD),
        row(UcWriteOnlyImm, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", Uc, Write, Only, RETH | IMMDT | PAYLOAD),
        row(UdSendOnly, "UD SEND_ONLY", Ud, Send, Only, DETH | PAYLOAD),
        row(UdSendOnlyImm, "UD SEND_ONLY_WITH_IMMEDIATE", Ud, Send, Only, DETH | IMMDT | PAYLOAD),
    ]
};

/// Marks an opcode byte that has no row in [`TABLE`].
const NO_ROW: u8 = u8::MAX;

/// Row of [`TABLE`] for each opcode byte, or [`NO_ROW`].
const ROW_OF_BYTE: [u8; 256] = {
    let mut rows = [NO_ROW; 256];
    let mut i = 0;
    while i < TABLE.len() {
        rows[TABLE[i].opcode as usize] = i as u8;
        i += 1;
    }
    rows
};

/// The table rows, as a `static` so that [`Opcode::info`] can hand out
/// `'static` references.
static ROWS: [OpcodeInfo; 37] = TABLE;

impl Opcode {
    /// The opcode with wire value `v`, or `None` for RD, CNP and reserved
    /// values.
    pub fn from_u8(v: u8) -> Option<Opcode> {
        let row = ROW_OF_BYTE[usize::from(v)];
        ROWS.get(usize::from(row)).map(|info| info.opcode)
    }

    /// The wire value of this opcode.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The table row describing this opcode.
    pub fn info(self) -> &'static OpcodeInfo {
        // Every variant has a row: checked at compile time below and in the
        // unit tests.
        &ROWS[usize::from(ROW_OF_BYTE[usize::from(self as u8)])]
    }

    /// The name of this opcode in the "RC SEND_FIRST" style.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

// Each row sits where its opcode byte points, and no two rows share an
// opcode.
const _: () = {
    let mut i = 0;
    while i < TABLE.len() {
        assert!(ROW_OF_BYTE[TABLE[i].opcode as usize] as usize == i);
        i += 1;
    }
};

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op as u8
    }
}

impl TryFrom<u8> for Opcode {
    type Error = WireError;

    fn try_from(v: u8) -> Result<Opcode, WireError> {
        Opcode::from_u8(v).ok_or(WireError::UnknownOpcode(v))
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcode bytes this crate knows, written out independently of the
    /// table.
    const KNOWN: [u8; 37] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E,
        0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x27, 0x28, 0x29, 0x2A, 0x2B, 0x64, 0x65,
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
}

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

impl Position {
    /// The position of packet `index` (from 0) of a message of `count`
    /// packets.
    pub fn of(index: u32, count: u32) -> Position {
        match (index, count) {
            (_, 0 | 1) => Position::Only,
            (0, _) => Position::First,
            (i, n) if i + 1 >= n => Position::Last,
            _ => Position::Middle,
        }
    }

    /// True for the packet that ends its message (`Last` or `Only`).
    pub fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
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

    /// The opcode of a `kind` packet of `transport` at `position` in its
    /// message, carrying immediate data if `imm`; found in [`TABLE`].
    ///
    /// Every opcode without an IETH is the answer for exactly one such
    /// question (its row's transport, kind, position and `has_immdt`), so a
    /// requester can choose each packet's opcode with it:
    ///
    /// - Immediate data rides only on the last or only packet of a SEND or
    ///   WRITE: the first and middle packets of a message with immediate
    ///   data are asked for with `imm` false.
    /// - Single-packet operations (READ requests, atomics, UD SENDs,
    ///   acknowledgements) are at [`Position::Only`].
    /// - The SEND with invalidate opcodes, which carry an IETH, are never
    ///   returned; asking for a SEND gives the plain SEND opcode.
    ///
    /// Gives `None` when no opcode fits: an operation the transport does
    /// not have (UC READ or atomics, UD WRITE, anything but SEND ONLY on
    /// UD), immediate data on a first or middle packet or on an operation
    /// that carries none, or a multi-packet position for a single-packet
    /// operation.
    ///
    /// ```
    /// use urdma_wire::{OpKind, Opcode, Position, Transport};
    ///
    /// // A three-packet RC WRITE with immediate data.
    /// let opcodes = [Position::First, Position::Middle, Position::Last]
    ///     .map(|p| Opcode::find(Transport::Rc, OpKind::Write, p, p == Position::Last));
    /// assert_eq!(
    ///     opcodes,
    ///     [Some(Opcode::RcWriteFirst), Some(Opcode::RcWriteMiddle), Some(Opcode::RcWriteLastImm)]
    /// );
    /// assert_eq!(Opcode::find(Transport::Uc, OpKind::ReadRequest, Position::Only, false), None);
    /// ```
    pub fn find(
        transport: Transport,
        kind: OpKind,
        position: Position,
        imm: bool,
    ) -> Option<Opcode> {
        ROWS.iter()
            .find(|row| {
                row.transport == transport
                    && row.kind == kind
                    && row.position == position
                    && row.has_immdt == imm
                    && !row.has_ieth
            })
            .map(|row| row.opcode)
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
mod tests;

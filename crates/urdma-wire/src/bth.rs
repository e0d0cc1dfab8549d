//! Base Transport Header (IBTA Vol 1, 9.2).
//!
//! ```text
//!  byte 0   opcode
//!  byte 1   SE(1) M(1) PadCnt(2) TVer(4)
//!  byte 2-3 P_Key
//!  byte 4   FECN(1) BECN(1) reserved(6)
//!  byte 5-7 DestQP (24 bits)
//!  byte 8   AckReq(1) reserved(7)
//!  byte 9-11 PSN (24 bits)
//! ```
//!
//! urdma uses one reserved bit of byte 8 (0x40) as its selective
//! retransmission mark ([`Bth::selective`]). Implementations that do not
//! know it send it as zero and ignore it, as IBTA asks of reserved bits,
//! so they keep go-back-N between themselves and urdma.

use crate::field::{need, room, Reader, Writer};
use crate::{Opcode, WireError, BTH_LEN, DEFAULT_PKEY, PSN_MASK, QPN_MASK};

const SE: u8 = 0x80;
const MIGREQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x03;
const TVER_MASK: u8 = 0x0F;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;
const SELECTIVE: u8 = 0x40;

/// Offset of the FECN/BECN/reserved byte, which the ICRC treats as all ones.
pub(crate) const VARIANT_BYTE: usize = 4;

/// The Base Transport Header that starts every packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    /// Operation of this packet.
    pub opcode: Opcode,
    /// Solicited event: the responder should raise a completion event.
    pub solicited: bool,
    /// Migration request state (APM); urdma always sends it set to `false`.
    pub migreq: bool,
    /// Number of pad bytes (0..=3) after the payload; only the low 2 bits
    /// are emitted.
    pub pad_count: u8,
    /// Transport header version; only 0 is accepted by
    /// [`parse`](crate::parse). Only the low 4 bits are emitted.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination queue pair number (24 bits; higher bits are not emitted).
    pub dest_qp: u32,
    /// The requester asks for an acknowledgement of this packet.
    pub ack_req: bool,
    /// urdma's selective retransmission mark, in a reserved bit. On an RC
    /// request: the requester resends just the packet a marked sequence
    /// NAK names. On an ACK or NAK: the responder keeps the requests it
    /// received out of sequence; a marked sequence NAK names one missing
    /// PSN and acknowledges nothing, and the AETH's MSN field carries how
    /// far the requests received reach.
    pub selective: bool,
    /// Packet sequence number (24 bits; higher bits are not emitted).
    pub psn: u32,
}

impl Bth {
    /// A BTH for `opcode` to `dest_qp` with sequence number `psn`, the
    /// default partition key, version 0 and every flag clear. Both numbers
    /// are masked to 24 bits.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & QPN_MASK,
            ack_req: false,
            selective: false,
            psn: psn & PSN_MASK,
        }
    }

    /// Parses the first [`BTH_LEN`] bytes of `buf`.
    ///
    /// Fails on a short buffer and on an opcode this crate does not know.
    /// The version is returned as found (see [`parse`](crate::parse) for the
    /// check); reserved bits other than [`Bth::selective`] are ignored.
    pub fn parse(buf: &[u8]) -> Result<Bth, WireError> {
        need(buf, BTH_LEN)?;
        let mut r = Reader::new(buf);
        let op = r.u8()?;
        let opcode = Opcode::try_from(op)?;
        let flags = r.u8()?;
        let pkey = r.u16()?;
        let ecn = r.u8()?;
        let dest_qp = r.u24()?;
        let ack = r.u8()?;
        let psn = r.u24()?;
        Ok(Bth {
            opcode,
            solicited: flags & SE != 0,
            migreq: flags & MIGREQ != 0,
            pad_count: (flags >> PAD_SHIFT) & PAD_MASK,
            tver: flags & TVER_MASK,
            pkey,
            fecn: ecn & FECN != 0,
            becn: ecn & BECN != 0,
            dest_qp,
            ack_req: ack & ACK_REQ != 0,
            selective: ack & SELECTIVE != 0,
            psn,
        })
    }

    /// Writes this header into the first [`BTH_LEN`] bytes of `buf`.
    ///
    /// Out-of-range fields are masked to their width; reserved bits other
    /// than [`Bth::selective`] are written as zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, BTH_LEN)?;
        let mut flags = ((self.pad_count & PAD_MASK) << PAD_SHIFT) | (self.tver & TVER_MASK);
        if self.solicited {
            flags |= SE;
        }
        if self.migreq {
            flags |= MIGREQ;
        }
        let mut ecn = 0;
        if self.fecn {
            ecn |= FECN;
        }
        if self.becn {
            ecn |= BECN;
        }
        let mut ack = if self.ack_req { ACK_REQ } else { 0 };
        if self.selective {
            ack |= SELECTIVE;
        }
        let mut w = Writer::new(buf);
        w.u8(self.opcode.as_u8())?;
        w.u8(flags)?;
        w.u16(self.pkey)?;
        w.u8(ecn)?;
        w.u24(self.dest_qp)?;
        w.u8(ack)?;
        w.u24(self.psn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emitted(bth: &Bth) -> [u8; BTH_LEN] {
        let mut buf = [0u8; BTH_LEN];
        assert_eq!(bth.emit(&mut buf), Ok(()));
        buf
    }

    #[test]
    fn new_uses_defaults() {
        let bth = Bth::new(Opcode::RcSendOnly, 0x12_3456, 0xAB_CDEF);
        assert_eq!(
            emitted(&bth),
            [0x04, 0x00, 0xFF, 0xFF, 0x00, 0x12, 0x34, 0x56, 0x00, 0xAB, 0xCD, 0xEF]
        );
        let masked = Bth::new(Opcode::RcAck, 0xFF00_0001, 0xFF00_0002);
        assert_eq!((masked.dest_qp, masked.psn), (1, 2));
    }

    #[test]
    fn round_trip_all_fields() {
        let bth = Bth {
            opcode: Opcode::UcWriteFirst,
            solicited: true,
            migreq: true,
            pad_count: 3,
            tver: 0,
            pkey: 0x8001,
            fecn: true,
            becn: false,
            dest_qp: 0x00FE_DCBA,
            ack_req: true,
            selective: true,
            psn: 0x0012_3456,
        };
        let buf = emitted(&bth);
        assert_eq!(Bth::parse(&buf), Ok(bth));
        assert_eq!(
            buf,
            [0x26, 0xF0, 0x80, 0x01, 0x80, 0xFE, 0xDC, 0xBA, 0xC0, 0x12, 0x34, 0x56]
        );
    }

    #[test]
    fn bit_positions() {
        let base = Bth::new(Opcode::RcSendFirst, 0, 0);
        let byte = |f: &dyn Fn(&mut Bth), at: usize| {
            let mut b = base;
            f(&mut b);
            let buf = emitted(&b);
            let parsed = Bth::parse(&buf);
            assert_eq!(parsed, Ok(b));
            buf.get(at).copied()
        };
        assert_eq!(byte(&|b| b.solicited = true, 1), Some(0x80));
        assert_eq!(byte(&|b| b.migreq = true, 1), Some(0x40));
        assert_eq!(byte(&|b| b.pad_count = 1, 1), Some(0x10));
        assert_eq!(byte(&|b| b.pad_count = 2, 1), Some(0x20));
        assert_eq!(byte(&|b| b.tver = 0xF, 1), Some(0x0F));
        assert_eq!(byte(&|b| b.fecn = true, 4), Some(0x80));
        assert_eq!(byte(&|b| b.becn = true, 4), Some(0x40));
        assert_eq!(byte(&|b| b.ack_req = true, 8), Some(0x80));
        assert_eq!(byte(&|b| b.selective = true, 8), Some(0x40));
        assert_eq!(byte(&|b| b.pkey = 0x1234, 2), Some(0x12));
        assert_eq!(byte(&|b| b.pkey = 0x1234, 3), Some(0x34));
    }

    #[test]
    fn wide_fields_are_masked_on_emit() {
        let mut bth = Bth::new(Opcode::RcSendFirst, 0, 0);
        bth.dest_qp = 0xFFFF_FFFF;
        bth.psn = 0x0100_0002;
        bth.pad_count = 0xFF;
        bth.tver = 0xF1;
        let buf = emitted(&bth);
        assert_eq!(
            buf,
            [0x00, 0x31, 0xFF, 0xFF, 0x00, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02]
        );
        let back = Bth::parse(&buf);
        assert_eq!(
            back.map(|b| (b.dest_qp, b.psn, b.pad_count, b.tver)),
            Ok((QPN_MASK, 2, 3, 1))
        );
    }

    #[test]
    fn reserved_bits_are_ignored_on_parse() {
        let buf = [0x04, 0x00, 0xFF, 0xFF, 0x3F, 0, 0, 1, 0x3F, 0, 0, 2];
        let bth = Bth::parse(&buf);
        assert_eq!(bth, Ok(Bth::new(Opcode::RcSendOnly, 1, 2)));
        // All but the one urdma uses for its selective mark.
        let mut marked = buf;
        marked[8] = 0x7F;
        let mut expect = Bth::new(Opcode::RcSendOnly, 1, 2);
        expect.selective = true;
        assert_eq!(Bth::parse(&marked), Ok(expect));
    }

    #[test]
    fn short_input_and_unknown_opcode_fail() {
        let buf = emitted(&Bth::new(Opcode::RcAck, 1, 2));
        for len in 0..BTH_LEN {
            assert_eq!(
                Bth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        for op in [0x15u8, 0x18, 0x1F, 0x40, 0x81, 0xFF] {
            let mut bad = buf;
            bad[0] = op;
            assert_eq!(Bth::parse(&bad), Err(WireError::UnknownOpcode(op)));
        }
        let mut small = [0u8; BTH_LEN - 1];
        assert_eq!(
            Bth::new(Opcode::RcAck, 1, 2).emit(&mut small),
            Err(WireError::BufferTooSmall)
        );
    }

    #[test]
    fn parse_ignores_trailing_bytes() {
        let mut buf = [0xEEu8; 20];
        let bth = Bth::new(Opcode::UdSendOnly, 7, 8);
        assert_eq!(bth.emit(&mut buf), Ok(()));
        assert_eq!(Bth::parse(&buf), Ok(bth));
        assert_eq!(buf.get(BTH_LEN..), Some(&[0xEEu8; 8][..]));
    }
}

//! Datagram Extended Transport Header (IBTA Vol 1, 9.3.2).
//!
//! ```text
//!  byte 0-3   Q_Key
//!  byte 4     reserved
//!  byte 5-7   source QP (24 bits)
//! ```

use crate::field::{need, room, Reader, Writer};
use crate::{WireError, DETH_LEN, QPN_MASK};

/// The DETH of UD packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deth {
    /// Queue key the destination QP checks.
    pub qkey: u32,
    /// Source queue pair number (24 bits; higher bits are not emitted).
    pub src_qp: u32,
}

impl Deth {
    /// Parses the first [`DETH_LEN`] bytes of `buf`; the reserved byte is
    /// ignored.
    pub fn parse(buf: &[u8]) -> Result<Deth, WireError> {
        need(buf, DETH_LEN)?;
        let mut r = Reader::new(buf);
        let qkey = r.u32()?;
        let _reserved = r.u8()?;
        let src_qp = r.u24()?;
        Ok(Deth { qkey, src_qp })
    }

    /// Writes this header into the first [`DETH_LEN`] bytes of `buf`; the
    /// source QP is masked to 24 bits and the reserved byte written as zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, DETH_LEN)?;
        let mut w = Writer::new(buf);
        w.u32(self.qkey)?;
        w.u8(0)?;
        w.u24(self.src_qp & QPN_MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let deth = Deth {
            qkey: 0x8001_0203,
            src_qp: 0x00AB_CDEF,
        };
        let mut buf = [0xFFu8; DETH_LEN];
        assert_eq!(deth.emit(&mut buf), Ok(()));
        assert_eq!(buf, [0x80, 0x01, 0x02, 0x03, 0x00, 0xAB, 0xCD, 0xEF]);
        assert_eq!(Deth::parse(&buf), Ok(deth));
    }

    #[test]
    fn src_qp_is_masked_and_reserved_ignored() {
        let deth = Deth {
            qkey: 1,
            src_qp: 0xFF00_0005,
        };
        let mut buf = [0u8; DETH_LEN];
        assert_eq!(deth.emit(&mut buf), Ok(()));
        assert_eq!(buf, [0, 0, 0, 1, 0, 0, 0, 5]);
        buf[4] = 0x5A;
        assert_eq!(Deth::parse(&buf), Ok(Deth { qkey: 1, src_qp: 5 }));
    }

    #[test]
    fn short_buffers_fail() {
        let buf = [0u8; DETH_LEN];
        for len in 0..DETH_LEN {
            assert_eq!(
                Deth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        let mut small = [0u8; DETH_LEN - 1];
        assert_eq!(
            Deth { qkey: 1, src_qp: 2 }.emit(&mut small),
            Err(WireError::BufferTooSmall)
        );
    }
}

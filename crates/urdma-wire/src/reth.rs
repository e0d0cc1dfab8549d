//! RDMA Extended Transport Header (IBTA Vol 1, 9.3.3).
//!
//! ```text
//!  byte 0-7   virtual address
//!  byte 8-11  R_Key
//!  byte 12-15 DMA length
//! ```

use crate::field::{need, room, Reader, Writer};
use crate::{WireError, RETH_LEN};

/// The RETH of RDMA WRITE (first and only packets) and RDMA READ requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reth {
    /// Remote virtual address of the first byte.
    pub va: u64,
    /// Remote key of the memory region.
    pub rkey: u32,
    /// Length of the whole transfer in bytes.
    pub dma_len: u32,
}

impl Reth {
    /// Parses the first [`RETH_LEN`] bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Reth, WireError> {
        need(buf, RETH_LEN)?;
        let mut r = Reader::new(buf);
        Ok(Reth {
            va: r.u64()?,
            rkey: r.u32()?,
            dma_len: r.u32()?,
        })
    }

    /// Writes this header into the first [`RETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, RETH_LEN)?;
        let mut w = Writer::new(buf);
        w.u64(self.va)?;
        w.u32(self.rkey)?;
        w.u32(self.dma_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let reth = Reth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x090A_0B0C,
            dma_len: 0x0D0E_0F10,
        };
        let mut buf = [0u8; RETH_LEN];
        assert_eq!(reth.emit(&mut buf), Ok(()));
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(Reth::parse(&buf), Ok(reth));
    }

    #[test]
    fn short_buffers_fail() {
        let buf = [0u8; RETH_LEN];
        for len in 0..RETH_LEN {
            assert_eq!(
                Reth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        let mut small = [0u8; RETH_LEN - 1];
        let reth = Reth {
            va: 1,
            rkey: 2,
            dma_len: 3,
        };
        assert_eq!(reth.emit(&mut small), Err(WireError::BufferTooSmall));
        assert_eq!(small, [0u8; RETH_LEN - 1]);
    }
}

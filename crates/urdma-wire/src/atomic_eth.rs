//! Atomic Extended Transport Header (IBTA Vol 1, 9.3.4).
//!
//! ```text
//!  byte 0-7   virtual address
//!  byte 8-11  R_Key
//!  byte 12-19 swap (compare-swap) or add (fetch-add) data
//!  byte 20-27 compare data
//! ```

use crate::field::{need, room, Reader, Writer};
use crate::{WireError, ATOMIC_ETH_LEN};

/// The AtomicETH of COMPARE_SWAP and FETCH_ADD requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEth {
    /// Remote virtual address of the 8-byte operand.
    pub va: u64,
    /// Remote key of the memory region.
    pub rkey: u32,
    /// The value to swap in (compare-swap) or to add (fetch-add).
    pub swap_add: u64,
    /// The value to compare with (compare-swap; ignored by fetch-add).
    pub compare: u64,
}

impl AtomicEth {
    /// Parses the first [`ATOMIC_ETH_LEN`] bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<AtomicEth, WireError> {
        need(buf, ATOMIC_ETH_LEN)?;
        let mut r = Reader::new(buf);
        Ok(AtomicEth {
            va: r.u64()?,
            rkey: r.u32()?,
            swap_add: r.u64()?,
            compare: r.u64()?,
        })
    }

    /// Writes this header into the first [`ATOMIC_ETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, ATOMIC_ETH_LEN)?;
        let mut w = Writer::new(buf);
        w.u64(self.va)?;
        w.u32(self.rkey)?;
        w.u64(self.swap_add)?;
        w.u64(self.compare)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let eth = AtomicEth {
            va: 0x1111_2222_3333_4444,
            rkey: 0x5555_6666,
            swap_add: 0x7777_8888_9999_AAAA,
            compare: 0xBBBB_CCCC_DDDD_EEEE,
        };
        let mut buf = [0u8; ATOMIC_ETH_LEN];
        assert_eq!(eth.emit(&mut buf), Ok(()));
        assert_eq!(
            buf.get(..8),
            Some(&[0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44][..])
        );
        assert_eq!(buf.get(8..12), Some(&[0x55, 0x55, 0x66, 0x66][..]));
        assert_eq!(buf.get(12..14), Some(&[0x77, 0x77][..]));
        assert_eq!(buf.get(20..22), Some(&[0xBB, 0xBB][..]));
        assert_eq!(buf.get(26..28), Some(&[0xEE, 0xEE][..]));
        assert_eq!(AtomicEth::parse(&buf), Ok(eth));
    }

    #[test]
    fn short_buffers_fail() {
        let buf = [0u8; ATOMIC_ETH_LEN];
        for len in 0..ATOMIC_ETH_LEN {
            assert_eq!(
                AtomicEth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        let eth = AtomicEth {
            va: 1,
            rkey: 2,
            swap_add: 3,
            compare: 4,
        };
        let mut small = [0u8; ATOMIC_ETH_LEN - 1];
        assert_eq!(eth.emit(&mut small), Err(WireError::BufferTooSmall));
    }
}

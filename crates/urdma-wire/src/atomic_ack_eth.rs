//! Atomic Acknowledge Extended Transport Header (IBTA Vol 1, 9.3.6).
//!
//! ```text
//!  byte 0-7   original remote data
//! ```

use crate::field::{need, room, Reader, Writer};
use crate::{WireError, ATOMIC_ACK_ETH_LEN};

/// The AtomicAckETH of ATOMIC_ACKNOWLEDGE packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEth {
    /// The value the remote location held before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Parses the first [`ATOMIC_ACK_ETH_LEN`] bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<AtomicAckEth, WireError> {
        need(buf, ATOMIC_ACK_ETH_LEN)?;
        Ok(AtomicAckEth {
            orig: Reader::new(buf).u64()?,
        })
    }

    /// Writes this header into the first [`ATOMIC_ACK_ETH_LEN`] bytes of
    /// `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, ATOMIC_ACK_ETH_LEN)?;
        Writer::new(buf).u64(self.orig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let eth = AtomicAckEth {
            orig: 0x0102_0304_0506_0708,
        };
        let mut buf = [0u8; ATOMIC_ACK_ETH_LEN];
        assert_eq!(eth.emit(&mut buf), Ok(()));
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(AtomicAckEth::parse(&buf), Ok(eth));
    }

    #[test]
    fn short_buffers_fail() {
        let buf = [0u8; ATOMIC_ACK_ETH_LEN];
        for len in 0..ATOMIC_ACK_ETH_LEN {
            assert_eq!(
                AtomicAckEth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        let mut small = [0u8; ATOMIC_ACK_ETH_LEN - 1];
        assert_eq!(
            AtomicAckEth { orig: 9 }.emit(&mut small),
            Err(WireError::BufferTooSmall)
        );
    }
}

//! Bounds-checked big-endian field access shared by the header modules.
//!
//! Every read and write goes through these cursors, so a short buffer turns
//! into a [`WireError`] instead of a panic.

use crate::WireError;

/// Sequential big-endian reader over an input slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Takes the next `N` bytes.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let truncated = WireError::Truncated(self.buf.len());
        let end = self.pos.checked_add(N).ok_or(truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(truncated)?;
        let out: [u8; N] = bytes.try_into().map_err(|_| truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// Takes one byte.
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    /// Takes a big-endian 16-bit field.
    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Takes a big-endian 24-bit field.
    pub(crate) fn u24(&mut self) -> Result<u32, WireError> {
        let [a, b, c] = self.array::<3>()?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }

    /// Takes a big-endian 32-bit field.
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Takes a big-endian 64-bit field.
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
}

/// Sequential big-endian writer into an output slice.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// Starts writing at the beginning of `buf`.
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Writes `bytes` at the current position.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        let end = self
            .pos
            .checked_add(bytes.len())
            .ok_or(WireError::BufferTooSmall)?;
        let dst = self
            .buf
            .get_mut(self.pos..end)
            .ok_or(WireError::BufferTooSmall)?;
        dst.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    /// Writes one byte.
    pub(crate) fn u8(&mut self, v: u8) -> Result<(), WireError> {
        self.bytes(&[v])
    }

    /// Writes a big-endian 16-bit field.
    pub(crate) fn u16(&mut self, v: u16) -> Result<(), WireError> {
        self.bytes(&v.to_be_bytes())
    }

    /// Writes the low 24 bits of `v` big-endian (the high byte is dropped).
    pub(crate) fn u24(&mut self, v: u32) -> Result<(), WireError> {
        let [_, a, b, c] = v.to_be_bytes();
        self.bytes(&[a, b, c])
    }

    /// Writes a big-endian 32-bit field.
    pub(crate) fn u32(&mut self, v: u32) -> Result<(), WireError> {
        self.bytes(&v.to_be_bytes())
    }

    /// Writes a big-endian 64-bit field.
    pub(crate) fn u64(&mut self, v: u64) -> Result<(), WireError> {
        self.bytes(&v.to_be_bytes())
    }
}

/// Fails with `Truncated` unless `buf` holds at least `len` bytes.
pub(crate) fn need(buf: &[u8], len: usize) -> Result<(), WireError> {
    if buf.len() < len {
        Err(WireError::Truncated(buf.len()))
    } else {
        Ok(())
    }
}

/// Fails with `BufferTooSmall` unless `buf` has room for `len` bytes.
pub(crate) fn room(buf: &[u8], len: usize) -> Result<(), WireError> {
    if buf.len() < len {
        Err(WireError::BufferTooSmall)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_reads_big_endian_and_stops_at_end() {
        let data = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let mut r = Reader::new(&data);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u24(), Ok(0x0002_0304));
        assert_eq!(r.u16(), Ok(0x0506));
        assert_eq!(r.u64(), Err(WireError::Truncated(10)));
        assert_eq!(r.u16(), Ok(0x0708));
        assert_eq!(r.u16(), Ok(0x090A));
        assert_eq!(r.u8(), Err(WireError::Truncated(10)));
    }

    #[test]
    fn writer_writes_big_endian_and_refuses_overflow() {
        let mut data = [0u8; 7];
        let mut w = Writer::new(&mut data);
        assert_eq!(w.u24(0xAA11_2233), Ok(()));
        assert_eq!(w.u32(0x4455_6677), Ok(()));
        assert_eq!(w.u8(0), Err(WireError::BufferTooSmall));
        assert_eq!(data, [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]);
    }
}

//! A whole MAD in a fixed array, with big-endian and bit-field access at
//! offsets from its start.
//!
//! Offsets are the constants of the message tables, all below
//! [`MAD_LEN`]; a field that would run past the end reads as zero and is
//! not written, so no access can panic.

use super::MAD_LEN;
use crate::WireError;

/// The bytes of one MAD.
pub(super) struct Mad([u8; MAD_LEN]);

impl Mad {
    /// An all-zero MAD.
    pub(super) fn zeroed() -> Self {
        Mad([0; MAD_LEN])
    }

    /// The first [`MAD_LEN`] bytes of `buf`.
    pub(super) fn from_slice(buf: &[u8]) -> Result<Self, WireError> {
        let head = buf.get(..MAD_LEN).ok_or(WireError::Truncated(buf.len()))?;
        let mut m = [0; MAD_LEN];
        m.copy_from_slice(head);
        Ok(Mad(m))
    }

    /// The bytes.
    pub(super) fn into_bytes(self) -> [u8; MAD_LEN] {
        self.0
    }

    /// `N` bytes at `off`.
    pub(super) fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut out = [0; N];
        if let Some(src) = off.checked_add(N).and_then(|end| self.0.get(off..end)) {
            out.copy_from_slice(src);
        }
        out
    }

    /// Writes `src` at `off`.
    pub(super) fn set_bytes(&mut self, off: usize, src: &[u8]) {
        if let Some(dst) = off
            .checked_add(src.len())
            .and_then(|end| self.0.get_mut(off..end))
        {
            dst.copy_from_slice(src);
        }
    }

    pub(super) fn u8(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }

    pub(super) fn set_u8(&mut self, off: usize, v: u8) {
        if let Some(b) = self.0.get_mut(off) {
            *b = v;
        }
    }

    pub(super) fn u16(&self, off: usize) -> u16 {
        u16::from_be_bytes(self.bytes(off))
    }

    pub(super) fn set_u16(&mut self, off: usize, v: u16) {
        self.set_bytes(off, &v.to_be_bytes());
    }

    /// The 24 bits at `off` (the high three bytes of a 32-bit field).
    pub(super) fn u24(&self, off: usize) -> u32 {
        let [a, b, c] = self.bytes(off);
        u32::from_be_bytes([0, a, b, c])
    }

    pub(super) fn set_u24(&mut self, off: usize, v: u32) {
        let [_, a, b, c] = v.to_be_bytes();
        self.set_bytes(off, &[a, b, c]);
    }

    pub(super) fn u32(&self, off: usize) -> u32 {
        u32::from_be_bytes(self.bytes(off))
    }

    pub(super) fn set_u32(&mut self, off: usize, v: u32) {
        self.set_bytes(off, &v.to_be_bytes());
    }

    pub(super) fn u64(&self, off: usize) -> u64 {
        u64::from_be_bytes(self.bytes(off))
    }

    pub(super) fn set_u64(&mut self, off: usize, v: u64) {
        self.set_bytes(off, &v.to_be_bytes());
    }

    /// `width` bits of byte `off`, starting `msb` bits below its most
    /// significant bit.
    pub(super) fn bits(&self, off: usize, msb: u32, width: u32) -> u8 {
        let shift = 8u32.saturating_sub(msb.saturating_add(width)).min(7);
        ((u16::from(self.u8(off)) >> shift) & mask(width)) as u8
    }

    /// Sets those bits to the low `width` bits of `v`.
    pub(super) fn set_bits(&mut self, off: usize, msb: u32, width: u32, v: u8) {
        let shift = 8u32.saturating_sub(msb.saturating_add(width)).min(7);
        let m = mask(width) << shift;
        let old = u16::from(self.u8(off));
        let new = (old & !m) | ((u16::from(v) << shift) & m);
        self.set_u8(off, (new & 0xFF) as u8);
    }

    /// The bit `msb` bits below the most significant bit of byte `off`.
    pub(super) fn flag(&self, off: usize, msb: u32) -> bool {
        self.bits(off, msb, 1) != 0
    }

    pub(super) fn set_flag(&mut self, off: usize, msb: u32, v: bool) {
        self.set_bits(off, msb, 1, u8::from(v));
    }
}

fn mask(width: u32) -> u16 {
    (1u16 << width.min(8)) - 1
}

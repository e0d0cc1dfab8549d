//! Registered memory as the engine sees it: a range of bytes it reads,
//! writes and runs atomics on, through the [`Memory`] trait.
//!
//! The engine never touches memory itself. The NIC gives each memory
//! region (MR) a [`Memory`] that reaches the bytes wherever they are (its
//! own allocation, a program's memory through that program's memory file,
//! a kernel MR through the kernel device); the simulator and the tests
//! use [`VecMemory`], a plain buffer. Every access is bounds-checked by
//! the implementation: an offset and a length can never reach outside the
//! region.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// An access outside the region or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// Offset plus length does not fit.
    #[error("access [{offset}, +{len}) outside region of {size} bytes")]
    OutOfBounds {
        /// Start offset.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Region size.
        size: usize,
    },
    /// An atomic on an address that is not 8-byte aligned.
    #[error("atomic access at a misaligned address")]
    Misaligned,
    /// The region was deregistered.
    #[error("region is no longer registered")]
    Invalid,
    /// The memory of the process that registered the region cannot be
    /// reached (the process ended or unmapped it).
    #[error("memory of the owning process is not reachable")]
    Unreachable,
}

/// A contiguous range of bytes the engine may read and write: the memory
/// behind one MR.
pub trait Memory: Send + Sync + std::fmt::Debug + Any {
    /// Size in bytes.
    fn len(&self) -> usize;

    /// True for a zero-length region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the NIC owns the bytes (allocated for the Rust API), so
    /// that ranges in use by a by-reference transfer are tracked.
    fn is_owned(&self) -> bool;

    /// Whether the region is still registered (not invalidated).
    fn is_valid(&self) -> bool;

    /// Whether this process addresses the bytes directly (not memory of
    /// another process or of the kernel, each access of which is a system
    /// call).
    fn is_mapped(&self) -> bool;

    /// Stop all further access (deregistration).
    fn invalidate(&self);

    /// Whether reading many bytes at once is worth a copy more than
    /// reading `piece` bytes at a time.
    fn prefers_large_reads(&self, piece: usize) -> bool;

    /// Copy `dst.len()` bytes starting at `offset` out of the region.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError>;

    /// Append `len` bytes starting at `offset` to `out`.
    fn read_into(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<(), MemError> {
        let at = out.len();
        out.resize(at + len, 0);
        let got = self.read(offset, &mut out[at..]);
        if got.is_err() {
            out.truncate(at);
        }
        got
    }

    /// Copy `src` into the region at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemError>;

    /// 64-bit compare-and-swap at `offset` (8-byte aligned); returns the
    /// value found there.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemError>;

    /// 64-bit fetch-and-add at `offset` (8-byte aligned); returns the value
    /// found there.
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemError>;

    /// Copy `len` bytes at `offset` of this region to `dst_offset` of
    /// `dst`. Implementations that know `dst`'s kind (through
    /// [`Memory::as_any`]) copy straight from one to the other; this one
    /// goes through a buffer. A range copied onto itself stays as it is.
    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Memory,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), MemError> {
        copy_through_buffer(self, offset, dst, dst_offset, len)
    }

    /// The region as [`Any`], so that an implementation can recognise its
    /// own kind in [`Memory::copy_to`].
    fn as_any(&self) -> &dyn Any;
}

/// Copy `len` bytes at `offset` of `src` to `dst_offset` of `dst`
/// ([`Memory::copy_to`]).
pub fn copy_between(
    src: &dyn Memory,
    offset: usize,
    dst: &dyn Memory,
    dst_offset: usize,
    len: usize,
) -> Result<(), MemError> {
    src.copy_to(offset, dst, dst_offset, len)
}

/// Copy `len` bytes at `offset` of `src` to `dst_offset` of `dst` through
/// a buffer of the engine's own: what [`Memory::copy_to`] does when it
/// knows no straighter way.
pub fn copy_through_buffer(
    src: &(impl Memory + ?Sized),
    offset: usize,
    dst: &dyn Memory,
    dst_offset: usize,
    len: usize,
) -> Result<(), MemError> {
    let mut bounce = Vec::with_capacity(len);
    src.read_into(offset, len, &mut bounce)?;
    dst.write(dst_offset, &bounce)
}

/// Memory in a buffer of the engine's own process: the simulator's and the
/// tests' MRs.
#[derive(Debug)]
pub struct VecMemory {
    bytes: Mutex<Vec<u8>>,
    valid: AtomicBool,
}

impl VecMemory {
    /// A zeroed region of `len` bytes.
    pub fn new(len: usize) -> Self {
        VecMemory {
            bytes: Mutex::new(vec![0; len]),
            valid: AtomicBool::new(true),
        }
    }

    fn check(&self, have: usize, offset: usize, len: usize) -> Result<(), MemError> {
        if !self.is_valid() {
            return Err(MemError::Invalid);
        }
        match offset.checked_add(len) {
            Some(end) if end <= have => Ok(()),
            _ => Err(MemError::OutOfBounds {
                offset,
                len,
                size: have,
            }),
        }
    }

    fn atomic(&self, offset: usize, op: impl FnOnce(u64) -> u64) -> Result<u64, MemError> {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        self.check(b.len(), offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let word = &mut b[offset..offset + 8];
        let old = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        word.copy_from_slice(&op(old).to_ne_bytes());
        Ok(old)
    }
}

impl Memory for VecMemory {
    fn len(&self) -> usize {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn is_owned(&self) -> bool {
        true
    }

    fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    fn is_mapped(&self) -> bool {
        true
    }

    fn invalidate(&self) {
        let _b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        self.valid.store(false, Ordering::Release);
    }

    fn prefers_large_reads(&self, _piece: usize) -> bool {
        false
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        self.check(b.len(), offset, dst.len())?;
        dst.copy_from_slice(&b[offset..offset + dst.len()]);
        Ok(())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemError> {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        self.check(b.len(), offset, src.len())?;
        b[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.atomic(offset, |old| if old == compare { swap } else { old })
    }

    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemError> {
        self.atomic(offset, |old| old.wrapping_add(add))
    }

    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Memory,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), MemError> {
        if std::ptr::addr_eq(self as *const Self, dst as *const dyn Memory) {
            let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
            self.check(b.len(), offset, len)?;
            self.check(b.len(), dst_offset, len)?;
            b.copy_within(offset..offset + len, dst_offset);
            return Ok(());
        }
        copy_through_buffer(self, offset, dst, dst_offset, len)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_outside_the_region_fail_and_change_nothing() {
        let m = VecMemory::new(16);
        m.write(8, &[1; 8]).unwrap();
        assert!(matches!(
            m.write(9, &[2; 8]),
            Err(MemError::OutOfBounds { .. })
        ));
        assert!(m.read(usize::MAX, &mut [0; 2]).is_err());
        let mut got = [0; 16];
        m.read(0, &mut got).unwrap();
        assert_eq!(got[8..], [1; 8]);
        assert_eq!(got[..8], [0; 8]);
    }

    #[test]
    fn atomics_need_alignment_and_return_the_old_value() {
        let m = VecMemory::new(16);
        assert_eq!(m.fetch_add(8, 5), Ok(0));
        assert_eq!(m.compare_swap(8, 5, 9), Ok(5));
        assert_eq!(m.compare_swap(8, 5, 1), Ok(9));
        assert_eq!(m.fetch_add(4, 1), Err(MemError::Misaligned));
    }

    #[test]
    fn invalidated_memory_refuses_access() {
        let m = VecMemory::new(8);
        m.invalidate();
        assert_eq!(m.read(0, &mut [0; 1]), Err(MemError::Invalid));
    }

    #[test]
    fn a_copy_within_one_region_may_overlap() {
        let m = VecMemory::new(8);
        m.write(0, &[1, 2, 3, 4]).unwrap();
        copy_between(&m, 0, &m, 2, 4).unwrap();
        let mut got = [0; 8];
        m.read(0, &mut got).unwrap();
        assert_eq!(got, [1, 2, 1, 2, 3, 4, 0, 0]);
    }
}

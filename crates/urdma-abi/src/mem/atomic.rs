//! Atomics on registered memory: compare-and-swap and fetch-and-add on
//! 64-bit words, in this process's memory or another's.

use super::{MemError, MemRegion};
use std::sync::atomic::{AtomicU64, Ordering};

impl MemRegion {
    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64, MemError> {
        self.check(offset, 8)?;
        if self.kernel.is_some() {
            return Err(MemError::Unreachable);
        }
        // SAFETY: offset + 8 <= len was checked.
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        if !(p as usize).is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        // SAFETY: p is 8-aligned, in bounds, valid for the region's life,
        // and all concurrent access to these bytes from urdma is either
        // atomic or excluded by the write lock the callers hold.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomic compare-and-swap of the 64-bit host-order word at `offset`;
    /// returns the original value.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemError> {
        let _guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        if self.process.is_some() {
            return self.update_in_process(offset, |v| if v == compare { swap } else { v });
        }
        let a = self.atomic_at(offset)?;
        Ok(
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// Atomic fetch-and-add of the 64-bit host-order word at `offset`;
    /// returns the original value.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemError> {
        let _guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        if self.process.is_some() {
            return self.update_in_process(offset, |v| v.wrapping_add(add));
        }
        let a = self.atomic_at(offset)?;
        Ok(a.fetch_add(add, Ordering::SeqCst))
    }

    /// Read-modify-write of the 64-bit word at `offset` of another
    /// process's memory, with the region's write lock held by the caller:
    /// atomic with respect to every other access through the NIC (the
    /// device reports `IBV_ATOMIC_HCA`), not to the CPUs of that process.
    fn update_in_process(
        &self,
        offset: usize,
        f: impl FnOnce(u64) -> u64,
    ) -> Result<u64, MemError> {
        let p = self.process.as_ref().ok_or(MemError::Invalid)?;
        self.check(offset, 8)?;
        let at = p.base + offset as u64;
        if !at.is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        let mut b = [0u8; 8];
        // SAFETY: b is a live buffer of 8 bytes.
        unsafe { p.mem.read(at, b.as_mut_ptr(), 8, true) }.map_err(|()| MemError::Unreachable)?;
        let old = u64::from_ne_bytes(b);
        p.mem
            .write(at, &f(old).to_ne_bytes())
            .map_err(|()| MemError::Unreachable)?;
        Ok(old)
    }
}

//! Memory the NIC reads and writes: page-aligned anonymous mappings
//! (registered as MRs), and the copies between them and the program's
//! buffers. The peer writes into these regions at any time, so they are
//! only ever reached through raw pointers, every access bounds-checked.

use super::wire::{Sge, SGE_LEN};
use crate::sys::*;

/// An anonymous mapping, zeroed, unmapped on drop.
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the rsocket
// that holds it is behind a mutex.
unsafe impl Send for Region {}

impl Region {
    /// A zeroed mapping of `len` bytes (at least one page).
    pub fn new(len: usize) -> Result<Region, i32> {
        let len = len.max(1);
        // SAFETY: an anonymous private mapping; no file, no fixed address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(libc::ENOMEM);
        }
        // Not inherited by a child: the NIC keeps writing into the
        // parent's pages (rdma-core's rsockets do the same).
        // SAFETY: advising the mapping just made.
        unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) };
        Ok(Region { ptr: p.cast(), len })
    }

    /// Its address.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, n: usize) -> Result<(), i32> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(libc::EFAULT),
        }
    }

    /// Copy `n` bytes at `off` to the program's `dst`.
    ///
    /// # Safety
    /// `dst` is `n` writable bytes.
    pub unsafe fn copy_out(&self, off: usize, dst: *mut u8, n: usize) -> Result<(), i32> {
        self.check(off, n)?;
        // SAFETY: the range is inside the mapping (checked); dst is n
        // writable bytes (the caller's contract) and not in the mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst, n) };
        Ok(())
    }

    /// Copy `n` bytes from the program's `src` to `off`.
    ///
    /// # Safety
    /// `src` is `n` readable bytes.
    pub unsafe fn copy_in(&self, off: usize, src: *const u8, n: usize) -> Result<(), i32> {
        self.check(off, n)?;
        // SAFETY: as in copy_out, the other way.
        unsafe { std::ptr::copy_nonoverlapping(src, self.ptr.add(off), n) };
        Ok(())
    }

    /// The scatter entry at index `i` (volatile: the peer writes them).
    pub fn sge(&self, i: usize, swap: bool) -> Sge {
        let mut b = [0u8; SGE_LEN];
        if self.check(i * SGE_LEN, SGE_LEN).is_ok() {
            for (k, byte) in b.iter_mut().enumerate() {
                // SAFETY: inside the mapping (checked above).
                *byte = unsafe { std::ptr::read_volatile(self.ptr.add(i * SGE_LEN + k)) };
            }
        }
        Sge::from_bytes(&b, swap)
    }

    /// Store the scatter entry at index `i`.
    pub fn set_sge(&self, i: usize, s: Sge, swap: bool) {
        if self.check(i * SGE_LEN, SGE_LEN).is_err() {
            return;
        }
        for (k, byte) in s.to_bytes(swap).iter().enumerate() {
            // SAFETY: inside the mapping (checked above).
            unsafe { std::ptr::write_volatile(self.ptr.add(i * SGE_LEN + k), *byte) };
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made; nothing refers to it now
        // (its MR is deregistered first: see Mr's owner).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A memory registration, deregistered on drop.
pub struct Mr(*mut ibv_mr);

// SAFETY: an MR handle of urdma's libibverbs, usable from any thread.
unsafe impl Send for Mr {}

impl Mr {
    /// Register `r` in `pd` with `access`.
    pub fn new(pd: *mut ibv_pd, r: &Region, access: u32) -> Result<Mr, i32> {
        // SAFETY: pd is the rsocket's QP's PD; the region is live memory.
        let mr = unsafe { ibv_reg_mr(pd, r.ptr.cast(), r.len, access as i32) };
        match mr.is_null() {
            true => Err(crate::errno()),
            false => Ok(Mr(mr)),
        }
    }

    /// Its lkey.
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.0).lkey }
    }

    /// Its rkey.
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR this value registered.
        unsafe { ibv_dereg_mr(self.0) };
    }
}

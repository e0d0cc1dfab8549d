//! Registered memory: the one module of the engine that touches memory
//! through raw pointers. Every access is bounds-checked here, so a caller
//! that passes an offset and a length can never reach outside the region.
//!
//! A region is either owned (allocated by urdma for the safe Rust API),
//! foreign (memory of a C caller, registered by address and length), or
//! memory of another process: the NIC agent reaches a client's registered
//! memory through the client's own `/proc/self/mem`, which the client opens
//! and hands over when it connects, and reads it with one copy where the
//! system allows (see [`MemRegion::in_process`], [`ProcessMemory`]), or
//! shared memory both map ([`MemRegion::allocate_shared`]). Within one
//! process, access from the engine and from the safe API is serialised by
//! a lock, so a safe Rust program on a NIC inside it never observes a torn
//! copy; across processes (the NIC agent writing a region the program
//! reads) only the bytes are shared, as with a hardware NIC's DMA.

mod atomic;
mod kernel;

use crate::procmem::ProcessMemory;
use kernel::KernelMem;
use std::alloc::{self, Layout};
use std::fs::File;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::RwLock;

/// Alignment of owned regions (a page, as registered memory usually is).
const OWNED_ALIGN: usize = 4096;

pub use urdma_proto::memory::{MemError, Memory};

/// Memory of another process ([`ProcessMemory`]).
#[derive(Debug)]
struct ProcessMem {
    mem: Arc<ProcessMemory>,
    /// Address of the first byte in that process.
    base: u64,
}

/// A contiguous range of memory that the engine may read and write.
pub struct MemRegion {
    ptr: NonNull<u8>,
    len: usize,
    owned: bool,
    valid: AtomicBool,
    lock: RwLock<()>,
    /// Set for memory of another process; `ptr` is then unused.
    process: Option<ProcessMem>,
    /// Set for memory of a kernel MR; `ptr` is then unused.
    kernel: Option<KernelMem>,
    /// Shared memory the region lies in (`ptr` is its base), unmapped
    /// with the region.
    mapping: Option<crate::shm::SharedMapping>,
}

// SAFETY: the region is plain bytes; all access goes through the methods
// below, which serialise copies with `lock` and use atomics for atomics.
unsafe impl Send for MemRegion {}
// SAFETY: as above; shared access is synchronised internally.
unsafe impl Sync for MemRegion {}

impl std::fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("owned", &self.owned)
            .finish()
    }
}

impl MemRegion {
    /// Allocate a zeroed, page-aligned region of `len` bytes.
    pub fn allocate(len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Ok(Self::with_ptr(NonNull::dangling(), 0, true));
        }
        let layout = Layout::from_size_align(len, OWNED_ALIGN)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr =
            NonNull::new(raw).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self::with_ptr(ptr, len, true))
    }

    /// Wrap memory owned by someone else (a C caller's buffer).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes until
    /// [`MemRegion::invalidate`] is called or the region is dropped.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Option<Self> {
        let ptr = if len == 0 {
            NonNull::dangling()
        } else {
            NonNull::new(ptr)?
        };
        Some(Self::with_ptr(ptr, len, false))
    }

    /// Memory of another process: `len` bytes at `base` in the process
    /// `mem` reaches (its `/proc/PID/mem`, opened read-write by that
    /// process and passed over, see [`ProcessMemory`]). Every access is
    /// bounds-checked against `len` first; once the process has ended or
    /// `exec`ed, accesses fail with [`MemError::Unreachable`].
    pub fn in_process(mem: Arc<ProcessMemory>, base: u64, len: usize) -> Option<Self> {
        base.checked_add(len as u64)?;
        let mut r = Self::with_ptr(NonNull::dangling(), len, false);
        r.process = Some(ProcessMem { mem, base });
        Some(r)
    }

    fn with_ptr(ptr: NonNull<u8>, len: usize, owned: bool) -> Self {
        MemRegion {
            ptr,
            len,
            owned,
            valid: AtomicBool::new(true),
            lock: RwLock::new(()),
            process: None,
            kernel: None,
            mapping: None,
        }
    }

    /// The kernel MR `key` of the kernel channel `chan`: `len` bytes from
    /// I/O address `iova` (`usize::MAX` for a DMA MR, all of kernel
    /// memory). Every access is a `URDMA_IOC_DMA` on `chan`, which the
    /// kernel checks against the MR as it is at that moment; atomics are
    /// refused ([`MemError::Unreachable`]).
    pub fn in_kernel(chan: Arc<File>, key: u32, iova: u64, len: usize) -> Self {
        let mut r = Self::with_ptr(NonNull::dangling(), len, false);
        r.kernel = Some(KernelMem { chan, key, iova });
        r
    }

    /// Allocate a zeroed region of `len` bytes in shared memory (a sealed
    /// memfd) that the NIC agent maps too, so that it reaches the region
    /// with no system call; see [`MemRegion::shared_fd`].
    pub fn allocate_shared(len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Self::allocate(0);
        }
        Ok(Self::in_mapping(crate::shm::SharedMapping::create(
            c"urdma-mr",
            len,
        )?))
    }

    /// The region of shared memory `mapping` maps (the agent's view of a
    /// driver's [`MemRegion::allocate_shared`] region).
    pub fn in_mapping(mapping: crate::shm::SharedMapping) -> Self {
        let mut r = Self::with_ptr(mapping.base(), mapping.len(), false);
        r.mapping = Some(mapping);
        r
    }

    /// The memfd of a region in shared memory, to pass to the NIC agent.
    pub fn shared_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.mapping.as_ref().and_then(|m| m.fd())
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for memory urdma allocated in this process
    /// ([`MemRegion::allocate`]), which the safe API reads and writes.
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte (for reporting; never dereference it outside this module).
    pub fn addr(&self) -> usize {
        match (&self.process, &self.kernel) {
            (Some(p), _) => p.base as usize,
            (_, Some(k)) => k.iova as usize,
            _ => self.ptr.as_ptr() as usize,
        }
    }

    /// Stop all further access (deregistration of foreign memory).
    pub fn invalidate(&self) {
        let _guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        self.valid.store(false, Ordering::Release);
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), MemError> {
        if !self.valid.load(Ordering::Acquire) {
            return Err(MemError::Invalid);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(MemError::OutOfBounds {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Whether reading many bytes at once is worth a copy more than
    /// reading `piece` bytes at a time: memory of another process read
    /// through its memory file, where each access is a system call that
    /// makes the kernel allocate (and, built so, zero) a page
    /// ([`crate::config::stage_reads`]); pieces the cross-memory reads
    /// take allocate none.
    pub fn prefers_large_reads(&self, piece: usize) -> bool {
        self.process
            .as_ref()
            .is_some_and(|p| !p.mem.reads_directly(piece))
            && crate::config::stage_reads()
    }

    /// Copy `dst.len()` bytes starting at `offset` out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        // SAFETY: u8 and MaybeUninit<u8> have one layout, and read_uninit
        // only writes initialized bytes into the slice.
        let dst = unsafe { &mut *(dst as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.read_uninit(offset, dst)
    }

    /// Copy `dst.len()` bytes starting at `offset` into `dst`, which need
    /// not be initialized; on success every byte of it is.
    fn read_uninit(&self, offset: usize, dst: &mut [MaybeUninit<u8>]) -> Result<(), MemError> {
        let _guard = self.lock.read().unwrap_or_else(|e| e.into_inner());
        self.check(offset, dst.len())?;
        // SAFETY: dst is a distinct Rust buffer valid for dst.len() bytes.
        // dst is this process's own buffer.
        unsafe { self.read_locked(offset, dst.as_mut_ptr().cast::<u8>(), dst.len(), true) }
    }

    /// Copy `len` bytes at `offset` of the region to `buf`.
    ///
    /// # Safety
    /// The caller holds the region's lock and has checked `offset` and
    /// `len` ([`MemRegion::check`]); `buf` is valid for writes of `len`
    /// bytes and, for memory of this process, may overlap the region.
    /// `private`: only this process sees `buf` ([`ProcessMemory::read`]).
    unsafe fn read_locked(
        &self,
        offset: usize,
        buf: *mut u8,
        len: usize,
        private: bool,
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        if let Some(p) = &self.process {
            // SAFETY: buf is valid for writes of len bytes (the caller's
            // promise).
            return unsafe { p.mem.read(p.base + offset as u64, buf, len, private) }
                .map_err(|()| MemError::Unreachable);
        }
        if let Some(k) = &self.kernel {
            return k.access(offset, buf, len, false);
        }
        // SAFETY: check() proved offset + len <= self.len, and the region is
        // valid for self.len bytes; buf is valid for len bytes (the
        // caller's promise), and `copy` allows the two to overlap.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(offset), buf, len) };
        Ok(())
    }

    /// Copy `len` bytes from `buf` into the region at `offset`.
    ///
    /// # Safety
    /// The caller holds the region's write lock and has checked `offset`
    /// and `len`; `buf` is valid for reads of `len` bytes and, for memory
    /// of this process, may overlap the region.
    unsafe fn write_locked(
        &self,
        offset: usize,
        buf: *const u8,
        len: usize,
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        if let Some(p) = &self.process {
            // SAFETY: buf is valid for reads of len bytes (the caller's
            // promise) and the kernel only reads it.
            let src = unsafe { std::slice::from_raw_parts(buf, len) };
            return p
                .mem
                .write(p.base + offset as u64, src)
                .map_err(|()| MemError::Unreachable);
        }
        if let Some(k) = &self.kernel {
            // The kernel only reads from the buffer.
            return k.access(offset, buf.cast_mut(), len, true);
        }
        // SAFETY: bounds checked by the caller; buf is valid for len bytes,
        // and `copy` allows the two to overlap.
        unsafe { std::ptr::copy(buf, self.ptr.as_ptr().add(offset), len) };
        Ok(())
    }

    /// Whether the region is still registered (not invalidated).
    pub fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    /// Whether the region is memory this process addresses directly (not
    /// memory of another process or of the kernel, each access of which
    /// is a system call).
    pub fn is_mapped(&self) -> bool {
        self.process.is_none() && self.kernel.is_none()
    }

    /// Append `len` bytes starting at `offset` to `out` (the room they
    /// take is not zeroed first).
    pub fn read_into(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<(), MemError> {
        out.reserve(len);
        self.read_uninit(offset, &mut out.spare_capacity_mut()[..len])?;
        // SAFETY: read_uninit initialized the first `len` bytes of the
        // spare capacity, which reserve() made at least `len` long.
        unsafe { out.set_len(out.len() + len) };
        Ok(())
    }

    /// Copy `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemError> {
        let _guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        self.check(offset, src.len())?;
        // SAFETY: the write lock is held, the range checked, and src is a
        // Rust slice of src.len() bytes.
        unsafe { self.write_locked(offset, src.as_ptr(), src.len()) }
    }

    /// Copy `len` bytes at `offset` of `src` to `dst_offset` of `dst`,
    /// straight from one region to the other when either is memory of
    /// this process (one copy), through a bounce buffer otherwise. The
    /// two regions' locks are taken in one order whatever the direction,
    /// so that two copies in opposite directions never wait on each other;
    /// within one region the ranges may overlap (a range onto itself is
    /// left as it is).
    pub fn copy_between(
        src: &MemRegion,
        offset: usize,
        dst: &MemRegion,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), MemError> {
        let same = std::ptr::eq(src, dst);
        let (_read, _write);
        if same {
            _write = dst.lock.write().unwrap_or_else(|e| e.into_inner());
        } else if (src as *const MemRegion) < (dst as *const MemRegion) {
            _read = src.lock.read().unwrap_or_else(|e| e.into_inner());
            _write = dst.lock.write().unwrap_or_else(|e| e.into_inner());
        } else {
            _write = dst.lock.write().unwrap_or_else(|e| e.into_inner());
            _read = src.lock.read().unwrap_or_else(|e| e.into_inner());
        }
        src.check(offset, len)?;
        dst.check(dst_offset, len)?;
        if same && offset == dst_offset {
            // The bytes are where they are to go.
            return Ok(());
        }
        if dst.is_mapped() {
            // SAFETY: dst_offset + len <= dst.len was checked, dst is
            // mapped, and its write lock is held; read_locked allows the
            // buffer to overlap src.
            let to = unsafe { dst.ptr.as_ptr().add(dst_offset) };
            // dst may be memory another process shares, which must never
            // hold bytes a failed check of the cross-memory read drops.
            // SAFETY: src's lock is held and its range checked.
            return unsafe { src.read_locked(offset, to, len, false) };
        }
        if src.is_mapped() {
            // SAFETY: offset + len <= src.len was checked, src is mapped,
            // and its lock is held.
            let from = unsafe { src.ptr.as_ptr().add(offset) };
            // SAFETY: dst's write lock is held and its range checked.
            return unsafe { dst.write_locked(dst_offset, from, len) };
        }
        let mut bounce = Vec::with_capacity(len);
        // SAFETY: both locks are held and both ranges checked; `bounce`
        // has room for len bytes, which read_locked fills before
        // write_locked reads them.
        unsafe {
            src.read_locked(offset, bounce.as_mut_ptr(), len, true)?;
            bounce.set_len(len);
            dst.write_locked(dst_offset, bounce.as_ptr(), len)
        }
    }
}

impl Memory for MemRegion {
    fn len(&self) -> usize {
        MemRegion::len(self)
    }

    fn is_owned(&self) -> bool {
        MemRegion::is_owned(self)
    }

    fn is_valid(&self) -> bool {
        MemRegion::is_valid(self)
    }

    fn is_mapped(&self) -> bool {
        MemRegion::is_mapped(self)
    }

    fn invalidate(&self) {
        MemRegion::invalidate(self)
    }

    fn prefers_large_reads(&self, piece: usize) -> bool {
        MemRegion::prefers_large_reads(self, piece)
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        MemRegion::read(self, offset, dst)
    }

    fn read_into(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<(), MemError> {
        MemRegion::read_into(self, offset, len, out)
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemError> {
        MemRegion::write(self, offset, src)
    }

    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemError> {
        MemRegion::compare_swap(self, offset, compare, swap)
    }

    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemError> {
        MemRegion::fetch_add(self, offset, add)
    }

    /// Straight from one region to the other when `dst` is a region too
    /// ([`MemRegion::copy_between`]), through a buffer otherwise.
    fn copy_to(
        &self,
        offset: usize,
        dst: &dyn Memory,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), MemError> {
        match dst.as_any().downcast_ref::<MemRegion>() {
            Some(d) => MemRegion::copy_between(self, offset, d, dst_offset, len),
            None => urdma_proto::memory::copy_through_buffer(self, offset, dst, dst_offset, len),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        if self.owned && self.len > 0 {
            if let Ok(layout) = Layout::from_size_align(self.len, OWNED_ALIGN) {
                // SAFETY: allocated in `allocate` with this very layout.
                unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
        }
    }
}
#[cfg(test)]
mod tests;

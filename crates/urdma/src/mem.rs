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

use crate::procmem::ProcessMemory;
use std::alloc::{self, Layout};
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::RwLock;

/// Alignment of owned regions (a page, as registered memory usually is).
const OWNED_ALIGN: usize = 4096;

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

/// Memory of another process ([`ProcessMemory`]).
#[derive(Debug)]
struct ProcessMem {
    mem: Arc<ProcessMemory>,
    /// Address of the first byte in that process.
    base: u64,
}

/// Memory of a kernel MR, reached through the kernel channel's
/// `URDMA_IOC_DMA`: the kernel checks every access against the MR.
#[derive(Debug)]
struct KernelMem {
    chan: Arc<File>,
    key: u32,
    /// I/O address of the first byte.
    iova: u64,
}

/// `struct urdma_dma` of `kernel/urdma_abi.h`.
#[repr(C)]
struct DmaCmd {
    iova: u64,
    buf: u64,
    len: u32,
    key: u32,
    write: u32,
    reserved: u32,
}

nix::ioctl_write_ptr!(ioc_dma, 0xb5, 4, DmaCmd);

/// Most bytes one `URDMA_IOC_DMA` moves (`URDMA_DMA_MAX`).
const DMA_MAX: usize = 1 << 20;

impl KernelMem {
    /// Move `len` bytes at `offset` between the MR and `buf`.
    fn access(&self, offset: usize, buf: *mut u8, len: usize, write: bool) -> Result<(), MemError> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(DMA_MAX);
            let cmd = DmaCmd {
                iova: self.iova.wrapping_add((offset + done) as u64),
                buf: buf as u64 + done as u64,
                len: n as u32,
                key: self.key,
                write: u32::from(write),
                reserved: 0,
            };
            // SAFETY: the command is a live struct of the layout the
            // ioctl number encodes; the kernel copies `n` bytes from or
            // into `buf + done`, which the caller's slice covers.
            unsafe { ioc_dma(self.chan.as_raw_fd(), &cmd) }.map_err(|_| MemError::Unreachable)?;
            done += n;
        }
        Ok(())
    }
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
mod tests {
    use super::*;

    #[test]
    fn read_write_in_bounds() {
        let m = MemRegion::allocate(64).unwrap();
        m.write(10, b"hello").unwrap();
        let mut b = [0u8; 5];
        m.read(10, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        let mut v = vec![1];
        m.read_into(9, 3, &mut v).unwrap();
        assert_eq!(v, [1, 0, b'h', b'e']);
    }

    #[test]
    fn out_of_bounds_is_refused() {
        let m = MemRegion::allocate(16).unwrap();
        assert!(m.write(12, b"12345").is_err());
        assert!(m.write(usize::MAX, b"1").is_err());
        let mut b = [0u8; 17];
        assert!(m.read(0, &mut b).is_err());
        let mut v = Vec::new();
        assert!(m.read_into(15, 2, &mut v).is_err());
        assert!(v.is_empty());
        assert!(m.fetch_add(9, 1).is_err());
    }

    #[test]
    fn atomics_and_alignment() {
        let m = MemRegion::allocate(32).unwrap();
        assert_eq!(m.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(m.fetch_add(8, 5).unwrap(), 5);
        assert_eq!(m.compare_swap(8, 10, 99).unwrap(), 10);
        assert_eq!(m.compare_swap(8, 10, 1).unwrap(), 99);
        assert_eq!(m.fetch_add(4, 1), Err(MemError::Misaligned));
    }

    #[test]
    fn memory_of_a_process_through_its_mem_file() {
        let mut buf = vec![0u8; 64];
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        let base = buf.as_mut_ptr() as u64;
        let m = MemRegion::in_process(Arc::new(ProcessMemory::file_only(file)), base, 32).unwrap();
        m.write(8, b"remote").unwrap();
        let mut b = [0u8; 6];
        m.read(8, &mut b).unwrap();
        assert_eq!(&b, b"remote");
        assert!(m.write(30, b"xyz").is_err());
        let aligned = (8 - (base % 8) as usize) % 8;
        assert_eq!(m.fetch_add(aligned + 16, 7).unwrap(), 0);
        assert_eq!(m.compare_swap(aligned + 16, 7, 9).unwrap(), 7);
        assert_eq!(m.fetch_add(aligned + 17, 1), Err(MemError::Misaligned));
        assert_eq!(m.addr() as u64, base);
        m.invalidate();
        assert_eq!(m.read(0, &mut b), Err(MemError::Invalid));
        assert_eq!(&std::hint::black_box(&buf)[8..14], b"remote");
        assert!(MemRegion::in_process(
            Arc::new(ProcessMemory::file_only(tempfile_like())),
            u64::MAX,
            2
        )
        .is_none());
    }

    #[test]
    fn copies_between_regions_of_every_kind() {
        let a = MemRegion::allocate(64).unwrap();
        let b = MemRegion::allocate(64).unwrap();
        a.write(0, b"0123456789").unwrap();
        MemRegion::copy_between(&a, 2, &b, 10, 5).unwrap();
        let mut got = [0u8; 5];
        b.read(10, &mut got).unwrap();
        assert_eq!(&got, b"23456");
        // Within one region, overlapping.
        MemRegion::copy_between(&a, 0, &a, 3, 10).unwrap();
        let mut all = [0u8; 13];
        a.read(0, &mut all).unwrap();
        assert_eq!(&all, b"0120123456789");
        // Memory of a process on either side, and on both (this process,
        // reached as the agent reaches a driver's).
        let mut buf = vec![0u8; 64];
        let file = Arc::new(ProcessMemory::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/proc/self/mem")
                .unwrap(),
            Some(std::process::id()),
            crate::procmem::Sentinel::of_this_process(),
        ));
        let p = MemRegion::in_process(file.clone(), buf.as_mut_ptr() as u64, 32).unwrap();
        let q = MemRegion::in_process(file.clone(), buf.as_mut_ptr() as u64 + 32, 32).unwrap();
        MemRegion::copy_between(&a, 3, &p, 1, 4).unwrap();
        MemRegion::copy_between(&p, 1, &q, 0, 4).unwrap();
        MemRegion::copy_between(&q, 0, &b, 40, 4).unwrap();
        b.read(40, &mut got[..4]).unwrap();
        assert_eq!(&got[..4], b"0123");
        assert_eq!(&std::hint::black_box(&buf)[32..36], b"0123");
        // Long enough for the cross-memory read.
        let n = crate::procmem::DIRECT_MIN;
        let mut big: Vec<u8> = (0..2 * n).map(|i| (i % 251) as u8).collect();
        let from = MemRegion::in_process(file.clone(), big.as_mut_ptr() as u64, n).unwrap();
        let to =
            MemRegion::in_process(file.clone(), big.as_mut_ptr() as u64 + n as u64, n).unwrap();
        MemRegion::copy_between(&from, 0, &to, 0, n).unwrap();
        assert_eq!(file.direct_bytes(), n as u64);
        // Into memory this process maps (which may be shared): the file.
        let mapped = MemRegion::allocate(n).unwrap();
        MemRegion::copy_between(&from, 0, &mapped, 0, n).unwrap();
        assert_eq!(file.direct_bytes(), n as u64);
        let mut back = vec![0u8; n];
        mapped.read(0, &mut back).unwrap();
        let big = std::hint::black_box(&big);
        assert_eq!(big[..n], big[n..]);
        assert_eq!(back[..], big[..n]);
    }

    #[test]
    fn copies_out_of_bounds_or_invalid_change_nothing() {
        let a = MemRegion::allocate(16).unwrap();
        let b = MemRegion::allocate(16).unwrap();
        a.write(0, b"abcdefgh").unwrap();
        assert!(MemRegion::copy_between(&a, 12, &b, 0, 8).is_err());
        assert!(MemRegion::copy_between(&a, 0, &b, 12, 8).is_err());
        assert!(MemRegion::copy_between(&a, usize::MAX, &b, 0, 2).is_err());
        assert!(MemRegion::copy_between(&a, 0, &a, 10, 8).is_err());
        b.invalidate();
        assert_eq!(
            MemRegion::copy_between(&a, 0, &b, 0, 4),
            Err(MemError::Invalid)
        );
        let mut all = [0u8; 16];
        a.read(0, &mut all).unwrap();
        assert_eq!(&all, b"abcdefgh\0\0\0\0\0\0\0\0");
    }

    #[test]
    fn copies_in_opposite_directions_at_once_finish() {
        let a = Arc::new(MemRegion::allocate(4096).unwrap());
        let b = Arc::new(MemRegion::allocate(4096).unwrap());
        let (a2, b2) = (a.clone(), b.clone());
        let t = std::thread::spawn(move || {
            for _ in 0..2000 {
                MemRegion::copy_between(&a2, 0, &b2, 0, 4096).unwrap();
            }
        });
        for _ in 0..2000 {
            MemRegion::copy_between(&b, 0, &a, 0, 4096).unwrap();
        }
        t.join().unwrap();
    }

    fn tempfile_like() -> File {
        File::open("/dev/null").unwrap()
    }

    #[test]
    fn invalidated_region_refuses_access() {
        let mut buf = [0u8; 8];
        // SAFETY: buf outlives m.
        let m = unsafe { MemRegion::from_raw(buf.as_mut_ptr(), buf.len()) }.unwrap();
        m.write(0, b"ab").unwrap();
        m.invalidate();
        assert_eq!(m.write(0, b"x"), Err(MemError::Invalid));
        drop(m);
        assert_eq!(&buf[..2], b"ab");
    }
}

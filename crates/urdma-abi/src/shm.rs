//! Shared memory between processes: sealed memfd mappings and futexes.
//!
//! A [`SharedMapping`] is a `MAP_SHARED` read-write mapping that another
//! process may map too and write at any time. Its safe API never hands out
//! plain references into the mapping: only atomics (which tolerate
//! concurrent writers) and bounds-checked byte copies done with relaxed
//! atomic loads and stores, so garbage written by the other side can give
//! wrong values but never undefined behaviour or an access out of bounds.
//!
//! A mapping of a file made by another process is only safe if that file
//! cannot shrink under us (an access past its end raises SIGBUS), so
//! [`SharedMapping::from_fd`] requires `F_SEAL_SHRINK` and a large enough
//! file before mapping it.
//!
//! [`futex_wait`] and [`futex_wake`] use the non-private futex operations,
//! which key on the underlying page, so a waiter and a waker in different
//! processes (or in two mappings of the same file) meet.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// A read-write `MAP_SHARED` mapping, unmapped on drop.
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is plain memory owned by this value until drop; all
// access through the API is atomic, so sharing it between threads is sound.
unsafe impl Send for SharedMapping {}
// SAFETY: as above; `&self` methods only perform atomic accesses.
unsafe impl Sync for SharedMapping {}

impl std::fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMapping")
            .field("len", &self.len)
            .field("fd", &self.fd)
            .finish()
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl SharedMapping {
    /// A zero-filled mapping of `len` bytes in a new memfd named `name`,
    /// sealed against shrinking, growing and further sealing, so another
    /// process can map it safely with [`SharedMapping::from_fd`].
    pub fn create(name: &CStr, len: usize) -> io::Result<Self> {
        let size = libc::off_t::try_from(len).map_err(|_| invalid("mapping too large"))?;
        // SAFETY: `name` is a valid NUL-terminated string; the flags are valid.
        let raw = cvt(unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        })?;
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall on a descriptor we own.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: plain fcntl on a descriptor we own.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
        Self::map(Some(fd), len)
    }

    /// A zero-filled anonymous shared mapping of `len` bytes (no file
    /// descriptor: only this process and its forks see it).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Self::map(None, len)
    }

    /// Map the first `len` bytes of a file made by another, untrusted,
    /// process. Fails with `InvalidInput` unless the file carries
    /// `F_SEAL_SHRINK` and is at least `len` bytes long.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<Self> {
        // SAFETY: plain fcntl on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(invalid("shared memory file does not support seals"));
        }
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(
                "shared memory file is not sealed against shrinking",
            ));
        }
        // Only ordinary shared memory: a huge-page file (hugetlbfs also
        // takes seals) can fault with SIGBUS when the host's pool of huge
        // pages runs out.
        if !is_shmem(&fd) {
            return Err(invalid(
                "shared memory file is not an ordinary memfd (tmpfs)",
            ));
        }
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is valid for writes of a `struct stat`.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
        // SAFETY: fstat succeeded, so it initialised `st`.
        let st = unsafe { st.assume_init() };
        if (st.st_mode & libc::S_IFMT) != libc::S_IFREG {
            return Err(invalid("shared memory descriptor is not a regular file"));
        }
        if u64::try_from(st.st_size).map_or(true, |size| size < len as u64) {
            return Err(invalid("shared memory file is too small"));
        }
        Self::map(Some(fd), len)
    }

    fn map(fd: Option<OwnedFd>, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(invalid("empty mapping"));
        }
        let (flags, raw) = match &fd {
            Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
            None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
        };
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh mapping chosen by the kernel overlaps nothing we
        // own; `len` is non-zero and `raw` is a valid descriptor or -1.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, raw, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| invalid("mmap returned null"))?;
        Ok(SharedMapping { ptr, len, fd })
    }

    /// Address of the first byte of the mapping (valid for `len()` bytes
    /// while the mapping lives).
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping is never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file behind the mapping (None for an anonymous mapping, or
    /// once closed).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Close the file behind the mapping once no other process needs it
    /// handed over: the mapping stays, and a process with many mappings
    /// (a QP's rings each) does not run out of descriptors.
    pub fn close_fd(&mut self) {
        self.fd = None;
    }

    fn check(&self, off: usize, size: usize, align: usize) -> io::Result<*mut u8> {
        match off.checked_add(size) {
            Some(end) if end <= self.len && off.is_multiple_of(align) => {
                // SAFETY: `off + size <= len`, so the result stays inside
                // the mapping (which is page aligned, so the address has
                // the alignment of `off`).
                Ok(unsafe { self.ptr.as_ptr().add(off) })
            }
            _ => Err(invalid("access outside the shared mapping")),
        }
    }

    /// The `AtomicU64` at byte offset `off`.
    ///
    /// # Panics
    /// If `off` is not 8-byte aligned or the word is not inside the mapping.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        let p = self.check(off, 8, 8).expect("aligned in-bounds atomic");
        // SAFETY: `p` is aligned, in bounds, lives as long as `&self`, and
        // the memory is only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(p.cast()) }
    }

    /// The `AtomicU32` at byte offset `off`.
    ///
    /// # Panics
    /// If `off` is not 4-byte aligned or the word is not inside the mapping.
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        let p = self.check(off, 4, 4).expect("aligned in-bounds atomic");
        // SAFETY: as in `atomic_u64`.
        unsafe { AtomicU32::from_ptr(p.cast()) }
    }

    fn bytes(&self, off: usize, len: usize) -> io::Result<&[AtomicU8]> {
        let p = self.check(off, len, 1)?;
        // SAFETY: `[p, p + len)` is inside the mapping, lives as long as
        // `&self`, and `AtomicU8` has the size and alignment of `u8`.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<AtomicU8>(), len) })
    }

    /// Copy `buf.len()` bytes at offset `off` out of the mapping (relaxed
    /// atomic loads). Fails with `InvalidInput` if the range is outside.
    pub fn read_bytes(&self, off: usize, buf: &mut [u8]) -> io::Result<()> {
        let src = self.bytes(off, buf.len())?;
        for (b, a) in buf.iter_mut().zip(src) {
            *b = a.load(Ordering::Relaxed);
        }
        Ok(())
    }

    /// Copy `buf` into the mapping at offset `off` (relaxed atomic
    /// stores). Fails with `InvalidInput` if the range is outside.
    pub fn write_bytes(&self, off: usize, buf: &[u8]) -> io::Result<()> {
        for (b, a) in buf.iter().zip(self.bytes(off, buf.len())?) {
            a.store(*b, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and no
        // reference into it outlives `&self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Sleep while `word` holds `expected`, for at most `timeout` (None:
/// forever). Returns `Ok` when woken, when `word` did not hold `expected`,
/// or on a signal (callers re-check their condition); `TimedOut` when the
/// timeout passed.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> io::Result<()> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: t.subsec_nanos().into(),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid aligned u32 for the duration of the call
    // and `tsp` is null or points to a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(()),
        Some(libc::ETIMEDOUT) => Err(io::ErrorKind::TimedOut.into()),
        _ => Err(e),
    }
}

/// Wake every thread (in any process) sleeping in [`futex_wait`] on
/// `word`. Returns how many were woken.
pub fn futex_wake(word: &AtomicU32) -> usize {
    // SAFETY: `word` is a valid aligned u32 for the duration of the call;
    // FUTEX_WAKE does not access memory beyond the key lookup.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    usize::try_from(r).unwrap_or(0)
}

/// True if `fd` is a file of the kernel's shared memory (a memfd without
/// huge pages, or a file on tmpfs).
fn is_shmem(fd: &impl std::os::fd::AsFd) -> bool {
    use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};
    fstatfs(fd).is_ok_and(|s| s.filesystem_type() == TMPFS_MAGIC)
}

/// A memfd of `len` bytes without any seal, as a careless or hostile
/// process would send.
#[cfg(test)]
pub(crate) fn unsealed_memfd(len: usize) -> OwnedFd {
    // SAFETY: valid NUL-terminated name and flags.
    let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(raw >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain syscall on a descriptor we own.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
    assert_eq!(r, 0, "ftruncate: {}", io::Error::last_os_error());
    fd
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn dup(m: &SharedMapping) -> OwnedFd {
        m.fd().unwrap().try_clone_to_owned().unwrap()
    }

    #[test]
    fn two_mappings_of_one_memfd_share_bytes_and_atomics() {
        let a = SharedMapping::create(c"t", 4096).unwrap();
        let b = SharedMapping::from_fd(dup(&a), 4096).unwrap();
        a.write_bytes(100, b"hello").unwrap();
        let mut buf = [0u8; 5];
        b.read_bytes(100, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        b.atomic_u64(8).store(42, Ordering::SeqCst);
        assert_eq!(a.atomic_u64(8).load(Ordering::SeqCst), 42);
        assert!(a.read_bytes(4093, &mut buf).is_err());
        assert!(a.write_bytes(usize::MAX, b"x").is_err());
        assert!(a.write_bytes(4095, b"x").is_ok());
    }

    #[test]
    fn only_ordinary_shared_memory_is_shmem() {
        let m = SharedMapping::create(c"shmem-check", 4096).unwrap();
        assert!(is_shmem(&m.fd().unwrap()));
        let proc_file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!is_shmem(&proc_file));
        // SAFETY: plain memfd_create; the descriptor is owned at once.
        let raw = unsafe { libc::memfd_create(c"huge".as_ptr(), libc::MFD_HUGETLB) };
        if raw >= 0 {
            // SAFETY: memfd_create returned a new descriptor we own.
            let huge = unsafe { OwnedFd::from_raw_fd(raw) };
            assert!(!is_shmem(&huge));
        }
    }

    #[test]
    fn from_fd_checks_seals_and_size() {
        let fd = unsealed_memfd(4096);
        let e = SharedMapping::from_fd(fd, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let a = SharedMapping::create(c"t", 4096).unwrap();
        let e = SharedMapping::from_fd(dup(&a), 4097).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(SharedMapping::from_fd(dup(&a), 100).is_ok());
        assert!(SharedMapping::anonymous(4096).unwrap().fd().is_none());
        assert!(SharedMapping::anonymous(0).is_err());
    }

    #[test]
    #[should_panic]
    fn misaligned_atomic_panics() {
        SharedMapping::anonymous(64).unwrap().atomic_u32(2);
    }

    #[test]
    fn futex_wakes_across_mappings_and_times_out() {
        let a = SharedMapping::create(c"t", 64).unwrap();
        let b = Arc::new(SharedMapping::from_fd(dup(&a), 64).unwrap());
        let w = a.atomic_u32(0);
        let e = futex_wait(w, 0, Some(Duration::from_millis(1))).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        futex_wait(w, 7, None).unwrap(); // value differs: returns at once
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            b2.atomic_u32(0).store(1, Ordering::SeqCst);
            futex_wake(b2.atomic_u32(0));
        });
        while w.load(Ordering::SeqCst) == 0 {
            let _ = futex_wait(w, 0, Some(Duration::from_secs(10)));
        }
        t.join().unwrap();
    }
}

//! Memory of another process, as the NIC agent reaches a driver's
//! registered memory.
//!
//! The driver opens its own `/proc/self/mem` and hands the file over when
//! it connects. The file holds the driver's address space as it was when
//! it was opened: after an `exec` or the driver's end every access fails,
//! as a hardware NIC's DMA keeps to the pages an MR pinned. Each access
//! makes the kernel copy through a page it allocates for the call (and, on
//! kernels built to, zeroes first), so the bytes are copied twice.
//!
//! Reads of [`DIRECT_MIN`] bytes or more into the agent's own buffers
//! take one copy where the system lets the agent use the cross-memory call
//! (`process_vm_readv`) on the driver's process, and only when the agent
//! runs as the driver's user (an agent run as root serving another user
//! could otherwise read a set-user-ID program the driver `exec`ed, which
//! the call's permission check refuses to anyone else). Each call also
//! reads a [`Sentinel`], 16 random bytes the driver keeps at an address
//! it named when it connected, from the same address space in the same
//! call; a call whose sentinel does not match read from another address
//! space (the process ID now names a program the driver `exec`ed): its
//! bytes are dropped and the file answers, as it does for whatever the
//! call refuses. After each call the process is checked to be alive
//! through a pidfd taken when it connected, so that its ID cannot have
//! gone to another process meanwhile. Writes cannot be checked in the
//! same call, so they always go through the file.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Bytes of a sentinel.
pub const SENTINEL_LEN: usize = 16;

/// Reads shorter than this take the file: for them the call's fixed cost
/// (the permission check, a second page for the sentinel) is more than the
/// copy it saves.
pub const DIRECT_MIN: usize = 1024;

/// Where a driver keeps random bytes that identify its address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sentinel {
    /// Address of the bytes in the driver.
    pub addr: u64,
    /// The bytes.
    pub token: [u8; SENTINEL_LEN],
}

impl Sentinel {
    /// This process's sentinel: random bytes made on first use, which stay
    /// at one address for the life of the process (a child made by `fork`
    /// has them at the same address, in its own address space).
    pub fn of_this_process() -> Option<Sentinel> {
        static MINE: OnceLock<Option<&'static [u8; SENTINEL_LEN]>> = OnceLock::new();
        let bytes = (*MINE.get_or_init(|| {
            let mut token = [0u8; SENTINEL_LEN];
            // SAFETY: token is a live buffer of SENTINEL_LEN bytes.
            let n = unsafe { libc::getrandom(token.as_mut_ptr().cast(), SENTINEL_LEN, 0) };
            (n == SENTINEL_LEN as isize).then(|| &*Box::leak(Box::new(token)))
        }))?;
        Some(Sentinel {
            addr: bytes.as_ptr() as u64,
            token: *bytes,
        })
    }
}

/// The memory of one process: its memory file and, where they may be
/// used, the cross-memory reads checked by its sentinel.
#[derive(Debug)]
pub struct ProcessMemory {
    file: File,
    /// The process for the cross-memory reads; 0 once they are off.
    pid: AtomicI32,
    /// That process (not its ID, which may go to another once it ends).
    pidfd: Option<OwnedFd>,
    sentinel: Option<Sentinel>,
    /// Bytes the cross-memory reads delivered.
    direct_bytes: AtomicU64,
}

impl ProcessMemory {
    /// The memory of the process whose memory file `file` is, with
    /// `pid` (the kernel's word for the driver's connection,
    /// `SO_PEERCRED`, taken as the connection opened) and the `sentinel`
    /// it named for the cross-memory reads. Without both, or where the
    /// process runs as another user than this one, or no pidfd can be
    /// had for it, every access goes through the file.
    pub fn new(file: File, pid: Option<u32>, sentinel: Option<Sentinel>) -> Self {
        let pid = pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| p > 0 && sentinel.is_some() && same_user(p));
        let pidfd = pid.and_then(pidfd_open);
        let pid = pid.filter(|_| pidfd.is_some()).unwrap_or(0);
        ProcessMemory {
            file,
            pid: AtomicI32::new(pid),
            pidfd,
            sentinel,
            direct_bytes: AtomicU64::new(0),
        }
    }

    /// A process's memory through its memory file only.
    #[cfg(test)]
    pub fn file_only(file: File) -> Self {
        Self::new(file, None, None)
    }

    /// Whether reads try the cross-memory call.
    pub fn is_direct(&self) -> bool {
        self.pid.load(Ordering::Acquire) != 0
    }

    /// Whether a read of `len` bytes into the agent's own buffer tries
    /// the cross-memory call.
    pub fn reads_directly(&self, len: usize) -> bool {
        len >= DIRECT_MIN && self.is_direct()
    }

    /// Bytes the cross-memory reads delivered so far.
    pub fn direct_bytes(&self) -> u64 {
        self.direct_bytes.load(Ordering::Relaxed)
    }

    /// Stop the cross-memory reads.
    fn stop_direct(&self, why: &str) {
        if self.pid.swap(0, Ordering::AcqRel) != 0 {
            tracing::debug!(why, "cross-memory reads off, the memory file only");
        }
    }

    /// Copy `len` bytes at address `addr` of the process into `buf`.
    /// `private`: nobody but this process sees `buf` before the call
    /// returns (bytes a failed check drops may be left in it); otherwise
    /// the read takes the file.
    ///
    /// # Safety
    /// `buf` is valid for writes of `len` bytes.
    pub(crate) unsafe fn read(
        &self,
        addr: u64,
        buf: *mut u8,
        len: usize,
        private: bool,
    ) -> Result<(), ()> {
        // SAFETY: the caller's promise on buf.
        if private && self.reads_directly(len) && unsafe { self.read_direct(addr, buf, len) } {
            return Ok(());
        }
        let mut at = 0;
        while at < len {
            // SAFETY: buf is valid for len bytes and at < len.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    buf.add(at).cast(),
                    len - at,
                    addr.wrapping_add(at as u64) as libc::off_t,
                )
            };
            match n {
                n if n > 0 => at += n as usize,
                n if n < 0
                    && std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted => {}
                _ => return Err(()),
            }
        }
        Ok(())
    }

    /// Copy `len` bytes of `buf` to address `addr` of the process.
    pub(crate) fn write(&self, addr: u64, buf: &[u8]) -> Result<(), ()> {
        self.file.write_all_at(buf, addr).map_err(|_| ())
    }

    /// Read all `len` bytes with one cross-memory call that also reads
    /// the sentinel; true if they came, from the driver's address space.
    /// A call refused for the process as a whole (no permission, no such
    /// process) or whose sentinel does not match turns the reads off; one
    /// refused for an address leaves it to the file.
    ///
    /// # Safety
    /// `buf` is valid for writes of `len` bytes.
    unsafe fn read_direct(&self, addr: u64, buf: *mut u8, len: usize) -> bool {
        let pid = self.pid.load(Ordering::Acquire);
        let Some(sentinel) = self.sentinel.filter(|_| pid != 0) else {
            return false;
        };
        let mut token = [0u8; SENTINEL_LEN];
        let local = [
            libc::iovec {
                iov_base: token.as_mut_ptr().cast(),
                iov_len: SENTINEL_LEN,
            },
            libc::iovec {
                iov_base: buf.cast(),
                iov_len: len,
            },
        ];
        let remote = [
            libc::iovec {
                iov_base: sentinel.addr as *mut libc::c_void,
                iov_len: SENTINEL_LEN,
            },
            libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: len,
            },
        ];
        let n = loop {
            // SAFETY: two local iovecs, the token's and the caller's
            // buffer, valid for writes of their lengths; the remote ones
            // are checked by the kernel against the other process's
            // mappings. One call reads both from one address space.
            let n =
                unsafe { libc::process_vm_readv(pid, local.as_ptr(), 2, remote.as_ptr(), 2, 0) };
            if n >= 0 {
                break n as usize;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // The sentinel's page is gone: not the driver's memory.
                Some(libc::EFAULT) => {
                    self.stop_direct("sentinel unreadable");
                    return false;
                }
                _ => {
                    self.stop_direct("cross-memory call refused");
                    return false;
                }
            }
        };
        if n < SENTINEL_LEN || token != sentinel.token {
            self.stop_direct("sentinel does not match");
            return false;
        }
        // Still the process that connected: its ID named no other.
        if !self.alive() {
            self.stop_direct("the process ended");
            return false;
        }
        // A shorter count (an address the call may not read): the file
        // reads it all again.
        if n != SENTINEL_LEN + len {
            return false;
        }
        self.direct_bytes.fetch_add(len as u64, Ordering::Relaxed);
        true
    }

    /// Whether the process the pidfd names has not ended (a zombie's ID
    /// is not given out again either).
    fn alive(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return false;
        };
        // SAFETY: pidfd_send_signal with signal 0 only checks that the
        // process may be signalled; no pointer is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

/// A pidfd for process `pid`.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a process ID and flags and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: fd is a descriptor the call just made, owned by no one else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether process `pid` runs as this process's user (real and effective).
fn same_user(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|ids| {
            ids.split_whitespace()
                .take(2)
                .all(|id| id.parse() == Ok(me))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_mem() -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap()
    }

    fn me() -> Option<u32> {
        Some(std::process::id())
    }

    #[test]
    fn reads_with_the_sentinel_take_the_cross_memory_call() {
        let p = ProcessMemory::new(own_mem(), me(), Sentinel::of_this_process());
        let mut target = vec![0u8; 2 * DIRECT_MIN];
        let addr = target.as_mut_ptr() as u64;
        let data: Vec<u8> = (0..DIRECT_MIN).map(|i| i as u8).collect();
        p.write(addr + 10, &data).unwrap();
        assert_eq!(
            &std::hint::black_box(&target)[10..10 + DIRECT_MIN],
            &data[..]
        );
        let mut back = vec![0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        unsafe { p.read(addr + 10, back.as_mut_ptr(), DIRECT_MIN, true) }.unwrap();
        assert_eq!(back, data);
        assert!(p.is_direct());
        let note = "the read took the call, the write the file";
        assert_eq!(p.direct_bytes(), DIRECT_MIN as u64, "{note}");
        // A short read takes the file.
        let mut few = [0u8; 4];
        // SAFETY: a live buffer of 4 bytes.
        unsafe { p.read(addr + 10, few.as_mut_ptr(), 4, true) }.unwrap();
        assert_eq!(few, [0, 1, 2, 3]);
        assert_eq!(p.direct_bytes(), DIRECT_MIN as u64);
    }

    #[test]
    fn reads_into_buffers_others_may_see_take_the_file() {
        let p = ProcessMemory::new(own_mem(), me(), Sentinel::of_this_process());
        let data = [5u8; DIRECT_MIN];
        let mut back = [0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        unsafe { p.read(data.as_ptr() as u64, back.as_mut_ptr(), DIRECT_MIN, false) }.unwrap();
        assert_eq!(back, data);
        assert_eq!(p.direct_bytes(), 0);
        assert!(p.is_direct());
    }

    #[test]
    fn a_process_whose_user_cannot_be_checked_is_not_read_directly() {
        assert!(same_user(std::process::id() as i32));
        assert!(!same_user(i32::MAX));
        let p = ProcessMemory::new(
            own_mem(),
            Some(i32::MAX as u32),
            Sentinel::of_this_process(),
        );
        assert!(!p.is_direct());
        assert!(pidfd_open(std::process::id() as i32).is_some());
    }

    #[test]
    fn a_sentinel_that_does_not_match_leaves_the_file() {
        // As if the process ID named another address space: the bytes at
        // the sentinel's address are not the token.
        let mut other = Sentinel::of_this_process().unwrap();
        other.token[0] ^= 0xff;
        let p = ProcessMemory::new(own_mem(), me(), Some(other));
        let data = [7u8; DIRECT_MIN];
        let mut back = [0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        unsafe { p.read(data.as_ptr() as u64, back.as_mut_ptr(), DIRECT_MIN, true) }.unwrap();
        assert_eq!(back, data);
        assert!(!p.is_direct(), "the reads stay off");
        assert_eq!(p.direct_bytes(), 0);
        // An unmapped sentinel too.
        let gone = Sentinel {
            addr: 8,
            token: [0; SENTINEL_LEN],
        };
        let p = ProcessMemory::new(own_mem(), me(), Some(gone));
        // SAFETY: as above.
        unsafe { p.read(data.as_ptr() as u64, back.as_mut_ptr(), DIRECT_MIN, true) }.unwrap();
        assert!(!p.is_direct());
    }

    #[test]
    fn a_process_gone_leaves_the_file() {
        // A child that has been waited for: its ID names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let p = ProcessMemory::new(own_mem(), Some(gone), Sentinel::of_this_process());
        let data = [3u8; DIRECT_MIN];
        let mut back = [0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        unsafe { p.read(data.as_ptr() as u64, back.as_mut_ptr(), DIRECT_MIN, true) }.unwrap();
        assert_eq!(back, data);
        assert!(!p.is_direct());
    }

    #[test]
    fn without_a_sentinel_reads_take_the_file() {
        let p = ProcessMemory::new(own_mem(), me(), None);
        assert!(!p.is_direct());
        let data = [9u8; DIRECT_MIN];
        let mut back = [0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        unsafe { p.read(data.as_ptr() as u64, back.as_mut_ptr(), DIRECT_MIN, true) }.unwrap();
        assert_eq!(back, data);
        assert_eq!(p.direct_bytes(), 0);
    }

    #[test]
    fn an_unmapped_address_is_refused_and_the_reads_stay_on() {
        let p = ProcessMemory::new(own_mem(), me(), Sentinel::of_this_process());
        let mut b = [0u8; DIRECT_MIN];
        // SAFETY: a live buffer of DIRECT_MIN bytes.
        assert!(unsafe { p.read(8, b.as_mut_ptr(), DIRECT_MIN, true) }.is_err());
        assert!(p.write(8, &b).is_err());
        assert!(
            p.is_direct(),
            "a refused address is the target's, not the process's"
        );
    }
}

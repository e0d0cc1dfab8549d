//! What every entry point shares: errno, results, the panic guard and the
//! file descriptors that carry events.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;

/// The outcome of a verbs call: a value or an errno.
pub type VResult<T> = Result<T, c_int>;

/// Set the calling thread's errno.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
pub fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Run an entry point's body. A panic is a bug; it must not unwind into
/// C, so it becomes `EIO` and the entry point's failure value. This is a
/// last resort: the bodies validate their input and return errors.
pub fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// A pointer result: the pointer, or NULL with errno set.
pub fn ret_ptr<T>(r: VResult<*mut T>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// An errno-returning result: 0, or the errno (also stored in errno).
pub fn ret_errno(r: VResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// A -1-returning result: 0, or -1 with errno set.
pub fn ret_minus1(r: VResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Fail with `e` unless `cond` holds.
pub fn ensure(cond: bool, e: c_int) -> VResult<()> {
    if cond {
        Ok(())
    } else {
        Err(e)
    }
}

/// A counting event descriptor: an eventfd in semaphore mode, readable
/// while its count is non-zero; each `read` takes one count. One count
/// stands for one queued event, so `poll`/`epoll` on it tells whether an
/// event waits, and a blocking `read` waits for one.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new descriptor with a zero count (close-on-exec).
    pub fn new() -> VResult<Self> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The descriptor number handed to C.
    pub fn raw(&self) -> c_int {
        self.fd.as_raw_fd()
    }

    /// Add one count (never blocks in practice: the count cannot near 2^64).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        let _ = unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    /// Take one count, blocking unless the descriptor was made
    /// non-blocking (by the application, with fcntl). Errors carry errno
    /// (EAGAIN when non-blocking and empty; EINTR when a signal whose
    /// handler does not ask for restarts interrupted the wait, as a read
    /// of a verbs event file is interrupted: programs end a blocking wait
    /// with an alarm).
    pub fn wait(&self) -> VResult<()> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        Err(if n < 0 { errno() } else { libc::EIO })
    }

    /// Take one count if one is there, without blocking.
    pub fn try_take(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 1 && p.revents & libc::POLLIN != 0 && self.wait().is_ok()
    }
}

/// Counts of events handed to the application and acknowledged by it, so
/// that destroying an object can wait for the acknowledgements, as
/// libibverbs does.
#[derive(Debug, Default)]
pub struct EventAcks {
    state: std::sync::Mutex<(u64, u64)>,
    cv: std::sync::Condvar,
}

impl EventAcks {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more event handed out.
    pub fn reported(&self) {
        self.lock().0 += 1;
    }

    /// `n` events acknowledged; returns the total acknowledged.
    pub fn acked(&self, n: u64) -> u64 {
        let mut s = self.lock();
        s.1 += n;
        let total = s.1;
        drop(s);
        self.cv.notify_all();
        total
    }

    /// Block until every event handed out was acknowledged.
    pub fn wait_all_acked(&self) {
        let mut s = self.lock();
        while s.1 < s.0 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Copy a Rust string into a fixed C char array, NUL-terminated and
/// truncated to fit.
pub fn copy_cstr(dst: &mut [std::os::raw::c_char], s: &str) {
    if dst.is_empty() {
        return;
    }
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::os::raw::c_char;
    }
    dst[n] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_counts_events() {
        let e = EventFd::new().unwrap();
        assert!(!e.try_take());
        e.signal();
        e.signal();
        assert!(e.try_take());
        assert!(e.try_take());
        assert!(!e.try_take());
    }

    #[test]
    fn acks_wait_returns_when_balanced() {
        let a = EventAcks::default();
        a.reported();
        assert_eq!(a.acked(1), 1);
        a.wait_all_acked();
    }

    #[test]
    fn cstr_is_truncated_and_terminated() {
        let mut b = [1 as std::os::raw::c_char; 4];
        copy_cstr(&mut b, "urdma0");
        assert_eq!(b, [b'u' as _, b'r' as _, b'd' as _, 0]);
    }

    #[test]
    fn guard_turns_panics_into_eio() {
        let v = guard(-1, || -> i32 { panic!("boom") });
        assert_eq!(v, -1);
        assert_eq!(errno(), libc::EIO);
    }
}

//! What urdma's CM does not do yet, answered as such: multicast joins
//! (`ENOSYS`) and rsockets (no rsocket can be made: `rsocket` gives
//! `ENOSYS`, calls on a descriptor `EBADF`); `rpoll` and `rselect` are
//! `poll` and `select`, which is what they are on descriptors that are
//! not rsockets (event channels, completion channels, sockets).

use std::os::raw::c_int;

/// The failure of a call that is not supported.
pub fn unsupported<T>(fail: T) -> T {
    crate::set_errno(libc::ENOSYS);
    fail
}

/// The failure of a call on a descriptor that cannot be an rsocket.
pub fn not_rsocket<T>(fail: T) -> T {
    crate::set_errno(libc::EBADF);
    fail
}

/// `rpoll`.
pub fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: fds is n pollfd entries (the caller's contract).
    unsafe { libc::poll(fds, n, timeout) }
}

/// `rselect`.
pub fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the sets and timeout are null or valid (the caller's contract).
    unsafe { libc::select(n, r, w, e, t) }
}

//! What urdma's CM does not do yet, answered as such: multicast joins
//! (`ENOSYS`) and rsockets (no rsocket can be made: `rsocket` gives
//! `ENOSYS`, calls on a descriptor `EBADF`); `rpoll` and `rselect` are
//! `poll` and `select`, which is what they are on descriptors that are
//! not rsockets (event channels, completion channels, sockets).

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

//! What urdma's CM does not do yet, answered as such: multicast joins
//! (`ENOSYS`).

/// The failure of a call that is not supported.
pub fn unsupported<T>(fail: T) -> T {
    crate::set_errno(libc::ENOSYS);
    fail
}

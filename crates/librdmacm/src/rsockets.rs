//! The rsocket entry points (see [`crate::stubs`]): none can be made, so
//! every call on a descriptor fails with `EBADF`, except `rpoll` and
//! `rselect`, which serve any descriptor.

#![allow(clippy::missing_safety_doc)]

use crate::stubs::{not_rsocket, unsupported};
use std::ffi::c_void;
use std::os::raw::c_int;

macro_rules! rsocket_calls {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty = $fail:expr;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: not an rsocket (EBADF).")]
            #[no_mangle]
            pub unsafe extern "C" fn $name($(_: $t),*) -> $r {
                not_rsocket($fail)
            }
            std::arch::global_asm!(concat!(
                ".symver ", stringify!($name), ", ", stringify!($name), "@@@RDMACM_1.0"
            ));
        )*
    };
}

type Sa = *mut libc::sockaddr;
type Len = *mut libc::socklen_t;

rsocket_calls! {
    rbind(s: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int = -1;
    rlisten(s: c_int, b: c_int) -> c_int = -1;
    raccept(s: c_int, a: Sa, l: Len) -> c_int = -1;
    rconnect(s: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int = -1;
    rshutdown(s: c_int, h: c_int) -> c_int = -1;
    rclose(s: c_int) -> c_int = -1;
    rrecv(s: c_int, b: *mut c_void, l: usize, f: c_int) -> isize = -1;
    rrecvfrom(s: c_int, b: *mut c_void, l: usize, f: c_int, a: Sa, al: Len) -> isize = -1;
    rrecvmsg(s: c_int, m: *mut libc::msghdr, f: c_int) -> isize = -1;
    rsend(s: c_int, b: *const c_void, l: usize, f: c_int) -> isize = -1;
    rsendto(s: c_int, b: *const c_void, l: usize, f: c_int, a: *const libc::sockaddr, al: libc::socklen_t) -> isize = -1;
    rsendmsg(s: c_int, m: *const libc::msghdr, f: c_int) -> isize = -1;
    rread(s: c_int, b: *mut c_void, l: usize) -> isize = -1;
    rreadv(s: c_int, v: *const libc::iovec, n: c_int) -> isize = -1;
    rwrite(s: c_int, b: *const c_void, l: usize) -> isize = -1;
    rwritev(s: c_int, v: *const libc::iovec, n: c_int) -> isize = -1;
    rgetpeername(s: c_int, a: Sa, l: Len) -> c_int = -1;
    rgetsockname(s: c_int, a: Sa, l: Len) -> c_int = -1;
    rsetsockopt(s: c_int, lv: c_int, n: c_int, v: *const c_void, l: libc::socklen_t) -> c_int = -1;
    rgetsockopt(s: c_int, lv: c_int, n: c_int, v: *mut c_void, l: Len) -> c_int = -1;
    rfcntl(s: c_int, cmd: c_int, arg: usize) -> c_int = -1;
    riomap(s: c_int, b: *mut c_void, l: usize, p: c_int, f: c_int, o: libc::off_t) -> libc::off_t = -1;
    riounmap(s: c_int, b: *mut c_void, l: usize) -> c_int = -1;
    riowrite(s: c_int, b: *const c_void, l: usize, o: libc::off_t, f: c_int) -> usize = usize::MAX;
}

/// `rsocket`: rsockets are not offered (ENOSYS).
#[no_mangle]
pub extern "C" fn rsocket(_domain: c_int, _type: c_int, _protocol: c_int) -> c_int {
    unsupported(-1)
}

/// `rpoll`: `poll`.
#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: fds is n pollfd entries (the caller's contract).
    unsafe { libc::poll(fds, n, timeout) }
}

/// `rselect`: `select`.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the sets and timeout are null or valid (the caller's
    // contract).
    unsafe { libc::select(n, r, w, e, t) }
}

std::arch::global_asm!(".symver rsocket, rsocket@@@RDMACM_1.0");
std::arch::global_asm!(".symver rpoll, rpoll@@@RDMACM_1.0");
std::arch::global_asm!(".symver rselect, rselect@@@RDMACM_1.0");

//! The exported rsocket calls (`rsocket.h`, all at `RDMACM_1.0`): each
//! finds its rsocket in the table (`EBADF` if the number is none), and
//! answers 0 or a count, or -1 with `errno`.

#![allow(clippy::missing_safety_doc)]

use super::{conn, data, lock, lookup, opts, poll, st, Params, Rs};
use crate::sys::*;
use crate::{guard, set_errno};
use std::ffi::c_void;
use std::os::raw::c_int;

/// Bind each name to `RDMACM_1.0` (not in the unit tests: see the crate's
/// `versions!`).
macro_rules! versions {
    ($($name:ident),*) => {
        $(#[cfg(not(test))] std::arch::global_asm!(concat!(
            ".symver ", stringify!($name), ", ", stringify!($name), "@@@RDMACM_1.0"
        ));)*
    };
}

versions!(
    rsocket,
    rbind,
    rlisten,
    raccept,
    rconnect,
    rshutdown,
    rclose,
    rrecv,
    rrecvfrom,
    rrecvmsg,
    rsend,
    rsendto,
    rsendmsg,
    rread,
    rreadv,
    rwrite,
    rwritev,
    rpoll,
    rselect,
    rgetpeername,
    rgetsockname,
    rsetsockopt,
    rgetsockopt,
    rfcntl,
    riomap,
    riounmap,
    riowrite
);

fn int(r: Result<c_int, c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

fn size(r: Result<usize, c_int>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Run `f` on the locked rsocket `s`.
fn with<T>(s: c_int, f: impl FnOnce(&mut Rs) -> Result<T, c_int>) -> Result<T, c_int> {
    let sh = lookup(s)?;
    let mut g = lock(&sh);
    f(&mut g)
}

/// The program's socket address of `len` bytes, checked for its family.
fn sockaddr(a: *const libc::sockaddr, len: libc::socklen_t) -> Result<(), c_int> {
    if a.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: a is non-null; the family is its first member.
    let need = match c_int::from(unsafe { (*a).sa_family }) {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    match (len as usize) < need {
        true => Err(libc::EINVAL),
        false => Ok(()),
    }
}

#[no_mangle]
pub extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    guard(-1, || {
        let base = kind & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return int(Err(libc::EAFNOSUPPORT));
        }
        if base == libc::SOCK_DGRAM {
            tracing::debug!("rsocket: datagram rsockets are not offered");
            return int(Err(libc::EOPNOTSUPP));
        }
        if base != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
            return int(Err(libc::EPROTONOSUPPORT));
        }
        let mut id = std::ptr::null_mut();
        // SAFETY: id is writable; no channel: a synchronous ID.
        if unsafe {
            crate::rdma_create_id(
                std::ptr::null_mut(),
                &mut id,
                std::ptr::null_mut(),
                RDMA_PS_TCP,
            )
        } != 0
        {
            return -1;
        }
        // SAFETY: the ID just made; its channel is its own.
        let fd = unsafe {
            (*id).route.addr.__bindgen_anon_1.src_addr.sa_family = domain as u16;
            (*(*id).channel).fd
        };
        let nonblock = kind & libc::SOCK_NONBLOCK != 0;
        super::set_fd_nonblock(fd, nonblock);
        super::insert(Rs {
            fd,
            id,
            state: st::INIT,
            err: 0,
            fs_flags: if nonblock { libc::O_NONBLOCK } else { 0 },
            fd_flags: if kind & libc::SOCK_CLOEXEC != 0 {
                libc::FD_CLOEXEC
            } else {
                0
            },
            p: Params::default(),
            o: Default::default(),
            c: None,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rbind(s: c_int, a: *const libc::sockaddr, len: libc::socklen_t) -> c_int {
    guard(-1, || {
        int(with(s, |rs| {
            sockaddr(a, len)?;
            if rs.state != st::INIT {
                return Err(libc::EINVAL);
            }
            // SAFETY: the live ID; a is a checked socket address.
            match unsafe { crate::rdma_bind_addr(rs.id, a as *mut _) } {
                0 => {
                    rs.state = st::BOUND;
                    Ok(0)
                }
                _ => Err(crate::errno()),
            }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rlisten(s: c_int, backlog: c_int) -> c_int {
    guard(-1, || {
        int(with(s, |rs| {
            if rs.state == st::LISTENING {
                return Ok(0);
            }
            // SAFETY: the live ID.
            if unsafe { crate::rdma_listen(rs.id, backlog) } != 0 {
                return Err(crate::errno());
            }
            rs.state = st::LISTENING;
            Ok(0)
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn raccept(
    s: c_int,
    a: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    guard(-1, || {
        let r = lookup(s).and_then(|l| conn::accept(&l));
        if let Ok(fd) = r {
            if !a.is_null() && !len.is_null() {
                // SAFETY: the program's buffer and its length.
                unsafe { rgetpeername(fd, a, len) };
            }
        }
        int(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rconnect(
    s: c_int,
    a: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    guard(-1, || {
        int(sockaddr(a, len)
            .and_then(|()| lookup(s))
            .and_then(|sh| conn::connect(&sh, a))
            .map(|()| 0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rshutdown(s: c_int, how: c_int) -> c_int {
    guard(-1, || {
        int(lookup(s)
            .and_then(|sh| data::shutdown(&sh, how))
            .map(|()| 0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rclose(s: c_int) -> c_int {
    guard(-1, || {
        let Some(sh) = super::remove(s) else {
            return int(Err(libc::EBADF));
        };
        if lock(&sh).state & st::CONNECTED != 0 {
            let _ = data::shutdown(&sh, libc::SHUT_RDWR);
        }
        conn::teardown(&mut lock(&sh));
        0
    })
}

/// The program's iovec array as (pointer, length) pairs.
///
/// # Safety
/// `v` is `n` readable iovecs.
unsafe fn iov(v: *const libc::iovec, n: c_int) -> Result<Vec<(*const u8, usize)>, c_int> {
    if !(0..=1024).contains(&n) || (v.is_null() && n > 0) {
        return Err(libc::EINVAL);
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: v holds n iovecs (the caller's contract).
        let e = unsafe { *v.add(i) };
        if e.iov_base.is_null() && e.iov_len > 0 {
            return Err(libc::EFAULT);
        }
        out.push((e.iov_base as *const u8, e.iov_len));
    }
    Ok(out)
}

fn recv(s: c_int, buf: *mut c_void, len: usize, flags: c_int) -> Result<usize, c_int> {
    if buf.is_null() && len > 0 {
        return Err(libc::EFAULT);
    }
    lookup(s).and_then(|sh| data::recv(&sh, buf.cast(), len, flags))
}

fn send(s: c_int, segs: &[(*const u8, usize)], flags: c_int) -> Result<usize, c_int> {
    if segs.iter().any(|x| x.0.is_null() && x.1 > 0) {
        return Err(libc::EFAULT);
    }
    lookup(s).and_then(|sh| data::send(&sh, segs, flags))
}

#[no_mangle]
pub unsafe extern "C" fn rrecv(s: c_int, b: *mut c_void, l: usize, f: c_int) -> isize {
    guard(-1, || size(recv(s, b, l, f)))
}

#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    s: c_int,
    b: *mut c_void,
    l: usize,
    f: c_int,
    a: *mut libc::sockaddr,
    al: *mut libc::socklen_t,
) -> isize {
    guard(-1, || {
        let r = recv(s, b, l, f);
        if matches!(r, Ok(n) if n > 0) && !a.is_null() && !al.is_null() {
            // SAFETY: the program's address buffer and length.
            unsafe { rgetpeername(s, a, al) };
        }
        size(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(s: c_int, m: *mut libc::msghdr, f: c_int) -> isize {
    guard(-1, || {
        if m.is_null() {
            return size(Err(libc::EFAULT));
        }
        // SAFETY: m is a readable msghdr (the caller's contract).
        let m = unsafe { &mut *m };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return size(Err(libc::EOPNOTSUPP));
        }
        // SAFETY: msg_iov holds msg_iovlen iovecs.
        let v = match unsafe { iov(m.msg_iov, m.msg_iovlen as c_int) } {
            Ok(v) => v,
            Err(e) => return size(Err(e)),
        };
        m.msg_flags = 0;
        let mut total = 0usize;
        for (p, l) in v {
            match recv(
                s,
                p as *mut c_void,
                l,
                if total > 0 { f | libc::MSG_DONTWAIT } else { f },
            ) {
                Ok(n) => {
                    total += n;
                    if n < l {
                        break;
                    }
                }
                Err(_) if total > 0 => break,
                Err(e) => return size(Err(e)),
            }
        }
        size(Ok(total))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rread(s: c_int, b: *mut c_void, l: usize) -> isize {
    guard(-1, || size(recv(s, b, l, 0)))
}

#[no_mangle]
pub unsafe extern "C" fn rreadv(s: c_int, v: *const libc::iovec, n: c_int) -> isize {
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = v as *mut _;
    m.msg_iovlen = n.max(0) as usize;
    // SAFETY: m is a live msghdr over the program's iovecs.
    unsafe { rrecvmsg(s, &mut m, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rsend(s: c_int, b: *const c_void, l: usize, f: c_int) -> isize {
    guard(-1, || size(send(s, &[(b.cast(), l)], f)))
}

#[no_mangle]
pub unsafe extern "C" fn rsendto(
    s: c_int,
    b: *const c_void,
    l: usize,
    f: c_int,
    _a: *const libc::sockaddr,
    _al: libc::socklen_t,
) -> isize {
    // A connected stream socket ignores the address, as TCP does.
    guard(-1, || size(send(s, &[(b.cast(), l)], f)))
}

#[no_mangle]
pub unsafe extern "C" fn rsendmsg(s: c_int, m: *const libc::msghdr, f: c_int) -> isize {
    guard(-1, || {
        if m.is_null() {
            return size(Err(libc::EFAULT));
        }
        // SAFETY: m is a readable msghdr (the caller's contract).
        let m = unsafe { &*m };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return size(Err(libc::EOPNOTSUPP));
        }
        // SAFETY: msg_iov holds msg_iovlen iovecs.
        size(unsafe { iov(m.msg_iov, m.msg_iovlen as c_int) }.and_then(|v| send(s, &v, f)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rwrite(s: c_int, b: *const c_void, l: usize) -> isize {
    guard(-1, || size(send(s, &[(b.cast(), l)], 0)))
}

#[no_mangle]
pub unsafe extern "C" fn rwritev(s: c_int, v: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: v holds n iovecs (the caller's contract).
    guard(-1, || {
        size(unsafe { iov(v, n) }.and_then(|v| send(s, &v, 0)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    guard(-1, || {
        if fds.is_null() && n > 0 || n > 1 << 20 {
            return int(Err(libc::EINVAL));
        }
        if n == 0 {
            // SAFETY: no entries: a plain sleep.
            return unsafe { libc::poll(fds, 0, timeout) };
        }
        // SAFETY: fds is n pollfds (the caller's contract).
        let v = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
        int(poll::rpoll(v, timeout))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    guard(-1, || {
        let ms = match t.is_null() {
            true => -1,
            // SAFETY: a non-null timeval is readable.
            false => unsafe {
                let t = &*t;
                (t.tv_sec.clamp(0, i32::MAX as i64 / 1000) * 1000 + t.tv_usec.max(0) / 1000)
                    as c_int
            },
        };
        // SAFETY: the sets are null or live (the caller's contract).
        int(unsafe { poll::rselect(n, r, w, e, ms) })
    })
}

/// Copy the ID's local or peer address to the program's buffer.
fn name(s: c_int, a: *mut libc::sockaddr, len: *mut libc::socklen_t, peer: bool) -> c_int {
    int(with(s, |rs| {
        if a.is_null() || len.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: the live ID; its addresses are sockaddr_storage-sized.
        let src = unsafe {
            match peer {
                false => std::ptr::addr_of!((*rs.id).route.addr.__bindgen_anon_1) as *const u8,
                true => std::ptr::addr_of!((*rs.id).route.addr.__bindgen_anon_2) as *const u8,
            }
        };
        // SAFETY: src is a socket address (its family first).
        let fam = c_int::from(unsafe { (*(src as *const libc::sockaddr)).sa_family });
        let full = match fam {
            libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
            _ => std::mem::size_of::<libc::sockaddr_in>(),
        };
        if peer && rs.state & (st::CONNECTED | st::DISCONNECTED) == 0 {
            return Err(libc::ENOTCONN);
        }
        // SAFETY: len is readable and writable; a holds *len bytes.
        unsafe {
            let n = (*len as usize).min(full);
            std::ptr::copy_nonoverlapping(src, a as *mut u8, n);
            *len = full as libc::socklen_t;
        }
        Ok(0)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    s: c_int,
    a: *mut libc::sockaddr,
    l: *mut libc::socklen_t,
) -> c_int {
    guard(-1, || name(s, a, l, true))
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    s: c_int,
    a: *mut libc::sockaddr,
    l: *mut libc::socklen_t,
) -> c_int {
    guard(-1, || name(s, a, l, false))
}

#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    s: c_int,
    level: c_int,
    n: c_int,
    v: *const c_void,
    l: libc::socklen_t,
) -> c_int {
    guard(-1, || {
        int(with(s, |rs| {
            if v.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: v is l readable bytes (the caller's contract).
            let val = unsafe { std::slice::from_raw_parts(v as *const u8, l as usize) };
            opts::set(rs, level, n, val).map(|()| 0)
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    s: c_int,
    level: c_int,
    n: c_int,
    v: *mut c_void,
    l: *mut libc::socklen_t,
) -> c_int {
    guard(-1, || {
        int(with(s, |rs| {
            if v.is_null() || l.is_null() {
                return Err(libc::EFAULT);
            }
            let b = opts::get(rs, level, n)?;
            // SAFETY: v holds *l writable bytes; l is writable.
            unsafe {
                let k = (*l as usize).min(b.len());
                std::ptr::copy_nonoverlapping(b.as_ptr(), v as *mut u8, k);
                *l = k as libc::socklen_t;
            }
            Ok(0)
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rfcntl(s: c_int, cmd: c_int, arg: usize) -> c_int {
    guard(-1, || int(with(s, |rs| opts::fcntl(rs, cmd, arg))))
}

/// `riomap`: direct placement is not offered; `EOPNOTSUPP` on an rsocket.
#[no_mangle]
pub unsafe extern "C" fn riomap(
    s: c_int,
    _b: *mut c_void,
    _l: usize,
    _p: c_int,
    _f: c_int,
    _o: libc::off_t,
) -> libc::off_t {
    guard(-1, || {
        int(with(s, |_| Err(libc::EOPNOTSUPP))) as libc::off_t
    })
}

/// `riounmap`: nothing is ever mapped (`EINVAL` on an rsocket).
#[no_mangle]
pub unsafe extern "C" fn riounmap(s: c_int, _b: *mut c_void, _l: usize) -> c_int {
    guard(-1, || int(with(s, |_| Err(libc::EINVAL))))
}

/// `riowrite`: the peer's iomaps are not used (`EOPNOTSUPP`).
#[no_mangle]
pub unsafe extern "C" fn riowrite(
    s: c_int,
    _b: *const c_void,
    _l: usize,
    _o: libc::off_t,
    _f: c_int,
) -> usize {
    guard(usize::MAX, || {
        int(with(s, |_| Err(libc::EOPNOTSUPP))) as isize as usize
    })
}

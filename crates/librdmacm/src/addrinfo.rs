//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`, as rdma-core's librdmacm
//! answers them.
//!
//! With a node or a service, the C library's `getaddrinfo` resolves them
//! (the hints turned into its own: `RAI_PASSIVE` is `AI_PASSIVE`,
//! `RAI_NUMERICHOST` is `AI_NUMERICHOST`, the QP type gives the socket
//! type and the port space the protocol), and its first answer becomes
//! the source address when passive, else the destination. With neither,
//! the answer is made from the hints alone: their flags, family, QP type
//! and port space, and their destination address. Either way, a source
//! address in the hints is the answer's when it has none of its own.
//! RoCE has no SA, so no route or connection data is ever filled.
//!
//! The answer is allocated the way rdma-core allocates it (the structure
//! and each address with the C allocator), and `rdma_freeaddrinfo` frees
//! every member the same way, so programs that put their own `malloc`ed
//! addresses in an answer (libfabric's verbs provider does) or free one
//! they built themselves behave as with rdma-core.

use crate::sys::*;
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;

/// Why `rdma_getaddrinfo` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// -1 with this errno.
    Errno(c_int),
    /// The C library's `getaddrinfo` error (`EAI_*`), returned as is.
    Gai(c_int),
}

/// The C library's hints for rdma_cm's `h`.
fn to_ai_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: addrinfo is plain C data; all-zero is the empty hints.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    let flags = h.ai_flags as u32;
    if flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai.ai_family = h.ai_family;
    ai.ai_socktype = match h.ai_qp_type as u32 {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        RDMA_PS_IB => match ai.ai_socktype {
            libc::SOCK_STREAM => libc::IPPROTO_TCP,
            libc::SOCK_DGRAM => libc::IPPROTO_UDP,
            _ => 0,
        },
        _ => 0,
    };
    ai
}

/// A `malloc`ed copy of the `len` bytes of the socket address at `p`
/// (`EINVAL` for a null address or one longer than any socket address).
fn copy_addr(p: *const c_void, len: libc::socklen_t) -> Result<*mut c_void, c_int> {
    let n = len as usize;
    if p.is_null() || n > std::mem::size_of::<libc::sockaddr_storage>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: malloc of n bytes (n > 0: the caller copies only lengths
    // it found non-zero).
    let out = unsafe { libc::malloc(n.max(1)) };
    if out.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: p is n readable bytes (the caller's contract: a socket
    // address of its stated length); out has room for n.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, out as *mut u8, n) };
    Ok(out)
}

/// Fill `rai` from the C library's answer `ai` to `hints`.
fn from_ai(rai: &mut rdma_addrinfo, h: &rdma_addrinfo, ai: &libc::addrinfo) -> Result<(), c_int> {
    rai.ai_qp_type = match (h.ai_qp_type, ai.ai_socktype) {
        (0, libc::SOCK_STREAM) => IBV_QPT_RC as c_int,
        (0, libc::SOCK_DGRAM) => IBV_QPT_UD as c_int,
        (0, _) => 0,
        (t, _) => t,
    };
    rai.ai_port_space = match (h.ai_port_space, ai.ai_protocol) {
        (0, libc::IPPROTO_TCP) => RDMA_PS_TCP as c_int,
        (0, libc::IPPROTO_UDP) => RDMA_PS_UDP as c_int,
        (0, _) => 0,
        (ps, _) => ps,
    };
    rai.ai_family = ai.ai_family;
    let a = copy_addr(ai.ai_addr.cast(), ai.ai_addrlen)?;
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE as c_int;
        (rai.ai_src_addr, rai.ai_src_len) = (a.cast(), ai.ai_addrlen);
    } else {
        (rai.ai_dst_addr, rai.ai_dst_len) = (a.cast(), ai.ai_addrlen);
    }
    Ok(())
}

/// Resolve `node` and `service` with the C library into `rai`.
fn resolve(
    rai: &mut rdma_addrinfo,
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
) -> Result<(), Failure> {
    let ai_hints = hints.map(to_ai_hints);
    let hp = ai_hints
        .as_ref()
        .map_or(std::ptr::null(), |h| h as *const libc::addrinfo);
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: node and service are null or NUL-terminated strings (the
    // caller's contract); hp is null or live hints; res is writable.
    let r = unsafe { libc::getaddrinfo(node, service, hp, &mut res) };
    if r != 0 {
        return Err(Failure::Gai(r));
    }
    // SAFETY: rdma_addrinfo is plain data; all-zero is "no hints".
    let none: rdma_addrinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a successful getaddrinfo answers at least one entry.
    let first = unsafe { &*res };
    let done = from_ai(rai, hints.unwrap_or(&none), first).map_err(Failure::Errno);
    // SAFETY: res came from getaddrinfo and is freed once.
    unsafe { libc::freeaddrinfo(res) };
    done
}

/// `rdma_getaddrinfo`.
pub fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> Result<*mut rdma_addrinfo, Failure> {
    if node.is_null() && service.is_null() && hints.is_null() {
        return Err(Failure::Errno(libc::EINVAL));
    }
    // SAFETY: hints is null or a readable rdma_addrinfo (the caller's
    // contract); plain data.
    let h: Option<rdma_addrinfo> = (!hints.is_null()).then(|| unsafe { *hints });
    if let Some(h) = &h {
        if h.ai_family == libc::AF_IB {
            // Native InfiniBand addresses: RoCE has none.
            return Err(Failure::Errno(libc::EAFNOSUPPORT));
        }
    }
    // SAFETY: calloc of one zeroed rdma_addrinfo, freed by freeaddrinfo.
    let raw =
        unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
    if raw.is_null() {
        return Err(Failure::Errno(libc::ENOMEM));
    }
    // SAFETY: raw is a live, zeroed, exclusively owned rdma_addrinfo.
    let rai = unsafe { &mut *raw };
    let filled = fill(rai, node, service, h.as_ref());
    if let Err(e) = filled {
        freeaddrinfo(raw);
        return Err(e);
    }
    Ok(raw)
}

fn fill(
    rai: &mut rdma_addrinfo,
    node: *const c_char,
    service: *const c_char,
    h: Option<&rdma_addrinfo>,
) -> Result<(), Failure> {
    if !node.is_null() || !service.is_null() {
        resolve(rai, node, service, h)?;
    } else if let Some(h) = h {
        rai.ai_flags = h.ai_flags;
        rai.ai_family = h.ai_family;
        rai.ai_qp_type = h.ai_qp_type;
        rai.ai_port_space = h.ai_port_space;
        if h.ai_dst_len != 0 {
            rai.ai_dst_addr = copy_addr(h.ai_dst_addr.cast(), h.ai_dst_len)
                .map_err(Failure::Errno)?
                .cast();
            rai.ai_dst_len = h.ai_dst_len;
        }
    }
    if let Some(h) = h {
        if rai.ai_src_len == 0 && h.ai_src_len != 0 {
            rai.ai_src_addr = copy_addr(h.ai_src_addr.cast(), h.ai_src_len)
                .map_err(Failure::Errno)?
                .cast();
            rai.ai_src_len = h.ai_src_len;
        }
    }
    Ok(())
}

/// `rdma_freeaddrinfo`: the list and every member each entry points to.
pub fn freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: p is an entry of a list from rdma_getaddrinfo (or built
        // the same way by the program): it and its members were
        // allocated with the C allocator, and are freed once here.
        unsafe {
            let next = (*p).ai_next;
            let r = &*p;
            for m in [
                r.ai_connect,
                r.ai_route,
                r.ai_src_canonname.cast::<c_void>(),
                r.ai_dst_canonname.cast(),
                r.ai_src_addr.cast(),
                r.ai_dst_addr.cast(),
            ] {
                libc::free(m);
            }
            libc::free(p.cast());
            p = next;
        }
    }
}

#[cfg(test)]
mod tests;

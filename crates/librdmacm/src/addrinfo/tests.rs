//! `rdma_getaddrinfo` through its C entry point: what rdma-core's
//! librdmacm answers for the same calls.

use crate::addr::{from_c, to_c};
use crate::sys::*;
use crate::{rdma_freeaddrinfo, rdma_getaddrinfo};
use std::ffi::{c_char, CStr};
use std::net::SocketAddr;
use std::ptr::{null, null_mut};

fn errno_now() -> i32 {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn zeroed() -> rdma_addrinfo {
    // SAFETY: rdma_addrinfo is plain data.
    unsafe { std::mem::zeroed() }
}

/// Call `rdma_getaddrinfo`: its return value and answer.
fn call(
    node: Option<&CStr>,
    service: Option<&CStr>,
    hints: Option<&rdma_addrinfo>,
) -> (i32, *mut rdma_addrinfo) {
    let mut res: *mut rdma_addrinfo = null_mut();
    let p = |s: Option<&CStr>| s.map_or(null(), |s| s.as_ptr()) as *const c_char;
    let h = hints.map_or(null(), |h| h as *const rdma_addrinfo);
    // SAFETY: null or NUL-terminated strings, null or live hints, a
    // writable result.
    let r = unsafe { rdma_getaddrinfo(p(node), p(service), h, &mut res) };
    (r, res)
}

/// A socket address in C form, with its length.
fn c_addr(a: &str) -> (Box<libc::sockaddr_storage>, libc::socklen_t) {
    let a: SocketAddr = a.parse().unwrap();
    // SAFETY: sockaddr_storage is plain data.
    let mut b: Box<libc::sockaddr_storage> = Box::new(unsafe { std::mem::zeroed() });
    to_c(a, (&mut *b as *mut libc::sockaddr_storage).cast());
    let len = match a {
        SocketAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
    };
    (b, len as libc::socklen_t)
}

fn src(ai: &rdma_addrinfo) -> Option<SocketAddr> {
    from_c(ai.ai_src_addr as *const _)
}

fn dst(ai: &rdma_addrinfo) -> Option<SocketAddr> {
    from_c(ai.ai_dst_addr as *const _)
}

fn free(res: *mut rdma_addrinfo) {
    // SAFETY: an answer of rdma_getaddrinfo, freed once.
    unsafe { rdma_freeaddrinfo(res) };
}

#[test]
fn numeric_destination_and_passive_service() {
    let (r, res) = call(Some(c"127.0.0.2"), Some(c"7471"), None);
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(ai.ai_flags, 0);
    assert_eq!(ai.ai_family, libc::AF_INET);
    assert_eq!(ai.ai_port_space, RDMA_PS_TCP as i32);
    assert_eq!(ai.ai_qp_type, IBV_QPT_RC as i32);
    assert!(ai.ai_src_addr.is_null());
    assert_eq!(ai.ai_src_len, 0);
    assert_eq!(dst(ai), Some("127.0.0.2:7471".parse().unwrap()));
    assert_eq!(
        ai.ai_dst_len as usize,
        std::mem::size_of::<libc::sockaddr_in>()
    );
    assert!(ai.ai_route.is_null() && ai.ai_connect.is_null() && ai.ai_next.is_null());
    free(res);

    let mut h = zeroed();
    h.ai_flags = RAI_PASSIVE as i32;
    h.ai_port_space = RDMA_PS_UDP as i32;
    h.ai_qp_type = IBV_QPT_UD as i32;
    let (r, res) = call(None, Some(c"9000"), Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(ai.ai_flags, RAI_PASSIVE as i32);
    assert_eq!(
        (ai.ai_port_space, ai.ai_qp_type),
        (RDMA_PS_UDP as i32, IBV_QPT_UD as i32)
    );
    assert!(ai.ai_dst_addr.is_null());
    assert_eq!(src(ai), Some("0.0.0.0:9000".parse().unwrap()));
    free(res);

    h.ai_family = libc::AF_INET6;
    let (r, res) = call(None, Some(c"9000"), Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(ai.ai_family, libc::AF_INET6);
    assert_eq!(src(ai), Some("[::]:9000".parse().unwrap()));
    free(res);
}

#[test]
fn the_port_space_and_qp_type_follow_the_socket_type() {
    // A UD QP type with no port space: a datagram socket, RDMA_PS_UDP.
    let mut h = zeroed();
    h.ai_qp_type = IBV_QPT_UD as i32;
    let (r, res) = call(Some(c"127.0.0.1"), None, Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(
        (ai.ai_qp_type, ai.ai_port_space),
        (IBV_QPT_UD as i32, RDMA_PS_UDP as i32)
    );
    free(res);
}

#[test]
fn hints_alone_give_their_addresses() {
    // libfabric's verbs provider: no node, no service, the endpoint's
    // own address in the hints (a passive lookup).
    let (s, slen) = c_addr("127.0.0.1:0");
    let mut h = zeroed();
    h.ai_flags = (RAI_PASSIVE | RAI_FAMILY) as i32;
    h.ai_family = libc::AF_INET;
    h.ai_qp_type = IBV_QPT_RC as i32;
    h.ai_port_space = RDMA_PS_TCP as i32;
    h.ai_src_addr = (&*s as *const libc::sockaddr_storage).cast_mut().cast();
    h.ai_src_len = slen;
    let (r, res) = call(None, None, Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(ai.ai_flags, h.ai_flags);
    assert_eq!(ai.ai_family, libc::AF_INET);
    assert_eq!(
        (ai.ai_qp_type, ai.ai_port_space),
        (h.ai_qp_type, h.ai_port_space)
    );
    assert_eq!(src(ai), Some("127.0.0.1:0".parse().unwrap()));
    assert_eq!(ai.ai_src_len, slen);
    assert_ne!(ai.ai_src_addr, h.ai_src_addr, "a copy, not the caller's");
    assert!(ai.ai_dst_addr.is_null());
    free(res);

    // An active lookup: both addresses copied.
    let (d, dlen) = c_addr("127.0.0.2:9228");
    h.ai_flags = RAI_FAMILY as i32;
    h.ai_dst_addr = (&*d as *const libc::sockaddr_storage).cast_mut().cast();
    h.ai_dst_len = dlen;
    let (r, res) = call(None, None, Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(dst(ai), Some("127.0.0.2:9228".parse().unwrap()));
    assert_eq!(src(ai), Some("127.0.0.1:0".parse().unwrap()));
    free(res);

    // A node with a source in the hints: the node is the destination,
    // the hints' source is kept.
    let (r, res) = call(Some(c"127.0.0.3"), Some(c"1"), Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(dst(ai), Some("127.0.0.3:1".parse().unwrap()));
    assert_eq!(src(ai), Some("127.0.0.1:0".parse().unwrap()));
    free(res);

    // Empty hints: an empty answer.
    let (r, res) = call(None, None, Some(&zeroed()));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert!(ai.ai_src_addr.is_null() && ai.ai_dst_addr.is_null());
    free(res);
}

#[test]
fn names_go_through_the_c_library() {
    let mut h = zeroed();
    h.ai_flags = RAI_PASSIVE as i32;
    h.ai_family = libc::AF_INET;
    let (r, res) = call(Some(c"localhost"), None, Some(&h));
    assert_eq!(r, 0);
    // SAFETY: a successful answer.
    let ai = unsafe { &*res };
    assert_eq!(src(ai).map(|a| a.ip()), Some("127.0.0.1".parse().unwrap()));
    free(res);

    // A name refused with RAI_NUMERICHOST, and an unknown service: the
    // C library's codes, returned as they are.
    h.ai_flags = (RAI_PASSIVE | RAI_NUMERICHOST) as i32;
    let (r, _) = call(Some(c"localhost"), None, Some(&h));
    assert_eq!(r, libc::EAI_NONAME);
    h.ai_qp_type = IBV_QPT_RC as i32;
    let (r, _) = call(Some(c"127.0.0.1"), Some(c"no-such-service"), Some(&h));
    assert!(r != 0 && r != -1, "{r}");
}

#[test]
fn bad_arguments_are_refused() {
    let mut res: *mut rdma_addrinfo = null_mut();
    // SAFETY: null arguments.
    assert_eq!(
        unsafe { rdma_getaddrinfo(null(), null(), null(), &mut res) },
        -1
    );
    assert_eq!(errno_now(), libc::EINVAL);
    // SAFETY: a NUL-terminated node and a null result.
    let r = unsafe { rdma_getaddrinfo(c"127.0.0.1".as_ptr(), null(), null(), null_mut()) };
    assert_eq!((r, errno_now()), (-1, libc::EINVAL));

    let mut h = zeroed();
    h.ai_family = libc::AF_IB;
    assert_eq!(call(None, Some(c"1"), Some(&h)).0, -1);
    assert_eq!(errno_now(), libc::EAFNOSUPPORT);

    // A source length with no address, and one longer than any.
    let mut h = zeroed();
    h.ai_src_len = 16;
    assert_eq!(call(None, None, Some(&h)).0, -1);
    assert_eq!(errno_now(), libc::EINVAL);
    let (s, _) = c_addr("127.0.0.1:0");
    h.ai_src_addr = (&*s as *const libc::sockaddr_storage).cast_mut().cast();
    h.ai_src_len = 4096;
    assert_eq!(call(None, None, Some(&h)).0, -1);
    assert_eq!(errno_now(), libc::EINVAL);
}

#[test]
fn answers_the_program_changed_or_built_are_freed_whole() {
    // libfabric replaces an answer's source with its own malloc'ed
    // address, and frees lists it built with calloc.
    let (r, res) = call(Some(c"127.0.0.2"), Some(c"1"), None);
    assert_eq!(r, 0);
    let (a, len) = c_addr("127.0.0.1:0");
    // SAFETY: malloc'ed room for the address, given to the answer, which
    // rdma_freeaddrinfo frees.
    unsafe {
        let p = libc::malloc(len as usize) as *mut libc::sockaddr_storage;
        std::ptr::copy_nonoverlapping(
            &*a as *const libc::sockaddr_storage as *const u8,
            p as *mut u8,
            len as usize,
        );
        (*res).ai_src_addr = p.cast();
        (*res).ai_src_len = len;
        let own = libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) as *mut rdma_addrinfo;
        (*own).ai_dst_addr = libc::malloc(len as usize).cast();
        (*res).ai_next = own;
    }
    free(res);
}

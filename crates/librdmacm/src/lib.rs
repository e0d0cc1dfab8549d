//! `librdmacm.so.1` backed by urdma: unmodified rdma_cm programs (linked
//! against Debian's librdmacm, rdma-core 44) connect through the NIC's
//! connection manager, with no kernel module.
//!
//! Every function of Debian's library is defined here under its name and
//! symbol version (`.symver name, name@@@NODE`); `build.rs` sets the
//! soname and the nodes. The devices are urdma's `libibverbs.so.1`'s
//! (`urdma run` puts both libraries in front), and CM calls reach the NIC
//! through it ([`nic`]).
//!
//! Calls follow librdmacm's conventions: 0 or a pointer on success, -1
//! or null with `errno` set on failure. Every handle from C is looked up
//! in the library's table first ([`state`]); one it does not know gives
//! `EINVAL`.

#![allow(clippy::missing_safety_doc)]
// The internal functions take the C handles as raw pointers and
// dereference them only after finding them in the library's table (a
// handle it made and has not freed), which is what makes them safe to
// call with any pointer.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod addr;
pub mod addrinfo;
pub mod conn;
pub mod ep;
pub mod id;
pub mod nic;
pub mod qp;
pub mod state;
pub mod stubs;
pub mod sys;
pub mod ud;

use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use sys::*;

/// Set the calling thread's errno.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location is the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno (EIO if it is 0).
pub fn errno() -> c_int {
    // SAFETY: as in set_errno.
    match unsafe { *libc::__errno_location() } {
        0 => libc::EIO,
        e => e,
    }
}

/// Run `f`, turning a panic into `fail` with EIO (never unwinding into C).
fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        fail
    })
}

/// 0, or -1 with errno.
fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The pointer, or null with errno.
fn ret_ptr<T>(r: Result<*mut T, c_int>) -> *mut T {
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// Bind each name to its version node. Not in the unit tests' build: a
/// `.symver` whose symbol another codegen unit defines becomes an
/// undefined reference to `name@NODE`, which an executable (with no
/// version script) cannot resolve; the tests call the functions by name.
macro_rules! versions {
    ($($ver:literal: $($name:ident),* ;)*) => {
        $($(
            #[cfg(not(test))]
            std::arch::global_asm!(concat!(
                ".symver ", stringify!($name), ", ", stringify!($name), "@@@", $ver
            ));
        )*)*
    };
}

versions! {
    "RDMACM_1.0": rdma_create_event_channel, rdma_destroy_event_channel, rdma_create_id,
        rdma_destroy_id, rdma_bind_addr, rdma_resolve_addr, rdma_resolve_route, rdma_create_qp,
        rdma_create_qp_ex, rdma_destroy_qp, rdma_connect, rdma_listen, rdma_accept, rdma_reject,
        rdma_notify, rdma_disconnect, rdma_get_cm_event, rdma_ack_cm_event, rdma_get_src_port,
        rdma_get_dst_port, rdma_join_multicast, rdma_leave_multicast, rdma_event_str,
        rdma_set_option, rdma_migrate_id;
    "RDMACM_1.1": rdma_join_multicast_ex;
    "RDMACM_1.2": rdma_establish, rdma_init_qp_attr;
    "RDMACM_1.3": rdma_reject_ece;
}

#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(std::ptr::null_mut(), || ret_ptr(id::create_channel()))
}

#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    guard((), || {
        if let Err(e) = id::destroy_channel(ch) {
            tracing::warn!(errno = e, "rdma_destroy_event_channel refused");
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    guard(-1, || {
        if out.is_null() {
            return ret(Err(libc::EINVAL));
        }
        let qp_type = match ps {
            RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
            _ => IBV_QPT_RC,
        };
        ret(id::create_id(ch, context, ps, qp_type).map(|p| {
            // SAFETY: out is writable (checked non-null).
            unsafe { *out = p }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard(-1, || ret(id::destroy_id(id)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, a: *mut libc::sockaddr) -> c_int {
    guard(-1, || {
        let Some(a) = addr::from_c(a as *const c_void) else {
            return ret(Err(libc::EAFNOSUPPORT));
        };
        let mut st = state::lock();
        ret(st
            .id(id)
            .map(|_| ())
            .and_then(|()| addr::bind(&mut st, id, a)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard(-1, || {
        {
            let mut st = state::lock();
            if st.id(id).is_ok() {
                id::release_held(&mut st, id);
            }
        }
        ret(
            addr::resolve_addr(id, src as *const c_void, dst as *const c_void)
                .and_then(|()| id::complete(id)),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard(-1, || {
        {
            let mut st = state::lock();
            if st.id(id).is_ok() {
                id::release_held(&mut st, id);
            }
        }
        ret(addr::resolve_route(id).and_then(|()| id::complete(id)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || ret(qp::create(&mut state::lock(), id, pd, attr)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard(-1, || ret(qp::create_ex(&mut state::lock(), id, attr)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard((), || {
        let mut st = state::lock();
        if st.id(id).is_ok() {
            let taken = qp::take(&mut st, id);
            drop(st);
            taken.destroy();
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    guard(-1, || ret(conn::connect(id, p)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    guard(-1, || ret(conn::listen(id)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, p: *mut rdma_conn_param) -> c_int {
    guard(-1, || ret(conn::accept(id, p)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard(-1, || ret(conn::reject(id, data.cast(), len)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    data: *const c_void,
    len: u8,
) -> c_int {
    guard(-1, || ret(conn::reject(id, data.cast(), len)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: ibv_event_type) -> c_int {
    guard(-1, || ret(conn::notify(id)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    guard(-1, || ret(conn::disconnect(id)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    guard(-1, || ret(conn::establish(id)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard(-1, || {
        if attr.is_null() || mask.is_null() {
            return ret(Err(libc::EINVAL));
        }
        let mut st = state::lock();
        let r = st.id(id).and_then(|s| {
            // SAFETY: id is live; attr and mask are writable.
            unsafe {
                let dgid = (*id).route.addr.addr.ibaddr.dgid;
                let (a, m) = qp::attr_for(s, (*id).qp_type, (*attr).qp_state, dgid)?;
                *attr = a;
                *mask = m;
            }
            Ok(())
        });
        ret(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    guard(-1, || {
        if out.is_null() {
            return ret(Err(libc::EINVAL));
        }
        ret(id::get_event(ch).map(|e| {
            // SAFETY: out is writable (checked non-null).
            unsafe { *out = e }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(ev: *mut rdma_cm_event) -> c_int {
    guard(-1, || ret(id::ack_event(ev)))
}

/// The port of the ID's source or destination, in network byte order.
fn port_of(id: *mut rdma_cm_id, dst: bool) -> u16 {
    let mut st = state::lock();
    if st.id(id).is_err() {
        return 0;
    }
    // SAFETY: id is live.
    let p = unsafe {
        match dst {
            false => std::ptr::addr_of!((*id).route.addr.__bindgen_anon_1) as *const c_void,
            true => std::ptr::addr_of!((*id).route.addr.__bindgen_anon_2) as *const c_void,
        }
    };
    addr::port_of(p).to_be()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || port_of(id, false))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || port_of(id, true))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    _id: *mut rdma_cm_id,
    _addr: *mut libc::sockaddr,
    _context: *mut c_void,
) -> c_int {
    stubs::unsupported(-1)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    _id: *mut rdma_cm_id,
    _attr: *mut rdma_cm_join_mc_attr_ex,
    _context: *mut c_void,
) -> c_int {
    stubs::unsupported(-1)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    _id: *mut rdma_cm_id,
    _addr: *mut libc::sockaddr,
) -> c_int {
    stubs::unsupported(-1)
}

#[no_mangle]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    guard(-1, || {
        if val.is_null() {
            return ret(Err(libc::EINVAL));
        }
        let mut st = state::lock();
        let r = st.id(id).and_then(|s| {
            if level != RDMA_OPTION_ID as c_int {
                return Err(libc::ENOSYS);
            }
            // SAFETY: val is len readable bytes (the caller's contract).
            let byte = || unsafe { *(val as *const u8) };
            match (name as u32, len) {
                (RDMA_OPTION_ID_TOS, 1) => s.tos = byte(),
                (RDMA_OPTION_ID_ACK_TIMEOUT, 1) => s.ack_timeout = Some(byte().min(31)),
                (RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY, 4) => {}
                (RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT, _)
                | (RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY, _) => {
                    return Err(libc::EINVAL)
                }
                _ => return Err(libc::ENOSYS),
            }
            Ok(())
        });
        ret(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    guard(-1, || ret(id::migrate(id, ch)))
}

mod extras;
pub use extras::*;

pub mod rsocket;

#[cfg(test)]
mod tests;

//! The device's communication manager for the drop-in `librdmacm.so.1`.
//!
//! librdmacm holds no device of its own: it opens devices with
//! `ibv_open_device` and reaches the NIC's CM through the context, with
//! these three entry points (exported by `libibverbs.so.1` under a private
//! version node). Calls and events travel encoded ([`CmOp::encode`],
//! [`CmEvent::encode`]), so the two libraries share no Rust types.

use crate::context::Context;
use crate::sys::ibv_context;
use crate::util::guard;
use std::os::raw::c_int;
use std::time::Duration;
use urdma::cm::{CmEvent, CmOp, CM_WIRE_MAX};

/// `urdma_cm_call`: carry out an encoded [`CmOp`] on the device of
/// `ctx`. Returns 0 (with the new connection's ID in `*id` for a
/// connect, else 0 there) or a positive errno.
pub unsafe extern "C" fn cm_call(
    ctx: *mut ibv_context,
    op: *const u8,
    len: usize,
    id: *mut u32,
) -> c_int {
    guard(libc::EIO, || {
        let ctx = match Context::from_ptr(ctx) {
            Ok(c) => c,
            Err(e) => return e,
        };
        if op.is_null() || len > CM_WIRE_MAX {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes `len` readable bytes at `op`.
        let bytes = unsafe { std::slice::from_raw_parts(op, len) };
        let op = match CmOp::decode(bytes) {
            Ok(op) => op,
            Err(e) => return e.errno(),
        };
        match ctx.dev.device.cm(op) {
            Ok(conn) => {
                if !id.is_null() {
                    // SAFETY: a non-null `id` points to a writable u32.
                    unsafe { *id = conn.unwrap_or(0) };
                }
                0
            }
            Err(e) => {
                tracing::debug!(error = %e, "CM call refused");
                e.errno()
            }
        }
    })
}

/// `urdma_cm_next_event`: wait up to `timeout_ms` (negative: forever)
/// for the next CM event of the program on the device of `ctx` and
/// encode it into `buf` (`cap` bytes, at least [`CM_WIRE_MAX`]).
/// Returns its length, 0 when none came in time, or a negative errno.
pub unsafe extern "C" fn cm_next_event(
    ctx: *mut ibv_context,
    timeout_ms: c_int,
    buf: *mut u8,
    cap: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        let ctx = match Context::from_ptr(ctx) {
            Ok(c) => c,
            Err(e) => return -(e as isize),
        };
        if buf.is_null() || cap < CM_WIRE_MAX {
            return -(libc::EINVAL as isize);
        }
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let Some(ev) = ctx.dev.device.next_cm_event(timeout) else {
            return 0;
        };
        match CmEvent::encode(&ev) {
            Ok(bytes) if bytes.len() <= cap => {
                // SAFETY: the caller passes `cap` writable bytes at `buf`,
                // and the event fits.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
                bytes.len() as isize
            }
            _ => {
                tracing::warn!(?ev, "a CM event could not be encoded");
                -(libc::EIO as isize)
            }
        }
    })
}

/// `urdma_cm_local_addr`: the address and UDP port of the device of
/// `ctx` (where its CM answers) as a `sockaddr_in`/`sockaddr_in6` in
/// `*out`. Returns 0 or a positive errno.
pub unsafe extern "C" fn cm_local_addr(ctx: *mut ibv_context, out: *mut std::ffi::c_void) -> c_int {
    guard(libc::EIO, || {
        let ctx = match Context::from_ptr(ctx) {
            Ok(c) => c,
            Err(e) => return e,
        };
        if out.is_null() {
            return libc::EINVAL;
        }
        let addr = ctx.dev.device.local_addr();
        // SAFETY: `out` points to a writable sockaddr_storage, which
        // holds either address form.
        unsafe { write_sockaddr(addr, out.cast()) };
        0
    })
}

/// Write `addr` as a C socket address into `out`.
///
/// # Safety
/// `out` points to a writable `sockaddr_storage`.
pub unsafe fn write_sockaddr(addr: std::net::SocketAddr, out: *mut libc::sockaddr_storage) {
    // SAFETY: per the contract; sockaddr_storage is plain data.
    unsafe {
        std::ptr::write_bytes(out, 0, 1);
        match addr {
            std::net::SocketAddr::V4(a) => {
                let sin = out as *mut libc::sockaddr_in;
                (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
                (*sin).sin_port = a.port().to_be();
                (*sin).sin_addr.s_addr = u32::from(*a.ip()).to_be();
            }
            std::net::SocketAddr::V6(a) => {
                let sin6 = out as *mut libc::sockaddr_in6;
                (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
                (*sin6).sin6_port = a.port().to_be();
                (*sin6).sin6_addr.s6_addr = a.ip().octets();
            }
        }
    }
}

//! The device's communication manager for the drop-in `librdmacm.so.1`.
//!
//! librdmacm holds no device of its own: it opens devices with
//! `ibv_open_device` and reaches the NIC's CM through the context, with
//! these three entry points (exported by `libibverbs.so.1` under a private
//! version node). Calls and events travel encoded as the agent's messages
//! are ([`urdma::nic::proto::encode`]), so no Rust value crosses between
//! the two libraries.

use crate::context::Context;
use crate::sys::ibv_context;
use crate::util::guard;
use std::os::raw::c_int;
use std::time::Duration;
use urdma::cm::{CmEvent, CmOp, CM_WIRE_MAX};
use urdma::nic::proto::{decode, encode};

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
        let op: CmOp = match decode(bytes) {
            Ok(op) => op,
            Err(_) => return libc::EINVAL,
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

/// The context of `ctx`, given an output buffer `buf` of `cap` bytes
/// that holds any encoded CM value; else the negative errno to return.
fn with_buffer<'a>(ctx: *mut ibv_context, buf: *mut u8, cap: usize) -> Result<&'a Context, isize> {
    let ctx = Context::from_ptr(ctx).map_err(|e| -(e as isize))?;
    if buf.is_null() || cap < CM_WIRE_MAX {
        return Err(-(libc::EINVAL as isize));
    }
    Ok(ctx)
}

/// Copy `value` encoded into `buf` (`cap` bytes); its length, or -EIO.
///
/// # Safety
/// `buf` is `cap` writable bytes.
unsafe fn put<T: serde::Serialize>(value: &T, buf: *mut u8, cap: usize) -> isize {
    match encode(value) {
        Ok(bytes) if bytes.len() <= cap => {
            // SAFETY: per the contract; the encoding fits.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
            bytes.len() as isize
        }
        _ => -(libc::EIO as isize),
    }
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
        let ctx = match with_buffer(ctx, buf, cap) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let Some(ev) = ctx.dev.device.next_cm_event(timeout) else {
            return 0;
        };
        // SAFETY: the caller passes `cap` writable bytes at `buf`.
        let n = unsafe { put::<CmEvent>(&ev, buf, cap) };
        if n < 0 {
            tracing::warn!(?ev, "a CM event could not be encoded");
        }
        n
    })
}

/// `urdma_cm_local_addr`: the address and UDP port of the device of
/// `ctx` (where its CM answers), encoded as a `SocketAddr` into `buf`
/// (`cap` bytes, at least [`CM_WIRE_MAX`]). Returns its length or a
/// negative errno.
pub unsafe extern "C" fn cm_local_addr(ctx: *mut ibv_context, buf: *mut u8, cap: usize) -> isize {
    guard(-(libc::EIO as isize), || match with_buffer(ctx, buf, cap) {
        // SAFETY: the caller passes `cap` writable bytes at `buf`.
        Ok(ctx) => unsafe { put(&ctx.dev.device.local_addr(), buf, cap) },
        Err(e) => e,
    })
}

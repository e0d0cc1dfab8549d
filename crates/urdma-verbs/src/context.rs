//! Contexts: `ibv_open_device` lays a `struct verbs_context` out (ending
//! with `struct ibv_context`) and fills its operation tables, so that the
//! inline verbs of verbs.h (`ibv_post_send`, `ibv_poll_cq`,
//! `ibv_query_port`, `ibv_create_cq_ex`, ...) reach this layer.

use crate::device::{device_ref, open_shared, DevShared, Device};
use crate::events::{AsyncQueue, Target};
use crate::handles::{self, Kind};
use crate::sys::*;
use crate::util::{guard, ret_errno, ret_minus1, ret_ptr, set_errno, VResult};
use crate::{cq, post, qp, query, srq};
use std::mem::offset_of;
use std::os::raw::c_int;
use std::sync::Arc;

/// An open context. The pointer handed to C is `&vctx.context`.
#[repr(C)]
pub struct Context {
    /// The C view; must stay the first field.
    pub vctx: verbs_context,
    /// The shared open device.
    pub dev: Arc<DevShared>,
    /// Asynchronous events of this context's objects.
    pub events: Arc<AsyncQueue>,
    /// The device it was opened on, when this library made it (the
    /// drop-in library); a provider's devices belong to libibverbs.
    pub device: Option<&'static Device>,
}

impl Context {
    /// Look up a live context from the `ibv_context *` C holds.
    pub fn from_ptr<'a>(p: *const ibv_context) -> VResult<&'a Context> {
        if !handles::is_live(p, Kind::Context) {
            return Err(libc::EINVAL);
        }
        let base = (p as *const u8).wrapping_sub(offset_of!(verbs_context, context));
        // SAFETY: a registered context pointer is `&vctx.context` of a live
        // boxed Context, and vctx is its first field (repr(C)).
        Ok(unsafe { &*(base as *const Context) })
    }

    /// The `ibv_context *` of this context.
    pub fn ibv_ptr(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

/// Fill the operation tables of a context this library owns entirely
/// (the drop-in `libibverbs.so.1`).
pub fn fill_ops(v: &mut verbs_context) {
    let ops = &mut v.context.ops;
    ops._compat_query_device = Some(query::query_device);
    ops._compat_query_port = Some(query::query_port_compat);
    ops.poll_cq = Some(cq::poll_cq);
    ops.req_notify_cq = Some(cq::req_notify_cq);
    ops.post_srq_recv = Some(post::post_srq_recv);
    ops.post_send = Some(post::post_send);
    ops.post_recv = Some(post::post_recv);
    ops.alloc_mw = Some(crate::mw::alloc_mw);
    ops.dealloc_mw = Some(crate::mw::dealloc_mw);
    ops.bind_mw = Some(crate::mw::bind_mw);
    v.query_port = Some(query::query_port);
    v.create_cq_ex = Some(cq::create_cq_ex);
    v.query_device_ex = Some(query::query_device_ex);
    v.create_qp_ex = Some(qp::create_qp_ex);
    v.create_srq_ex = Some(srq::create_srq_ex);
    v.alloc_parent_domain = Some(crate::parent_domain::alloc_parent_domain);
    v.sz = std::mem::size_of::<verbs_context>();
}

/// Allocate a context on the open device `dev`, its `verbs_context`
/// all zero. The caller initialises the C view at its final address
/// (`(*ctx).vctx`), then [`publish`]es it; or frees it with [`free`].
pub fn alloc(dev: Arc<DevShared>, device: Option<&'static Device>) -> VResult<*mut Context> {
    let events = AsyncQueue::new()?;
    Ok(Box::into_raw(Box::new(Context {
        // SAFETY: verbs_context is plain C data (pointers, integers,
        // function pointers as Options); all-zero is a valid value.
        vctx: unsafe { std::mem::zeroed() },
        dev,
        events,
        device,
    })))
}

/// Initialise the Rust fields of a context in memory the caller
/// allocated (zeroed, `size_of::<Context>()` bytes, suitably aligned), for
/// a provider whose `verbs_context` the system library allocates and
/// initialises. The caller then [`publish`]es it, or undoes this with
/// [`drop_fields`].
///
/// # Safety
/// `ctx` points to such memory; its fields other than `vctx` hold no
/// value yet.
pub unsafe fn init_fields(
    ctx: *mut Context,
    dev: Arc<DevShared>,
    device: Option<&'static Device>,
) -> VResult<()> {
    let events = AsyncQueue::new()?;
    // SAFETY: the caller's contract: ctx is valid for writes and these
    // fields are uninitialised, so nothing is overwritten without a drop.
    unsafe {
        std::ptr::addr_of_mut!((*ctx).dev).write(dev);
        std::ptr::addr_of_mut!((*ctx).events).write(events);
        std::ptr::addr_of_mut!((*ctx).device).write(device);
    }
    Ok(())
}

/// Drop the Rust fields [`init_fields`] wrote (the memory and `vctx`
/// stay the caller's).
///
/// # Safety
/// `ctx` was initialised by [`init_fields`], is not published, and its
/// fields are not used again.
pub unsafe fn drop_fields(ctx: *mut Context) {
    // SAFETY: the caller's contract: the fields hold values init_fields
    // wrote, dropped once here.
    unsafe {
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*ctx).dev));
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*ctx).events));
    }
}

/// Make a context allocated by [`alloc`] (or initialised by
/// [`init_fields`]) reachable from C: from now on
/// the entry points accept its `ibv_context *`, which this returns.
///
/// # Safety
/// `ctx` comes from [`alloc`] or [`init_fields`] and is not published yet.
pub unsafe fn publish(ctx: *mut Context) -> *mut ibv_context {
    // SAFETY: ctx is live (caller's contract); take the address of its
    // ibv_context.
    let p = unsafe { std::ptr::addr_of_mut!((*ctx).vctx.context) };
    handles::register(p, Kind::Context);
    p
}

/// Withdraw a published context: the entry points refuse its pointer
/// from now on. Returns the context, for the caller to tear down its C
/// view and [`free`] it.
pub fn unpublish(context: *mut ibv_context) -> VResult<*mut Context> {
    let c = Context::from_ptr(context)?;
    let base = c as *const Context as *mut Context;
    if !handles::unregister(context, Kind::Context) {
        return Err(libc::EINVAL);
    }
    Ok(base)
}

/// Free a context from [`alloc`] (unpublished).
///
/// # Safety
/// `ctx` comes from [`alloc`], is not published, and is not used again.
pub unsafe fn free(ctx: *mut Context) {
    // SAFETY: the caller's contract: the Box leaked by alloc().
    drop(unsafe { Box::from_raw(ctx) });
}

fn open(device: *mut ibv_device) -> VResult<*mut ibv_context> {
    let d = device_ref(device)?;
    let dev = open_shared(&d.config)?;
    let ctx = alloc(dev, Some(d))?;
    // SAFETY: ctx is the context just allocated, not yet shared; the
    // mutex lives inside it at a stable address and is initialised once
    // before the context is published.
    unsafe {
        let ctx_ref = &mut *ctx;
        let events_fd = ctx_ref.events.fd.raw();
        let v = &mut ctx_ref.vctx;
        fill_ops(v);
        let c = &mut v.context;
        c.device = device;
        // A descriptor of the context's own, as a kernel device's command
        // file is: programs dup it to import the device elsewhere, which
        // ibv_import_device refuses (EOPNOTSUPP).
        c.cmd_fd = libc::fcntl(events_fd, libc::F_DUPFD_CLOEXEC, 0);
        c.async_fd = events_fd;
        c.num_comp_vectors = 1;
        c.abi_compat = crate::sys::VERBS_ABI_IS_EXTENDED as *mut libc::c_void;
        libc::pthread_mutex_init(std::ptr::addr_of_mut!(c.mutex).cast(), std::ptr::null());
        Ok(publish(ctx))
    }
}

/// `ibv_open_device`
pub unsafe extern "C" fn open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || ret_ptr(open(device)))
}

/// `ibv_close_device`. Objects still alive keep the device open; freeing
/// them is the application's job, as with libibverbs.
pub unsafe extern "C" fn close_device(context: *mut ibv_context) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let base = unpublish(context)?;
            // SAFETY: base is the context open() allocated; it is no
            // longer registered, so no entry point reaches it again.
            unsafe {
                libc::pthread_mutex_destroy(
                    std::ptr::addr_of_mut!((*base).vctx.context.mutex).cast(),
                );
                let cmd_fd = (*base).vctx.context.cmd_fd;
                if cmd_fd >= 0 {
                    libc::close(cmd_fd);
                }
                free(base);
            }
            Ok(())
        })())
    })
}

fn get_event(context: *mut ibv_context, event: *mut ibv_async_event) -> VResult<()> {
    let c = Context::from_ptr(context)?;
    if event.is_null() {
        return Err(libc::EINVAL);
    }
    loop {
        c.events.fd.wait()?;
        let Some(ev) = c.events.pop() else {
            continue;
        };
        // SAFETY: plain C data; zero is valid.
        let mut out: ibv_async_event = unsafe { std::mem::zeroed() };
        out.event_type = ev.event_type;
        match ev.target {
            Target::Qp => {
                let Ok(q) = qp::Qp::from_ptr(ev.element as *mut ibv_qp) else {
                    continue;
                };
                q.acks.reported();
                out.element.qp = ev.element as *mut ibv_qp;
            }
            Target::Cq => {
                let Ok(q) = cq::Cq::from_ptr(ev.element as *mut ibv_cq) else {
                    continue;
                };
                q.async_acks.reported();
                out.element.cq = ev.element as *mut ibv_cq;
            }
            Target::Srq => {
                let Ok(s) = srq::Srq::from_ptr(ev.element as *mut ibv_srq) else {
                    continue;
                };
                s.acks.reported();
                out.element.srq = ev.element as *mut ibv_srq;
            }
        }
        // SAFETY: event is non-NULL and points to the caller's struct.
        unsafe { *event = out };
        return Ok(());
    }
}

/// `ibv_get_async_event`: blocks on `async_fd` (unless the application
/// made it non-blocking: then -1 with EAGAIN when nothing waits).
pub unsafe extern "C" fn get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard(-1, || ret_minus1(get_event(context, event)))
}

/// `ibv_ack_async_event`
pub unsafe extern "C" fn ack_async_event(event: *mut ibv_async_event) {
    guard((), || {
        if event.is_null() {
            set_errno(libc::EINVAL);
            return;
        }
        // SAFETY: non-NULL pointer to the caller's event.
        let ev = unsafe { &*event };
        // SAFETY: the union member read matches the event type, as
        // ibv_get_async_event wrote it; the pointer is then checked live.
        unsafe {
            match ev.event_type {
                IBV_EVENT_CQ_ERR => {
                    if let Ok(c) = cq::Cq::from_ptr(ev.element.cq) {
                        c.ack_async();
                    }
                }
                IBV_EVENT_QP_FATAL
                | IBV_EVENT_QP_REQ_ERR
                | IBV_EVENT_QP_ACCESS_ERR
                | IBV_EVENT_COMM_EST
                | IBV_EVENT_SQ_DRAINED
                | IBV_EVENT_PATH_MIG
                | IBV_EVENT_PATH_MIG_ERR
                | IBV_EVENT_QP_LAST_WQE_REACHED => {
                    if let Ok(q) = qp::Qp::from_ptr(ev.element.qp) {
                        q.ack_event();
                    }
                }
                IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
                    if let Ok(s) = srq::Srq::from_ptr(ev.element.srq) {
                        s.ack_event();
                    }
                }
                _ => {}
            }
        }
    })
}

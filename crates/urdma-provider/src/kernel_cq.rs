//! CQs in the kernel too: each CQ the provider creates in the NIC also
//! exists in `urdma.ko`, made through uverbs (`ibv_cmd_create_cq`), so
//! that the kernel tracks it (`rdma resource show cq`), and the NIC
//! raises its completion events on the kernel's completion channel, where
//! the system library's `ibv_get_cq_event` reads them, and its CQ_ERR
//! event on the kernel's async event file. The kernel's CQ number travels
//! to the NIC with [`urdma::Device::bind_cq_to_kernel`]; a CQ with a
//! channel fails when the NIC cannot reach the kernel.

use crate::driver::{ibv_cmd_create_cq, ibv_cmd_destroy_cq, ibv_create_cq, CreateCqResp};
use std::os::raw::c_int;
use urdma::nic::kernel::KernelObject;
use urdma_verbs as v;
use urdma_verbs::cq::Cq;
use urdma_verbs::sys::*;
use urdma_verbs::util::{guard, set_errno, VResult};

/// `create_cq`: the NIC's CQ, then the kernel's, bound together: the
/// kernel's completion channel (if any) gets the completion events and
/// its async event file the CQ errors.
pub unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract is the verbs'; the channel is the
        // system library's, so the NIC's CQ is made without it.
        let cq = unsafe {
            v::cq::create_cq(
                context,
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                comp_vector,
            )
        };
        if cq.is_null() {
            return cq;
        }
        // SAFETY: cq is the live CQ just made; context is its context.
        match unsafe { create_in_kernel(context, cq, cqe, channel, comp_vector) } {
            Ok(()) => {
                crate::kernel_objects::mark(cq);
                cq
            }
            Err(e) => {
                // SAFETY: cq is live and unused.
                unsafe { v::cq::destroy_cq(cq) };
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The kernel's CQ for the NIC's `cq`.
///
/// # Safety
/// `cq` is a live CQ of `context` that nothing else uses yet.
unsafe fn create_in_kernel(
    context: *mut ibv_context,
    cq: *mut ibv_cq,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> VResult<()> {
    // SAFETY: plain C data; all-zero is the library's starting point.
    let mut cmd: ibv_create_cq = unsafe { std::mem::zeroed() };
    let mut resp = CreateCqResp::default();
    // SAFETY: cq is live; its cqe is the NIC's capacity, which the
    // library's call overwrites with the kernel's.
    let capacity = unsafe { (*cq).cqe };
    // SAFETY: the buffers are live for the call and their sizes are theirs.
    let rc = unsafe {
        ibv_cmd_create_cq(
            context,
            cqe,
            channel,
            comp_vector,
            cq,
            &mut cmd,
            std::mem::size_of_val(&cmd),
            &mut resp,
            std::mem::size_of_val(&resp),
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    // SAFETY: as above.
    unsafe { (*cq).cqe = capacity };
    // SAFETY: context is the library's, live.
    let ibdev = unsafe { crate::ibdev_name(context) };
    let bound = Cq::from_ptr(cq).and_then(|q| {
        q.dev
            .device
            .bind_cq_to_kernel(&q.cq, KernelObject { ibdev, id: resp.drv.id })
            .map_err(|e| {
                if !channel.is_null() {
                    eprintln!("urdma: a CQ with a completion channel needs the NIC to reach the kernel: {e}");
                }
                e.errno()
            })
    });
    // Without a channel, the binding only carries IBV_EVENT_CQ_ERR.
    if let (Err(e), false) = (bound, channel.is_null()) {
        // SAFETY: the kernel's CQ was just made and has no events.
        unsafe { ibv_cmd_destroy_cq(cq) };
        return Err(e);
    }
    Ok(())
}

/// `destroy_cq`: EBUSY while a QP uses it; the kernel's CQ goes first
/// (it waits until every completion event it reported was acknowledged).
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        let busy = Cq::from_ptr(cq).map(|q| q.in_use());
        match busy {
            Err(e) => return e,
            Ok(true) => return libc::EBUSY,
            Ok(false) => {}
        }
        // SAFETY: cq is a live CQ of this provider.
        let rc = unsafe { crate::kernel_objects::destroy_in_kernel(cq, ibv_cmd_destroy_cq) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: as above.
        unsafe { v::cq::destroy_cq(cq) }
    })
}

//! PDs, MRs, QPs and SRQs in the kernel too: each one the provider creates
//! in the NIC also exists in `urdma.ko`, made through uverbs, so that the
//! kernel tracks it (`rdma resource show pd|mr|qp|srq`, with its program
//! and, for a QP, its number, state and PSNs; for an MR, its keys). A QP is modified in the kernel
//! first (which checks the transition against IBTA's table, resolves the
//! address vector and keeps a copy of the attributes), then in the NIC. Objects made without a kernel counterpart (through the `_ex`
//! verbs, or on a PD or CQ that has none) stay out of the kernel, and so
//! do QPs built on them.

use crate::driver::*;
use std::collections::BTreeSet;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};
use urdma::nic::kernel::KernelObject;
use urdma_abi::proto::Object;
use urdma_abi::{urdma_create_qp_cmd, urdma_reg_mr_cmd};
use urdma_verbs as v;
use urdma_verbs::pd::Pd;
use urdma_verbs::sys::*;
use urdma_verbs::util::{guard, set_errno};

/// The objects (their C pointers) that have a kernel counterpart.
static BACKED: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn backed() -> MutexGuard<'static, BTreeSet<usize>> {
    BACKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Record that `p` has a kernel counterpart.
pub fn mark<T>(p: *const T) {
    backed().insert(p as usize);
}

/// Forget `p`'s kernel counterpart.
fn unmark<T>(p: *const T) {
    backed().remove(&(p as usize));
}

/// True if `p` has a kernel counterpart (NULL counts as having one).
pub fn is_backed<T>(p: *const T) -> bool {
    p.is_null() || backed().contains(&(p as usize))
}

/// Destroy `p`'s kernel counterpart, if it has one, with `destroy` (an
/// `ibv_cmd_destroy_*`); 0, or the error that leaves `p` as it was.
///
/// # Safety
/// `p` is NULL or a live object of this provider of the type `destroy`
/// takes.
pub unsafe fn destroy_in_kernel<T>(
    p: *mut T,
    destroy: unsafe extern "C" fn(*mut T) -> c_int,
) -> c_int {
    if p.is_null() || !is_backed(p) {
        return 0;
    }
    // SAFETY: p is a live object with a kernel counterpart (the caller's
    // contract).
    let rc = unsafe { destroy(p) };
    if rc == 0 {
        unmark(p);
    }
    rc
}

/// `alloc_pd`: the NIC's PD, then the kernel's.
pub unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract is the verbs'.
        let pd = unsafe { v::pd::alloc_pd(context) };
        if pd.is_null() {
            return pd;
        }
        let mut cmd = ibv_alloc_pd::default();
        let mut resp = ib_uverbs_alloc_pd_resp::default();
        // SAFETY: pd is the live PD just made; the buffers are live and
        // their sizes are theirs.
        let rc = unsafe {
            ibv_cmd_alloc_pd(
                context,
                pd,
                &mut cmd,
                std::mem::size_of_val(&cmd),
                &mut resp,
                std::mem::size_of_val(&resp),
            )
        };
        if rc != 0 {
            // SAFETY: pd is live and unused.
            unsafe { v::pd::dealloc_pd(pd) };
            set_errno(rc);
            return std::ptr::null_mut();
        }
        mark(pd);
        pd
    })
}

/// `dealloc_pd`: EBUSY while objects remain in it; the kernel's PD goes
/// first.
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        match Pd::from_ptr(pd) {
            Err(e) => return e,
            Ok(p) if p.in_use() => return libc::EBUSY,
            Ok(_) => {}
        }
        // SAFETY: pd is a live PD of this provider.
        let rc = unsafe { destroy_in_kernel(pd, ibv_cmd_dealloc_pd) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: as above.
        unsafe { v::pd::dealloc_pd(pd) }
    })
}

/// `reg_mr`: the NIC's MR, then the kernel's record of it under the NIC's
/// keys. A region the kernel refuses (an IOVA whose offset in its page
/// is not the address's) stays the NIC's alone.
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract is the verbs'.
        let mr = unsafe { v::pd::reg_mr_iova2(pd, addr, length, hca_va, access as c_uint) };
        if mr.is_null() || !is_backed(pd) {
            return mr;
        }
        // SAFETY: mr is the live MR just made, with no kernel record.
        unsafe { record_mr(mr.cast()) };
        mr
    })
}

/// `rereg_mr`: the kernel's record of the MR goes first (an error there
/// leaves everything as it was); then the NIC's MR takes its new PD,
/// translation or access; then the kernel's record is made again, as the
/// MR now is (as it was, if the NIC refused), under the NIC's keys, so
/// that the kernel counts it in its PD. If the kernel refuses the new
/// record, the region stays the NIC's alone.
pub unsafe extern "C" fn rereg_mr(
    mr: *mut verbs_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(libc::EIO, || {
        let backed = !mr.is_null() && is_backed(mr);
        if backed {
            // SAFETY: mr is a live MR with a kernel record.
            let rc = unsafe { destroy_in_kernel(mr, ibv_cmd_dereg_mr) };
            if rc != 0 {
                return rc;
            }
        }
        // SAFETY: the caller's contract is the verbs'; ibv_mr is the first
        // field of verbs_mr.
        let rc = unsafe { v::pd::rereg_mr(mr.cast(), flags, pd, addr, length, access) };
        if backed {
            // SAFETY: mr is live (it had a kernel record a moment ago).
            unsafe { record_mr(mr) };
        }
        rc
    })
}

/// Make the kernel's record of MR `mr` as it is now, under the NIC's keys.
///
/// # Safety
/// `mr` is a live MR of this provider with no kernel record.
unsafe fn record_mr(mr: *mut verbs_mr) {
    let Ok(m) = v::pd::Mr::from_ptr(mr.cast()) else {
        return;
    };
    let (pd, addr, length, iova) = (m.ibv.pd, m.ibv.addr, m.ibv.length, m.entry.iova);
    let (lkey, rkey, access) = (m.ibv.lkey, m.ibv.rkey, m.access);
    if !is_backed(pd) {
        return;
    }
    let mut cmd = RegMrCmd {
        drv: urdma_reg_mr_cmd { lkey, rkey },
        ..RegMrCmd::default()
    };
    let mut resp = ib_uverbs_reg_mr_resp::default();
    // SAFETY: pd and mr are live; the buffers are live and their sizes are
    // theirs.
    let rc = unsafe {
        ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            iova,
            access,
            mr,
            &mut cmd,
            std::mem::size_of_val(&cmd),
            &mut resp,
            std::mem::size_of_val(&resp),
        )
    };
    if rc == 0 {
        mark(mr);
    }
    // SAFETY: as above; the keys stay the NIC's.
    unsafe {
        (*mr).ibv_mr.lkey = lkey;
        (*mr).ibv_mr.rkey = rkey;
    }
}

/// `dereg_mr`: the kernel's record, then the NIC's MR.
pub unsafe extern "C" fn dereg_mr(mr: *mut verbs_mr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: mr is NULL or a live MR of this provider.
        let rc = unsafe { destroy_in_kernel(mr, ibv_cmd_dereg_mr) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: the caller's contract is the verbs'; ibv_mr is the
        // first field of verbs_mr.
        unsafe { v::pd::dereg_mr(mr.cast()) }
    })
}

/// `create_qp`: the NIC's QP, then the kernel's under the NIC's number
/// (when its PD, CQs and SRQ have kernel counterparts).
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract is the verbs'.
        let qp = unsafe { v::qp::create_qp(pd, attr) };
        if qp.is_null() {
            return qp;
        }
        // SAFETY: the NIC accepted attr, so it is a live init_attr.
        let a = unsafe { &mut *attr };
        if !(is_backed(pd) && is_backed(a.send_cq) && is_backed(a.recv_cq) && is_backed(a.srq)) {
            return qp;
        }
        let cap = a.cap;
        let mut cmd = CreateQpCmd {
            drv: urdma_create_qp_cmd {
                // SAFETY: qp is the live QP just made.
                qpn: unsafe { (*qp).qp_num },
                reserved: 0,
            },
            ..CreateQpCmd::default()
        };
        let mut resp = CreateQpResp::default();
        // SAFETY: pd, qp and attr are live; the buffers are live and
        // their sizes are theirs.
        let rc = unsafe {
            ibv_cmd_create_qp(
                pd,
                qp,
                attr,
                &mut cmd,
                std::mem::size_of_val(&cmd),
                &mut resp,
                std::mem::size_of_val(&resp),
            )
        };
        // The NIC's capacities are the QP's, whatever the kernel echoed.
        a.cap = cap;
        if rc != 0 {
            // SAFETY: qp is live and unused.
            unsafe { v::qp::destroy_qp(qp) };
            set_errno(rc);
            return std::ptr::null_mut();
        }
        mark(qp);
        if let Ok(q) = v::qp::Qp::from_ptr(qp) {
            // SAFETY: qp is live; its context is the library's.
            let ibdev = unsafe { crate::ibdev_name((*qp).context) };
            bind_events(&q.dev.device, Object::Qp(q.qpn), ibdev, resp.drv.id);
        }
        qp
    })
}

/// Have the NIC raise the asynchronous events of `obj` on the kernel's
/// object `id`, where the system library's `ibv_get_async_event` reads
/// them. A NIC that cannot reach the kernel (not root) keeps them: they
/// are then not delivered, which is said once.
fn bind_events(device: &urdma::Device, obj: Object, ibdev: String, id: u32) {
    if let Err(e) = device.bind_to_kernel(obj, KernelObject { ibdev, id }) {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!("urdma: asynchronous events are not delivered: {e}");
        });
    }
}

/// `modify_qp`: the kernel first, then the NIC.
pub unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        if !qp.is_null() && !attr.is_null() && is_backed(qp) {
            let mut cmd = ibv_modify_qp::default();
            // SAFETY: qp is a live QP with a kernel QP; attr is non-NULL.
            let rc = unsafe {
                ibv_cmd_modify_qp(qp, attr, attr_mask, &mut cmd, std::mem::size_of_val(&cmd))
            };
            if rc != 0 {
                return rc;
            }
        }
        // SAFETY: the caller's contract is the verbs'.
        unsafe { v::qp::modify_qp(qp, attr, attr_mask) }
    })
}

/// `destroy_qp`: the kernel's QP first.
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller's contract is the verbs'.
        let rc = unsafe { destroy_in_kernel(qp, ibv_cmd_destroy_qp) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: the caller's contract is the verbs'.
        unsafe { v::qp::destroy_qp(qp) }
    })
}

/// `create_srq`: the NIC's SRQ, then the kernel's (when its PD has one).
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract is the verbs'.
        let srq = unsafe { v::srq::create_srq(pd, attr) };
        if srq.is_null() || !is_backed(pd) {
            return srq;
        }
        // SAFETY: the NIC accepted attr, so it is live.
        let limits = unsafe { (*attr).attr };
        let mut cmd = ibv_create_srq::default();
        let mut resp = CreateSrqResp::default();
        // SAFETY: pd, srq and attr are live; the buffers are live and
        // their sizes are theirs.
        let rc = unsafe {
            ibv_cmd_create_srq(
                pd,
                srq,
                attr,
                &mut cmd,
                std::mem::size_of_val(&cmd),
                &mut resp,
                std::mem::size_of_val(&resp),
            )
        };
        // SAFETY: as above; the NIC's limits are the SRQ's.
        unsafe { (*attr).attr = limits };
        if rc != 0 {
            // SAFETY: srq is live and unused.
            unsafe { v::srq::destroy_srq(srq) };
            set_errno(rc);
            return std::ptr::null_mut();
        }
        mark(srq);
        if let Ok(s) = v::srq::Srq::from_ptr(srq) {
            // SAFETY: srq is live; its context is the library's.
            let ibdev = unsafe { crate::ibdev_name((*srq).context) };
            bind_events(&s.dev.device, Object::Srq(s.srqn), ibdev, resp.drv.id);
        }
        srq
    })
}

/// `destroy_srq`: the kernel's SRQ first.
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller's contract is the verbs'.
        let rc = unsafe { destroy_in_kernel(srq, ibv_cmd_destroy_srq) };
        if rc != 0 {
            return rc;
        }
        // SAFETY: the caller's contract is the verbs'.
        unsafe { v::srq::destroy_srq(srq) }
    })
}

//! An ID's QP: made by `rdma_create_qp` (with CQs and completion
//! channels when the consumer gives none), and moved through INIT, RTR
//! and RTS with what the CM exchange decided (`rdma_init_qp_attr`).

use crate::state::{IdState, Locked, Phase};
use crate::sys::*;
use std::os::raw::c_int;

/// The QP attributes for moving the QP of an ID in `s` to `state`, and
/// their mask (`rdma_init_qp_attr`).
pub fn attr_for(
    s: &IdState,
    qp_type: u32,
    state: u32,
    dgid: ibv_gid,
) -> Result<(ibv_qp_attr, c_int), i32> {
    // SAFETY: ibv_qp_attr is plain C data; all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = state;
    let ud = qp_type == IBV_QPT_UD;
    let mask = match state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            } else {
                a.qp_access_flags = access(s);
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTS if ud => {
            a.sq_psn = s.psn;
            IBV_QP_STATE | IBV_QP_SQ_PSN
        }
        IBV_QPS_RTR => {
            let r = s.remote.ok_or(libc::EINVAL)?;
            a.path_mtu = r.mtu;
            a.dest_qp_num = r.qpn;
            a.rq_psn = s.psn;
            a.qp_access_flags = access(s);
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid = dgid;
            a.ah_attr.grh.sgid_index = s.sgid_index;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = s.tos;
            let mut m = IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_ACCESS_FLAGS;
            if qp_type == IBV_QPT_RC {
                a.max_dest_rd_atomic = r.responder;
                a.min_rnr_timer = 12;
                m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            }
            m
        }
        IBV_QPS_RTS => {
            let r = s.remote.ok_or(libc::EINVAL)?;
            a.sq_psn = r.send_psn;
            let mut m = IBV_QP_STATE | IBV_QP_SQ_PSN;
            if qp_type == IBV_QPT_RC {
                a.timeout = s.ack_timeout.unwrap_or(14);
                a.retry_cnt = r.retry;
                a.rnr_retry = r.rnr_retry;
                a.max_rd_atomic = r.initiator;
                m |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            }
            m
        }
        _ => return Err(libc::EINVAL),
    };
    Ok((a, mask as c_int))
}

/// The remote access an RC or UC QP gets: RDMA WRITE always, READ and
/// atomics when it takes any (as Linux's CM sets them).
fn access(s: &IdState) -> u32 {
    let connected = !matches!(s.phase, Phase::Idle);
    match s.remote {
        Some(r) if connected && r.responder > 0 => {
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
        }
        Some(_) => IBV_ACCESS_REMOTE_WRITE,
        None => 0,
    }
}

/// Move the ID's QP to `state` with the attributes [`attr_for`] gives.
pub fn modify(st: &mut Locked, id: *mut rdma_cm_id, state: u32) -> Result<(), i32> {
    // SAFETY: id is live (looked up by the caller).
    let (qp, qp_type, dgid) = unsafe {
        let q = (*id).qp;
        (q, (*id).qp_type, (*id).route.addr.addr.ibaddr.dgid)
    };
    if qp.is_null() {
        return Ok(());
    }
    let s = st.id(id)?;
    let (mut a, mask) = attr_for(s, qp_type, state, dgid)?;
    // SAFETY: qp is the ID's live QP; a is a filled attribute set.
    match unsafe { ibv_modify_qp(qp, &mut a, mask) } {
        0 => Ok(()),
        e => Err(e.abs()),
    }
}

/// Move the ID's QP (if any) to ERR, as a disconnection does.
pub fn to_error(id: *mut rdma_cm_id) {
    // SAFETY: id is live (looked up by the caller); its QP is null or live.
    unsafe {
        let qp = (*id).qp;
        if qp.is_null() {
            return;
        }
        let mut a: ibv_qp_attr = std::mem::zeroed();
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(qp, &mut a, IBV_QP_STATE as c_int);
    }
}

/// `rdma_create_qp`: on the ID's device, with the device's PD when `pd`
/// is null; CQs with completion channels when the attributes name none;
/// the QP is left in INIT (UD: RTS).
pub fn create(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), i32> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: attr is readable and writable (the caller's contract).
    create_with(st, id, pd, unsafe { &mut *attr }, None)
}

/// `rdma_create_qp_ex`: as [`create`]; extended attributes beyond the PD
/// go to the context's `create_qp_ex`.
pub fn create_ex(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    ex: *mut ibv_qp_init_attr_ex,
) -> Result<(), i32> {
    if ex.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: ex is readable and writable (the caller's contract).
    let e = unsafe { &mut *ex };
    if e.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || e.pd.is_null() {
        // The ID's PD, as librdmacm gives.
        e.comp_mask |= IBV_QP_INIT_ATTR_PD;
        // SAFETY: id is read only once found live in the table.
        e.pd = match st.id(id) {
            Ok(_) => unsafe { (*id).pd },
            Err(e) => return Err(e),
        };
    }
    // SAFETY: ibv_qp_init_attr is plain C data; all-zero is valid.
    let mut plain: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    plain.qp_context = e.qp_context;
    plain.send_cq = e.send_cq;
    plain.recv_cq = e.recv_cq;
    plain.srq = e.srq;
    plain.cap = e.cap;
    plain.qp_type = e.qp_type;
    plain.sq_sig_all = e.sq_sig_all;
    let extended = e.comp_mask != IBV_QP_INIT_ATTR_PD;
    create_with(st, id, e.pd, &mut plain, extended.then_some(ex))?;
    e.send_cq = plain.send_cq;
    e.recv_cq = plain.recv_cq;
    e.srq = plain.srq;
    e.cap = plain.cap;
    Ok(())
}

/// Make the QP of `id` from `a` (with `ex` through the context's
/// `create_qp_ex` when given) and move it to INIT.
fn create_with(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    ex: Option<*mut ibv_qp_init_attr_ex>,
) -> Result<(), i32> {
    let dev = st.id(id)?.dev.ok_or(libc::EINVAL)?;
    let ctx = st.devs[dev].ctx as *mut ibv_context;
    // SAFETY: id is live; pd is null or a PD of the program (the
    // caller's contract); ex is null or readable and writable.
    unsafe {
        if !(*id).qp.is_null() {
            return Err(libc::EINVAL);
        }
        let pd = match pd.is_null() {
            true => crate::nic::default_pd(st, dev)?,
            false if (*pd).context != ctx => return Err(libc::EINVAL),
            false => pd,
        };
        if a.srq.is_null() {
            a.srq = (*id).srq;
        }
        let made_cqs = a.send_cq.is_null() || a.recv_cq.is_null();
        if made_cqs {
            make_cqs(id, ctx, a)?;
        }
        let qp = match ex {
            None => ibv_create_qp(pd, a),
            Some(ex) => {
                (*ex).pd = pd;
                (*ex).send_cq = a.send_cq;
                (*ex).recv_cq = a.recv_cq;
                (*ex).srq = a.srq;
                create_qp_ex(ctx, ex)
            }
        };
        if qp.is_null() {
            let e = crate::errno();
            if made_cqs {
                destroy_cqs(id);
            }
            return Err(e);
        }
        if let Some(ex) = ex {
            a.cap = (*ex).cap;
        }
        (*id).qp = qp;
        (*id).pd = pd;
        let s = st.id(id)?;
        s.own_cqs = made_cqs;
        let states: &[u32] = match (*id).qp_type {
            IBV_QPT_UD => &[IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS],
            _ => &[IBV_QPS_INIT],
        };
        for &state in states {
            if let Err(e) = modify(st, id, state) {
                destroy(st, id);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// `ibv_create_qp_ex` (an inline of verbs.h): the context's operation.
///
/// # Safety
/// `ctx` is an open context; `ex` is readable and writable.
unsafe fn create_qp_ex(ctx: *mut ibv_context, ex: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: every context of a libibverbs of this ABI is the last
    // member of a verbs_context, whose `sz` says which members exist.
    unsafe {
        let v = (ctx as *mut u8).sub(off) as *mut verbs_context;
        let has = (*v).sz
            >= std::mem::size_of::<verbs_context>()
                - std::mem::offset_of!(verbs_context, create_qp_ex);
        match (*v).create_qp_ex {
            Some(f) if has => f(ctx, ex),
            _ => {
                crate::set_errno(libc::EOPNOTSUPP);
                std::ptr::null_mut()
            }
        }
    }
}

/// Make the CQs (each with a completion channel) the attributes lack.
///
/// # Safety
/// `id` is live; `ctx` is its open device.
unsafe fn make_cqs(
    id: *mut rdma_cm_id,
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr,
) -> Result<(), i32> {
    // SAFETY: per the contract; the objects made are the ID's.
    unsafe {
        let cq_context: *mut std::ffi::c_void = id.cast();
        let make = move |depth: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
            let ch = ibv_create_comp_channel(ctx);
            if ch.is_null() {
                return Err(crate::errno());
            }
            let cq = ibv_create_cq(ctx, depth.max(1) as c_int, cq_context, ch, 0);
            if cq.is_null() {
                let e = crate::errno();
                ibv_destroy_comp_channel(ch);
                return Err(e);
            }
            Ok((ch, cq))
        };
        if a.recv_cq.is_null() {
            let (ch, cq) = make(a.cap.max_recv_wr)?;
            (*id).recv_cq_channel = ch;
            (*id).recv_cq = cq;
            a.recv_cq = cq;
        }
        if a.send_cq.is_null() {
            match make(a.cap.max_send_wr) {
                Ok((ch, cq)) => {
                    (*id).send_cq_channel = ch;
                    (*id).send_cq = cq;
                    a.send_cq = cq;
                }
                Err(e) => {
                    destroy_cqs(id);
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Destroy the CQs and completion channels this library made for `id`.
///
/// # Safety
/// `id` is live and its CQ fields are null or objects this library made.
unsafe fn destroy_cqs(id: *mut rdma_cm_id) {
    // SAFETY: per the contract.
    unsafe {
        for (cq, ch) in [
            (&mut (*id).send_cq, &mut (*id).send_cq_channel),
            (&mut (*id).recv_cq, &mut (*id).recv_cq_channel),
        ] {
            if !cq.is_null() {
                ibv_destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                ibv_destroy_comp_channel(*ch);
                *ch = std::ptr::null_mut();
            }
        }
    }
}

/// `rdma_destroy_qp`: the QP, and the CQs made for it.
pub fn destroy(st: &mut Locked, id: *mut rdma_cm_id) {
    take(st, id).destroy();
}

/// The QP of an ID and the CQs and channels made for it, taken off the
/// ID to be destroyed with the table unlocked ([`Taken::destroy`]):
/// destroying them waits for their events to be acknowledged, which may
/// take a call of this library.
pub struct Taken {
    qp: *mut ibv_qp,
    cqs: Vec<*mut ibv_cq>,
    channels: Vec<*mut ibv_comp_channel>,
}

/// Take the QP of `id`, and the CQs made for it, off the ID.
pub fn take(st: &mut Locked, id: *mut rdma_cm_id) -> Taken {
    let own_cqs = st
        .id(id)
        .map(|s| std::mem::take(&mut s.own_cqs))
        .unwrap_or(false);
    let mut t = Taken {
        qp: std::ptr::null_mut(),
        cqs: Vec::new(),
        channels: Vec::new(),
    };
    // SAFETY: id is live (looked up by the caller).
    unsafe {
        t.qp = std::mem::replace(&mut (*id).qp, std::ptr::null_mut());
        if own_cqs {
            for cq in [&mut (*id).send_cq, &mut (*id).recv_cq] {
                t.cqs.push(std::mem::replace(cq, std::ptr::null_mut()));
            }
            for ch in [&mut (*id).send_cq_channel, &mut (*id).recv_cq_channel] {
                t.channels.push(std::mem::replace(ch, std::ptr::null_mut()));
            }
        }
    }
    t
}

impl Taken {
    /// Destroy the QP, then its CQs, then their channels.
    pub fn destroy(self) {
        // SAFETY: objects taken off an ID, each destroyed once.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            for cq in self.cqs.into_iter().filter(|p| !p.is_null()) {
                ibv_destroy_cq(cq);
            }
            for ch in self.channels.into_iter().filter(|p| !p.is_null()) {
                ibv_destroy_comp_channel(ch);
            }
        }
    }
}

/// `rdma_create_srq`: an SRQ on the ID's device, kept as `id->srq` for
/// the QP made next.
pub fn create_srq(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> Result<(), i32> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let dev = st.id(id)?.dev.ok_or(libc::EINVAL)?;
    let pd = match pd.is_null() {
        true => crate::nic::default_pd(st, dev)?,
        false => pd,
    };
    // SAFETY: pd is a live PD; attr is readable and writable.
    let srq = unsafe { ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(crate::errno());
    }
    // SAFETY: id is live.
    unsafe {
        (*id).srq = srq;
        (*id).pd = pd;
    }
    st.id(id)?.own_srq = true;
    Ok(())
}

/// `rdma_destroy_srq`.
pub fn destroy_srq(st: &mut Locked, id: *mut rdma_cm_id) {
    // SAFETY: id is live (looked up by the caller).
    unsafe {
        let srq = (*id).srq;
        if !srq.is_null() {
            ibv_destroy_srq(srq);
            (*id).srq = std::ptr::null_mut();
        }
    }
    if let Ok(s) = st.id(id) {
        s.own_srq = false;
    }
}

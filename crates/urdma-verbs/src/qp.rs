//! Queue pairs: creation (`ibv_create_qp`, `ibv_create_qp_ex`), the
//! attribute conversions of `ibv_modify_qp`/`ibv_query_qp`, destruction.

use crate::context::Context;
use crate::cq::Cq;
use crate::device::DevShared;
use crate::events::Target;
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::qpex::{self, WrBatch};
use crate::srq::Srq;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_ptr, EventAcks, VResult};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use urdma::engine::command::{CreateQp, DestroyQp, ModifyQp};
use urdma::{AccessFlags, AddressVector, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType};

/// `enum verbs_qp_mask`: the QP has the extended view.
const VERBS_QP_EX: u32 = 1 << 1;

/// A queue pair; the C view is an `ibv_qp_ex`, whose head is the `ibv_qp`.
#[repr(C)]
pub struct Qp {
    /// The C view; must stay the first field.
    pub ibv: ibv_qp_ex,
    /// The rest of rdma-core's provider-side `struct verbs_qp`, whose
    /// `ibv_qp_to_qp_ex` (in the system library, under a provider) reads
    /// this mask: `VERBS_QP_EX` for an extended QP.
    pub verbs_comp_mask: u32,
    /// `verbs_qp::xrcd` (no XRC: NULL).
    pub verbs_xrcd: *mut std::ffi::c_void,
    /// The device.
    pub dev: Arc<DevShared>,
    /// Engine QP number.
    pub qpn: u32,
    /// Transport.
    pub qp_type: QpType,
    /// Queue capacities granted.
    pub cap: QpCap,
    /// Every send WR completes (sq_sig_all).
    pub sq_sig_all: bool,
    /// Q_Key set by modify_qp (UD sends with a "use the QP's key" Q_Key).
    pub qkey: AtomicU32,
    /// `send_ops_flags` of an extended QP (0: created without them).
    pub send_ops: u64,
    /// Work requests being built with the `ibv_wr_*` calls.
    pub batch: Mutex<WrBatch>,
    /// Asynchronous events handed out and acknowledged.
    pub acks: EventAcks,
}

// SAFETY: raw pointers in the C view are handles used as identities or
// checked through the registry; mutable state is behind locks/atomics.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// Look up a live QP from an `ibv_qp *` or `ibv_qp_ex *`.
    pub fn from_ptr<'a, T>(p: *const T) -> VResult<&'a Qp> {
        if !handles::is_live(p, Kind::Qp) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered QPs are live boxed Qps; ibv is the first field.
        Ok(unsafe { &*(p as *const Qp) })
    }

    /// The `ibv_qp *`.
    pub fn ibv_qp(&self) -> *mut ibv_qp {
        &self.ibv.qp_base as *const ibv_qp as *mut ibv_qp
    }

    /// One asynchronous event acknowledged.
    pub fn ack_event(&self) {
        let n = self.acks.acked(1);
        // SAFETY: the QP is live; events_completed is a plain field.
        unsafe { (*self.ibv_qp()).events_completed = n as u32 };
    }
}

/// What creating a QP takes, from either creation call.
struct NewQp {
    pd: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: ibv_qp_cap,
    qp_type: ibv_qp_type,
    sq_sig_all: c_int,
    send_ops: u64,
}

fn qp_type(t: ibv_qp_type) -> VResult<QpType> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        IBV_QPT_RAW_PACKET | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV | IBV_QPT_DRIVER => {
            Err(libc::EOPNOTSUPP)
        }
        _ => Err(libc::EINVAL),
    }
}

fn create(n: NewQp) -> VResult<(*mut ibv_qp, ibv_qp_cap)> {
    let pd = Pd::from_ptr(n.pd)?;
    let ctx = Context::from_ptr(pd.ibv.context)?;
    let t = qp_type(n.qp_type)?;
    let scq = Cq::from_ptr(n.send_cq)?;
    let rcq = Cq::from_ptr(n.recv_cq)?;
    ensure(
        scq.ibv.context == pd.ibv.context && rcq.ibv.context == pd.ibv.context,
        libc::EINVAL,
    )?;
    let srq = if n.srq.is_null() {
        None
    } else {
        Some(Srq::from_ptr(n.srq)?)
    };
    let mut cap = QpCap {
        max_send_wr: n.cap.max_send_wr,
        max_recv_wr: n.cap.max_recv_wr,
        max_send_sge: n.cap.max_send_sge.max(1),
        max_recv_sge: n.cap.max_recv_sge.max(1),
        // As RDMA devices do, a send queue takes inline at least the
        // bytes its SGEs would describe (16 per SGE).
        max_inline_data: n
            .cap
            .max_inline_data
            .max((n.cap.max_send_sge.max(1).saturating_mul(16)).min(pd.dev.attr.max_inline_data)),
    };
    if srq.is_some() {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    let (pdn, sig) = (pd.pdn, n.sq_sig_all != 0);
    let (s, r) = (scq.cq.shared().clone(), rcq.cq.shared().clone());
    let qpn = pd
        .dev
        .device
        .call(CreateQp {
            pd: pdn,
            qp_type: t,
            cap,
            sq_sig_all: sig,
            send_cq: s,
            recv_cq: r,
            srq: srq.map(|q| q.srqn),
        })
        .map_err(|e| e.errno())?;
    // SAFETY: plain C data (pointers, integers, Option<fn>); zero is valid.
    let mut ibv: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut ibv.qp_base;
    b.context = pd.ibv.context;
    b.qp_context = n.qp_context;
    b.pd = n.pd;
    b.send_cq = n.send_cq;
    b.recv_cq = n.recv_cq;
    b.srq = n.srq;
    b.handle = qpn;
    b.qp_num = qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = n.qp_type;
    if n.send_ops != 0 {
        qpex::set_ops(&mut ibv);
    }
    let q = Box::into_raw(Box::new(Qp {
        ibv,
        verbs_comp_mask: if n.send_ops != 0 { VERBS_QP_EX } else { 0 },
        verbs_xrcd: std::ptr::null_mut(),
        dev: pd.dev.clone(),
        qpn,
        qp_type: t,
        cap,
        sq_sig_all: sig,
        qkey: AtomicU32::new(0),
        send_ops: n.send_ops,
        batch: Mutex::new(WrBatch::default()),
        acks: EventAcks::default(),
    }));
    // SAFETY: q is the Box just leaked; its mutex/cond are initialised
    // once at stable addresses before publication.
    unsafe {
        libc::pthread_mutex_init(
            std::ptr::addr_of_mut!((*q).ibv.qp_base.mutex).cast(),
            std::ptr::null(),
        );
        libc::pthread_cond_init(
            std::ptr::addr_of_mut!((*q).ibv.qp_base.cond).cast(),
            std::ptr::null(),
        );
    }
    let p = q as *mut ibv_qp;
    pd.dev
        .routes
        .add(Target::Qp, qpn, ctx.events.clone(), p as usize);
    handles::register(p, Kind::Qp);
    crate::pd::hold(n.pd);
    let granted = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    Ok((p, granted))
}

/// `ibv_create_qp`; the capacities granted are written back to
/// `init_attr->cap`.
pub unsafe extern "C" fn create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            ensure(!init_attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &mut *init_attr };
            let (p, cap) = create(NewQp {
                pd,
                qp_context: a.qp_context,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                cap: a.cap,
                qp_type: a.qp_type,
                sq_sig_all: a.sq_sig_all,
                send_ops: 0,
            })?;
            a.cap = cap;
            Ok(p)
        })())
    })
}

/// `send_ops_flags` the `ibv_wr_*` interface implements.
const SEND_OPS_SUPPORTED: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | CONNECTED_OPS as u32) as u64;

/// `send_ops_flags` only RC and UC QPs take.
const CONNECTED_OPS: u64 =
    (IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV) as u64;

/// `verbs_context::create_qp_ex` (the inline `ibv_create_qp_ex`).
pub unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            Context::from_ptr(context)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &mut *attr };
            let known = IBV_QP_INIT_ATTR_PD
                | IBV_QP_INIT_ATTR_CREATE_FLAGS
                | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            ensure(a.comp_mask & IBV_QP_INIT_ATTR_PD != 0, libc::EINVAL)?;
            ensure(a.comp_mask & !known == 0, libc::EOPNOTSUPP)?;
            if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
                ensure(a.create_flags == 0, libc::EOPNOTSUPP)?;
            }
            let mut send_ops = 0;
            if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
                ensure(a.send_ops_flags != 0, libc::EINVAL)?;
                ensure(
                    a.send_ops_flags & !SEND_OPS_SUPPORTED == 0,
                    libc::EOPNOTSUPP,
                )?;
                // Binds and invalidations are for connected QPs.
                ensure(
                    a.qp_type != IBV_QPT_UD || a.send_ops_flags & CONNECTED_OPS == 0,
                    libc::EOPNOTSUPP,
                )?;
                send_ops = a.send_ops_flags;
            }
            ensure(Pd::from_ptr(a.pd)?.ibv.context == context, libc::EINVAL)?;
            let (p, cap) = create(NewQp {
                pd: a.pd,
                qp_context: a.qp_context,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                cap: a.cap,
                qp_type: a.qp_type,
                sq_sig_all: a.sq_sig_all,
                send_ops,
            })?;
            a.cap = cap;
            Ok(p)
        })())
    })
}

/// `ibv_qp_to_qp_ex`: the extended view of a QP created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, else NULL.
pub unsafe extern "C" fn qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard(std::ptr::null_mut(), || match Qp::from_ptr(qp) {
        Ok(q) if q.send_ops != 0 => qp as *mut ibv_qp_ex,
        Ok(_) => std::ptr::null_mut(),
        Err(e) => {
            crate::util::set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// The address vector of a verbs `ah_attr` (RoCE: the GRH is required).
pub fn av_from(ah: &ibv_ah_attr, dev: &DevShared) -> VResult<AddressVector> {
    ensure(ah.is_global != 0, libc::EINVAL)?;
    ensure(ah.port_num == 1, libc::EINVAL)?;
    let sgid_index = dev.gids.engine_index(ah.grh.sgid_index)?;
    // SAFETY: every bit pattern of the GID union is a valid byte array.
    let dgid = Gid(unsafe { ah.grh.dgid.raw });
    ensure(!dgid.is_zero(), libc::EINVAL)?;
    // The source GID is of the destination's family.
    let sgid = dev
        .gids
        .gid(u32::from(ah.grh.sgid_index))
        .ok_or(libc::EINVAL)?;
    ensure(
        dgid.to_ip().is_ipv4() == sgid.to_ip().is_ipv4(),
        libc::EINVAL,
    )?;
    Ok(AddressVector {
        dgid,
        sgid_index,
        hop_limit: ah.grh.hop_limit,
        traffic_class: ah.grh.traffic_class,
        flow_label: ah.grh.flow_label,
        sl: ah.sl,
        port_num: ah.port_num,
        udp_port: dev.udp_port(),
    })
}

/// The verbs `ah_attr` of an address vector (the source GID index in
/// `dev`'s table).
pub fn av_to(av: &AddressVector, dev: &DevShared) -> ibv_ah_attr {
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.grh.dgid.raw = av.dgid.0;
    a.grh.flow_label = av.flow_label;
    a.grh.sgid_index = dev.gids.table_index(av.sgid_index);
    a.grh.hop_limit = av.hop_limit;
    a.grh.traffic_class = av.traffic_class;
    a.sl = av.sl;
    a.is_global = u8::from(!av.dgid.is_zero());
    a.port_num = av.port_num;
    a
}

/// Mask bits `ibv_modify_qp` knows (IBV_QP_STATE .. IBV_QP_DEST_QPN, and
/// IBV_QP_RATE_LIMIT).
const MASK_KNOWN: c_int = ((1 << 21) - 1) | IBV_QP_RATE_LIMIT as c_int;

/// Convert a modify_qp request to the engine's attributes.
fn attr_from(a: &ibv_qp_attr, mask: c_int, dev: &DevShared) -> VResult<(QpAttr, QpAttrMask)> {
    ensure(mask & !MASK_KNOWN == 0, libc::EINVAL)?;
    let m = QpAttrMask::from_bits_truncate(mask as u32);
    ensure(!m.contains(QpAttrMask::ALT_PATH), libc::EOPNOTSUPP)?;
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        ensure(a.path_mig_state == IBV_MIG_MIGRATED, libc::EOPNOTSUPP)?;
    }
    let mut o = QpAttr::default();
    let state = |v| QpState::from_raw(v).ok_or(libc::EINVAL);
    if m.contains(QpAttrMask::STATE) {
        o.qp_state = state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        o.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        o.path_mtu = Mtu::from_raw(a.path_mtu).ok_or(libc::EINVAL)?;
        ensure(o.path_mtu <= dev.port.max_mtu, libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::ACCESS_FLAGS) {
        let bits = a.qp_access_flags & !(IBV_ACCESS_MW_BIND | IB_UVERBS_ACCESS_OPTIONAL_RANGE);
        o.qp_access_flags = AccessFlags::from_bits(bits).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::AV) {
        o.ah_attr = av_from(&a.ah_attr, dev)?;
    }
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.pkey_index = a.pkey_index;
    o.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.min_rnr_timer = a.min_rnr_timer;
    o.port_num = a.port_num;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    Ok((o, m))
}

/// `ibv_modify_qp`: 0 or an errno.
pub unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Qp::from_ptr(qp)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &*attr };
            let (o, m) = attr_from(a, attr_mask, &q.dev)?;
            let qpn = q.qpn;
            q.dev
                .device
                .call(ModifyQp {
                    qpn,
                    attr: o,
                    mask: m,
                })
                .map_err(|e| e.errno())?;
            if m.contains(QpAttrMask::QKEY) {
                q.qkey.store(a.qkey, Ordering::Release);
            }
            if m.contains(QpAttrMask::STATE) {
                // SAFETY: the QP is live; state is a plain field.
                unsafe { (*qp).state = a.qp_state };
                if a.qp_state == IBV_QPS_RESET {
                    // Its completions still waiting go with its work.
                    // SAFETY: the QP is live; its CQ pointers are its own.
                    let (s, r) = unsafe { ((*qp).send_cq, (*qp).recv_cq) };
                    for cq in [s, r] {
                        if let Ok(c) = crate::cq::Cq::from_ptr(cq) {
                            c.cq.shared().discard_qp(qpn);
                        }
                    }
                }
            }
            Ok(())
        })())
    })
}

/// `ibv_query_qp`: every attribute is reported, whatever the mask.
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Qp::from_ptr(qp)?;
            ensure(!attr.is_null() && !init_attr.is_null(), libc::EINVAL)?;
            // The mask only says what the caller needs: every attribute is
            // returned, whatever bits it holds (as the kernel's query does).
            let _ = attr_mask;
            let qpn = q.qpn;
            let s = q
                .dev
                .device
                .call(urdma::engine::command::QueryQp { qpn })
                .map_err(|e| e.errno())?;
            // SAFETY: plain C data; zero is valid.
            let mut o: ibv_qp_attr = unsafe { std::mem::zeroed() };
            o.qp_state = s.qp_state as ibv_qp_state;
            o.cur_qp_state = s.cur_qp_state as ibv_qp_state;
            o.path_mtu = s.path_mtu as ibv_mtu;
            o.path_mig_state = IBV_MIG_MIGRATED;
            o.qkey = s.qkey;
            o.rq_psn = s.rq_psn;
            o.sq_psn = s.sq_psn;
            o.dest_qp_num = s.dest_qp_num;
            o.qp_access_flags = s.qp_access_flags.bits();
            let cap = ibv_qp_cap {
                max_send_wr: q.cap.max_send_wr,
                max_recv_wr: q.cap.max_recv_wr,
                max_send_sge: q.cap.max_send_sge,
                max_recv_sge: q.cap.max_recv_sge,
                max_inline_data: q.cap.max_inline_data,
            };
            o.cap = cap;
            o.ah_attr = av_to(&s.ah_attr, &q.dev);
            o.pkey_index = s.pkey_index;
            o.en_sqd_async_notify = u8::from(s.en_sqd_async_notify);
            o.sq_draining = u8::from(s.sq_draining);
            o.max_rd_atomic = s.max_rd_atomic;
            o.max_dest_rd_atomic = s.max_dest_rd_atomic;
            o.min_rnr_timer = s.min_rnr_timer;
            o.port_num = s.port_num;
            o.timeout = s.timeout;
            o.retry_cnt = s.retry_cnt;
            o.rnr_retry = s.rnr_retry;
            let b = &q.ibv.qp_base;
            let i = ibv_qp_init_attr {
                qp_context: b.qp_context,
                send_cq: b.send_cq,
                recv_cq: b.recv_cq,
                srq: b.srq,
                cap,
                qp_type: b.qp_type,
                sq_sig_all: c_int::from(q.sq_sig_all),
            };
            // SAFETY: both pointers are non-NULL pointers to the caller's
            // structs; qp is live.
            unsafe {
                *attr = o;
                *init_attr = i;
                (*qp).state = o.qp_state;
            }
            Ok(())
        })())
    })
}

/// `ibv_destroy_qp`: waits until its events were acknowledged; its queued
/// work is dropped without completions, and the completions it left in
/// its CQs are removed.
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Qp::from_ptr(qp)?;
            q.acks.wait_all_acked();
            let qpn = q.qpn;
            q.dev
                .device
                .call(DestroyQp { qpn })
                .map_err(|e| e.errno())?;
            q.dev.routes.remove(Target::Qp, qpn);
            // Its completions still waiting go with it, as hardware
            // drivers clean their CQs of a destroyed QP's: a consumer
            // that accounts for its work itself once the QP is gone
            // (libfabric's verbs provider) would see them twice.
            // SAFETY: the QP is live until freed below; its CQ pointers
            // are its own.
            let (s, r) = unsafe { ((*qp).send_cq, (*qp).recv_cq) };
            for cq in [s, r] {
                if let Ok(c) = crate::cq::Cq::from_ptr(cq) {
                    c.cq.shared().discard_qp(qpn);
                }
            }
            let pd = q.ibv.qp_base.pd;
            if !handles::unregister(qp, Kind::Qp) {
                return Err(libc::EINVAL);
            }
            crate::pd::release(pd);
            let b = qp as *mut Qp;
            // SAFETY: b was a registered boxed Qp, now unregistered.
            unsafe {
                libc::pthread_mutex_destroy(std::ptr::addr_of_mut!((*b).ibv.qp_base.mutex).cast());
                libc::pthread_cond_destroy(std::ptr::addr_of_mut!((*b).ibv.qp_base.cond).cast());
                drop(Box::from_raw(b));
            }
            Ok(())
        })())
    })
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn qp_is_laid_out_as_verbs_qp() {
        // struct verbs_qp { union { ibv_qp; ibv_qp_ex; }; u32 comp_mask; verbs_xrcd *xrcd; }
        let ex = std::mem::size_of::<ibv_qp_ex>();
        assert_eq!(std::mem::offset_of!(Qp, verbs_comp_mask), ex);
        assert_eq!(std::mem::offset_of!(Qp, verbs_xrcd), ex + 8);
    }
}

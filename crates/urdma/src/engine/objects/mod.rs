//! The engine's command interface: creating, modifying and destroying
//! PDs, MRs and QPs, and posting work requests. Every call validates its
//! input against IB semantics and the device limits.

mod attr;

use super::command::CreateQp;
use super::qp::QpCtx;
use super::wqe::{Payload, RecvWqe, SendOp, SendWqe, UdDest};
use super::{psn, requester, Ctx, Engine};
use crate::error::{Error, Result};
use crate::mem::MemRegion;
use crate::mr::{self, LocalSge, MrCheckError, MrEntry, MrTable, SgeList};
use crate::types::{
    AccessFlags, QpAttrMask as M, QpState, QpType, WcOpcode, WcStatus, WorkCompletion,
};
use crate::verbs::modify::check_transition;
use crate::verbs::QpAttr;
use std::sync::Arc;
use urdma_wire::QPN_MASK;

/// One scatter/gather element as a verbs caller gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SgEntry {
    /// Virtual address (in the MR's IOVA space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// Data of a send request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SendData {
    /// Gather list of registered memory.
    Sges(Vec<SgEntry>),
    /// Inline bytes (copied at post time).
    Inline(Vec<u8>),
}

/// A send work request (`ibv_send_wr`) as the engine takes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendRequest {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub data: SendData,
    /// Remote VA (WRITE, READ, atomics).
    pub remote_va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Generate a completion.
    pub signaled: bool,
    /// Solicited event.
    pub solicited: bool,
    /// Destination of a UD send.
    pub ud: Option<UdDest>,
    /// Start only once every READ and atomic posted before it has
    /// completed (`IBV_SEND_FENCE`).
    pub fence: bool,
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecvRequest {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: Vec<SgEntry>,
}

/// Top byte of the keys of kernel MRs (`URDMA_KERNEL_KEY_TAG`): the
/// engine never gives its own regions such keys.
pub const KERNEL_KEY_TAG: u32 = 0xfe;

/// True for a key of the kernel's key space.
pub fn is_kernel_key(key: u32) -> bool {
    key >> 24 == KERNEL_KEY_TAG
}

/// Largest message (2^31 bytes, as IBTA allows).
pub const MAX_MSG_SIZE: usize = 1 << 31;

impl Engine {
    /// Allocate a protection domain.
    pub(crate) fn alloc_pd(&mut self) -> Result<u32> {
        if self.pds.len() >= self.attr.max_pd as usize {
            return Err(Error::Exhausted("protection domains".into()));
        }
        let pd = self.next_pd;
        self.next_pd = self.next_pd.wrapping_add(1).max(1);
        self.pds.insert(pd);
        Ok(pd)
    }

    /// Free a protection domain with no MR or QP left in it.
    pub(crate) fn dealloc_pd(&mut self, pd: u32) -> Result<()> {
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if self.mrs.values().any(|m| m.pd == pd)
            || self.qps.values().any(|q| q.pd == pd)
            || self.mws.values().any(|w| w.pd == pd)
        {
            return Err(Error::Busy(format!("pd {pd} still has MRs, MWs or QPs")));
        }
        self.pds.remove(&pd);
        Ok(())
    }

    /// Register `mem` in `pd`, visible at `iova`, with a fresh unpredictable
    /// key, or (`rekey`) under the key of an MR it replaces: the old region
    /// is out of reach at once, as after a deregistration.
    pub(crate) fn reg_mr(
        &mut self,
        pd: u32,
        access: AccessFlags,
        iova: u64,
        mem: MemRegion,
        rekey: Option<u32>,
    ) -> Result<Arc<MrEntry>> {
        use rand::Rng;
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::inval(
                "remote write or atomic access requires local write",
            ));
        }
        if mem.len() as u64 > self.attr.max_mr_size {
            return Err(Error::inval("region larger than max_mr_size"));
        }
        if iova.checked_add(mem.len() as u64).is_none() {
            return Err(Error::inval("iova + length overflows"));
        }
        if let Some(key) = rekey {
            if is_kernel_key(key) || !self.mrs.contains_key(&key) {
                return Err(Error::NotFound(format!("mr key {key:#x}")));
            }
            if self.mr_has_windows(key) {
                return Err(Error::Busy(format!(
                    "mr key {key:#x} has memory windows bound"
                )));
            }
            let entry = Arc::new(MrEntry::new(key, pd, access, iova, mem));
            if let Some(old) = self.mrs.insert(key, entry.clone()) {
                old.mem.invalidate();
            }
            return Ok(entry);
        }
        if self.mrs.len() >= self.attr.max_mr as usize {
            return Err(Error::Exhausted("memory regions".into()));
        }
        let key = loop {
            let k: u32 = self.rng.gen();
            if k != 0
                && !is_kernel_key(k)
                && !self.mrs.contains_key(&k)
                && !self.mws.contains_key(&super::mw::index_of(k))
            {
                break k;
            }
        };
        let entry = Arc::new(MrEntry::new(key, pd, access, iova, mem));
        self.mrs.insert(key, entry.clone());
        Ok(entry)
    }

    /// Register a kernel MR under the key the kernel gave it (one with
    /// [`KERNEL_KEY_TAG`] as its top byte), replacing any region under that
    /// key. `invalidatable`: a peer's SEND with invalidate may end it.
    pub fn insert_kernel_mr(
        &mut self,
        key: u32,
        pd: u32,
        access: AccessFlags,
        iova: u64,
        mem: MemRegion,
        invalidatable: bool,
    ) -> Result<Arc<MrEntry>> {
        if !is_kernel_key(key) {
            return Err(Error::inval(format!("{key:#x} is not a kernel key")));
        }
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if iova.checked_add(mem.len() as u64).is_none() && mem.len() != usize::MAX {
            return Err(Error::inval("iova + length overflows"));
        }
        let mut entry = MrEntry::new(key, pd, access, iova, mem);
        entry.invalidatable = invalidatable;
        let entry = Arc::new(entry);
        if let Some(old) = self.mrs.insert(key, entry.clone()) {
            old.mem.invalidate();
        }
        Ok(entry)
    }

    /// Deregister an MR. Its memory is out of reach at once: work that
    /// still names it (a posted receive, a send in flight, a peer's
    /// request) fails with a protection error instead of touching it.
    pub(crate) fn dereg_mr(&mut self, key: u32) -> Result<Arc<MrEntry>> {
        if self.mr_has_windows(key) {
            return Err(Error::Busy(format!(
                "mr key {key:#x} has memory windows bound"
            )));
        }
        let entry = self
            .mrs
            .remove(&key)
            .ok_or_else(|| Error::NotFound(format!("mr key {key:#x}")))?;
        entry.mem.invalidate();
        Ok(entry)
    }

    /// Create a QP in the RESET state, taking its receives from an SRQ
    /// (of the same PD) if `c.srq` names one.
    pub(crate) fn create_qp(&mut self, c: CreateQp) -> Result<u32> {
        let CreateQp {
            pd,
            qp_type,
            cap,
            sq_sig_all,
            send_cq,
            recv_cq,
            srq,
        } = c;
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if let Some(srqn) = srq {
            match self.srqs.get(&srqn) {
                Some(s) if s.pd == pd => {}
                Some(_) => return Err(Error::inval("SRQ of another protection domain")),
                None => return Err(Error::NotFound(format!("srq {srqn}"))),
            }
        }
        let a = &self.attr;
        if cap.max_send_wr > a.max_qp_wr || cap.max_recv_wr > a.max_qp_wr {
            return Err(Error::inval(format!(
                "queue depth above max_qp_wr {}",
                a.max_qp_wr
            )));
        }
        if cap.max_send_sge > a.max_sge || cap.max_recv_sge > a.max_sge {
            return Err(Error::inval(format!(
                "SGE count above max_sge {}",
                a.max_sge
            )));
        }
        if cap.max_inline_data > a.max_inline_data {
            return Err(Error::inval(format!(
                "inline size above {}",
                a.max_inline_data
            )));
        }
        if self.qps.len() >= a.max_qp as usize {
            return Err(Error::Exhausted("queue pairs".into()));
        }
        let qpn = loop {
            let n = self.next_qpn;
            self.next_qpn = if n >= QPN_MASK { 0x100 } else { n + 1 };
            if !self.qps.contains_key(&n) {
                break n;
            }
        };
        let mut qp = QpCtx::new(qpn, qp_type, pd, cap, sq_sig_all, send_cq, recv_cq);
        qp.srq = srq;
        qp.set_port_mtu(self.attr.port_mtu);
        qp.timers.attach(&self.timer_index, qpn);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// Destroy a QP; its queued work is dropped without completions.
    pub(crate) fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or_else(|| Error::NotFound(format!("qp {qpn}")))?;
        super::device_window::forget(&qp, &mut self.device_inflight);
        // The type 2 windows bound through it are reached through nothing.
        super::mw::forget_qp(&mut self.mws, qpn);
        Ok(())
    }

    /// True if some QP uses the CQ.
    pub(crate) fn cq_in_use(&self, cqn: u32) -> bool {
        self.qps
            .values()
            .any(|q| q.send_cq.cqn == cqn || q.recv_cq.cqn == cqn)
    }

    /// Current attributes of a QP.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| Error::NotFound(format!("qp {qpn}")))?;
        let mut a = qp.attr;
        a.cur_qp_state = a.qp_state;
        a.sq_psn = qp.req.tail_psn;
        a.rq_psn = qp.resp.epsn;
        a.sq_draining = a.qp_state == QpState::Sqd && !qp.req.sq.is_empty();
        Ok(a)
    }

    /// Modify a QP (`ibv_modify_qp`): validate the transition, mask and
    /// values, then apply them.
    pub(crate) fn modify_qp(&mut self, now: u64, qpn: u32, attr: &QpAttr, mask: M) -> Result<()> {
        let dev = self.attr.clone();
        let local = self.local;
        let internal_peer = self.internal_peer.clone();
        let (qp, mut cx) = self.qp_and_ctx(now, qpn)?;
        let cur = qp.state();
        let to = check_transition(qp.qp_type, cur, mask, attr.qp_state, attr.cur_qp_state)?;
        attr::validate_values(attr, mask, &dev, local)?;
        if mask.contains(M::CAP) {
            return Err(Error::inval("resizing QP queues is not supported"));
        }
        attr::apply(qp, attr, mask);
        match to {
            QpState::Reset => qp.reset(),
            QpState::Err => {
                qp.enter_error(&mut cx, None);
            }
            QpState::Rtr if cur == QpState::Init => {
                qp.internal = matches!(qp.qp_type, QpType::Rc | QpType::Uc)
                    && qp
                        .remote
                        .zip(internal_peer)
                        .is_some_and(|(peer, test)| test(peer));
                qp.attr.qp_state = QpState::Rtr;
                qp.resp.epsn = qp.attr.rq_psn;
                qp.resp.nak_sent = false;
            }
            QpState::Rts if cur == QpState::Rtr => {
                qp.attr.qp_state = QpState::Rts;
                qp.req.tail_psn = qp.attr.sq_psn;
                qp.req.una = qp.attr.sq_psn;
                qp.req.high_psn = qp.attr.sq_psn;
                qp.req.retry_left = qp.attr.retry_cnt;
                qp.req.rnr_left = qp.attr.rnr_retry;
            }
            QpState::Sqd => {
                qp.attr.qp_state = QpState::Sqd;
                qp.req.drained_reported = false;
            }
            s => qp.attr.qp_state = s,
        }
        requester::pump(qp, &mut cx);
        Ok(())
    }

    /// Post a send work request.
    pub(crate) fn post_send(&mut self, now: u64, qpn: u32, wr: SendRequest) -> Result<()> {
        let (qp, mut cx) = self.qp_and_ctx(now, qpn)?;
        let state = qp.state();
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(Error::WrongState(state));
        }
        if let Some(wc) = enqueue_send(qp, &mut cx, wr)? {
            qp.push_wc(&mut cx, wc, false, false);
        }
        requester::pump(qp, &mut cx);
        Ok(())
    }

    /// Post a receive work request.
    pub(crate) fn post_recv(&mut self, now: u64, qpn: u32, wr: RecvRequest) -> Result<()> {
        let (qp, mut cx) = self.qp_and_ctx(now, qpn)?;
        if qp.state() == QpState::Reset {
            return Err(Error::WrongState(QpState::Reset));
        }
        if qp.rq.len() >= qp.cap.max_recv_wr as usize {
            return Err(Error::Exhausted("receive queue full".into()));
        }
        let wqe = build_recv_wqe(qp.cap.max_recv_sge, qp.pd, cx.mrs, wr)?;
        if qp.state() == QpState::Err {
            let wc = WorkCompletion::new(wqe.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qpn);
            drop(wqe);
            qp.push_wc(&mut cx, wc, true, false);
            return Ok(());
        }
        qp.rq.push_back(wqe);
        Ok(())
    }
}

/// Check a send request and queue it on `qp`. Does not transmit. In the
/// ERR state the request is not queued: Ok(Some) is its flush completion,
/// for the caller to deliver.
pub(crate) fn enqueue_send(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wr: SendRequest,
) -> Result<Option<WorkCompletion>> {
    if qp.req.sq.len() + qp.req.held.len() >= qp.cap.max_send_wr as usize {
        return Err(Error::Exhausted("send queue full".into()));
    }
    if super::local_ops::must_hold(qp, &wr) {
        if qp.state() == QpState::Err {
            let wc = WorkCompletion::new(wr.wr_id, WcStatus::WrFlushErr, wr.op.wc_opcode(), qp.qpn);
            return Ok(Some(wc));
        }
        qp.req.held.push_back(wr);
        super::local_ops::run_held(qp, cx);
        return Ok(None);
    }
    queue_send(qp, cx, wr)
}

/// [`enqueue_send`] of a request nothing holds back.
pub(crate) fn queue_send(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wr: SendRequest,
) -> Result<Option<WorkCompletion>> {
    if qp.req.sq.len() >= qp.cap.max_send_wr as usize {
        return Err(Error::Exhausted("send queue full".into()));
    }
    let mut wqe = build_send_wqe(qp, cx.mrs, wr)?;
    if qp.state() == QpState::Err {
        let wc = WorkCompletion::new(wqe.wr_id, WcStatus::WrFlushErr, wqe.op.wc_opcode(), qp.qpn);
        // The local buffers are released before the completion is seen.
        drop(wqe);
        return Ok(Some(wc));
    }
    if qp.qp_type != QpType::Ud {
        wqe.first_psn = qp.req.tail_psn;
        qp.req.tail_psn = psn::add(qp.req.tail_psn, wqe.npsn);
    }
    qp.req.sq.push_back(wqe);
    Ok(None)
}

/// Queue a send request the NIC refused as a WQE that fails in order:
/// when it reaches the head of the SQ it completes with `status` and the
/// QP enters ERR, as a NIC reports a bad WQE it fetched.
pub(crate) fn enqueue_failed(qp: &mut QpCtx, wr_id: u64, op: SendOp, status: WcStatus) {
    let mut wqe = SendWqe {
        wr_id,
        op,
        payload: Payload::Sges(SgeList::new()),
        len: 0,
        remote_va: 0,
        rkey: 0,
        signaled: true,
        solicited: false,
        ud: None,
        first_psn: 0,
        npsn: 1,
        local_error: Some(status),
        fence: false,
    };
    if qp.qp_type != QpType::Ud {
        wqe.first_psn = qp.req.tail_psn;
        qp.req.tail_psn = psn::add(qp.req.tail_psn, wqe.npsn);
    }
    qp.req.sq.push_back(wqe);
}

/// A receive request the engine refused: the error a poster sees, and
/// the completion status a NIC that fetched the request reports.
#[derive(Debug)]
pub(crate) struct RecvRefused {
    /// What was wrong.
    pub error: Error,
    /// LOC_PROT_ERR for a buffer outside the PD's MRs, LOC_QP_OP_ERR for
    /// a request beyond the queue's limits.
    pub status: WcStatus,
}

impl From<RecvRefused> for Error {
    fn from(r: RecvRefused) -> Self {
        r.error
    }
}

/// Check a receive request against a queue's limits and resolve its
/// buffers in `pd`.
pub(crate) fn build_recv_wqe(
    max_sge: u32,
    pd: u32,
    mrs: &MrTable,
    wr: RecvRequest,
) -> std::result::Result<RecvWqe, RecvRefused> {
    check_recv_sges(&wr, max_sge).map_err(|error| RecvRefused {
        error,
        status: WcStatus::LocQpOpErr,
    })?;
    let sges =
        resolve_sges(mrs, pd, &wr.sges, AccessFlags::LOCAL_WRITE).map_err(|e| RecvRefused {
            error: Error::inval(format!("receive buffer: {e}")),
            status: WcStatus::LocProtErr,
        })?;
    let len = crate::mr::total_len(&sges);
    Ok(RecvWqe {
        wr_id: wr.wr_id,
        sges,
        len,
    })
}

/// Resolve a caller's SGEs against the MR table.
pub(super) fn resolve_sges(
    mrs: &MrTable,
    pd: u32,
    sges: &[SgEntry],
    need: AccessFlags,
) -> std::result::Result<SgeList, String> {
    let mut out = SgeList::with_capacity(sges.len());
    for s in sges {
        if s.length == 0 {
            continue;
        }
        let len = s.length as usize;
        let (mr, off) = mr::lookup(mrs, s.lkey, pd, s.addr, len, need).map_err(|e| match e {
            MrCheckError::UnknownKey => format!("unknown lkey {:#x}", s.lkey),
            e => format!("lkey {:#x}: {e}", s.lkey),
        })?;
        out.push(LocalSge::new(mr.clone(), off, len));
    }
    Ok(out)
}

/// What [`check_send_request`] needs to know of a QP.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    /// Transport.
    pub qp_type: QpType,
    /// Queue capacities.
    pub cap: crate::verbs::QpCap,
    /// Outstanding READ/atomic requests allowed (0: none).
    pub max_rd_atomic: u8,
    /// Largest UD message (the port MTU), in bytes.
    pub ud_max: usize,
}

/// The check of a receive work request that needs no memory lookup: its
/// SGE count against the QP's limit. The engine runs it when the request
/// is posted; a driver of a NIC in another process runs it before.
pub fn check_recv_request(cap: &crate::verbs::QpCap, wr: &RecvRequest) -> Result<()> {
    check_recv_sges(wr, cap.max_recv_sge)
}

/// A receive request's SGE count against its queue's `max_sge`.
pub fn check_recv_sges(wr: &RecvRequest, max_sge: u32) -> Result<()> {
    if wr.sges.len() > max_sge as usize {
        return Err(Error::inval(format!(
            "{} SGEs above the queue's max_sge {}",
            wr.sges.len(),
            max_sge
        )));
    }
    Ok(())
}

/// The checks of a send work request that need no memory lookup: what
/// the transport allows, inline and SGE limits, message and atomic sizes.
/// The engine runs them when the request is posted; a driver of a NIC in
/// another process runs them before it posts, so that such errors reach
/// the caller of `ibv_post_send`. Answers the message length.
pub fn check_send_request(q: &SendLimits, wr: &SendRequest) -> Result<usize> {
    let op = wr.op;
    match q.qp_type {
        QpType::Uc | QpType::Ud if op.invalidates().is_some() => {
            return Err(Error::inval("SEND with invalidate needs an RC QP"))
        }
        QpType::Uc if op.is_read_or_atomic() => {
            return Err(Error::inval("UC QPs support only SEND and RDMA WRITE"))
        }
        QpType::Ud if op.has_remote() => return Err(Error::inval("UD QPs support only SEND")),
        QpType::Ud if wr.ud.is_none() => {
            return Err(Error::inval("UD send without an address handle"))
        }
        QpType::Rc if op.is_read_or_atomic() && q.max_rd_atomic == 0 => {
            return Err(Error::inval("READ/atomic on a QP with max_rd_atomic 0"))
        }
        _ => {}
    }
    let len = match &wr.data {
        SendData::Inline(bytes) => {
            if op.is_read_or_atomic() {
                return Err(Error::inval("inline data with READ or atomic"));
            }
            if bytes.len() > q.cap.max_inline_data as usize {
                return Err(Error::inval(format!(
                    "{} inline bytes above max_inline_data {}",
                    bytes.len(),
                    q.cap.max_inline_data
                )));
            }
            bytes.len() as u64
        }
        SendData::Sges(list) => {
            if list.len() > q.cap.max_send_sge as usize {
                return Err(Error::inval(format!(
                    "{} SGEs above max_send_sge {}",
                    list.len(),
                    q.cap.max_send_sge
                )));
            }
            let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
            if total > MAX_MSG_SIZE as u64 {
                return Err(Error::inval("message larger than 2^31 bytes"));
            }
            total
        }
    };
    if op.is_atomic() && len != 8 {
        return Err(Error::inval(
            "atomic operations need one 8-byte local buffer",
        ));
    }
    if q.qp_type == QpType::Ud && len > q.ud_max as u64 {
        return Err(Error::inval("UD message larger than the path MTU"));
    }
    Ok(len as usize)
}

fn build_send_wqe(qp: &QpCtx, mrs: &MrTable, wr: SendRequest) -> Result<SendWqe> {
    let limits = SendLimits {
        qp_type: qp.qp_type,
        cap: qp.cap,
        max_rd_atomic: qp.attr.max_rd_atomic,
        ud_max: qp.mtu(),
    };
    let len = check_send_request(&limits, &wr)?;
    let op = wr.op;
    let need = if op.is_read_or_atomic() {
        AccessFlags::LOCAL_WRITE
    } else {
        AccessFlags::empty()
    };
    let (payload, local_error) = match wr.data {
        SendData::Inline(bytes) => (Payload::Inline(bytes), None),
        SendData::Sges(list) => match resolve_sges(mrs, qp.pd, &list, need) {
            Ok(sges) => (Payload::Sges(sges), None),
            Err(why) => {
                tracing::debug!(qpn = qp.qpn, why, "send WR with a bad local buffer");
                (Payload::Sges(SgeList::new()), Some(WcStatus::LocProtErr))
            }
        },
    };
    let mtu = qp.mtu();
    let npsn = match op {
        SendOp::CompSwap { .. } | SendOp::FetchAdd { .. } => 1,
        _ => len.div_ceil(mtu).max(1) as u32,
    };
    Ok(SendWqe {
        wr_id: wr.wr_id,
        op,
        payload,
        len,
        remote_va: wr.remote_va,
        rkey: wr.rkey,
        signaled: wr.signaled,
        solicited: wr.solicited,
        ud: wr.ud,
        first_psn: 0,
        npsn,
        local_error,
        fence: wr.fence,
    })
}

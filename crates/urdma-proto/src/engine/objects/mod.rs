//! The engine's command interface: creating, modifying and destroying
//! PDs, MRs and QPs, and posting work requests. Every call validates its
//! input against IB semantics and the device limits.

mod attr;
mod wr;

use super::command::CreateQp;
use super::qp::QpCtx;
use super::{requester, Engine};
use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::mr::MrEntry;
use crate::types::{
    AccessFlags, QpAttrMask as M, QpState, QpType, WcOpcode, WcStatus, WorkCompletion,
};
use crate::verbs::modify::check_transition;
use crate::verbs::QpAttr;
use std::sync::Arc;
use urdma_wire::QPN_MASK;

pub use super::request::{RecvRequest, SendData, SendRequest, SgEntry};
pub use crate::mr::{is_kernel_key, KERNEL_KEY_TAG};
pub(crate) use wr::{build_recv_wqe, enqueue_failed, enqueue_send, queue_send};
pub use wr::{check_recv_request, check_recv_sges, check_send_request, SendLimits};

/// Largest message (2^31 bytes, as IBTA allows).
pub(super) const MAX_MSG_SIZE: usize = 1 << 31;

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
        mem: Box<dyn Memory>,
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
            let entry = Arc::new(MrEntry::from_boxed(key, pd, access, iova, mem));
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
        let entry = Arc::new(MrEntry::from_boxed(key, pd, access, iova, mem));
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
        mem: Box<dyn Memory>,
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
        let mut entry = MrEntry::from_boxed(key, pd, access, iova, mem);
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
            .any(|q| q.send_cq.cqn() == cqn || q.recv_cq.cqn() == cqn)
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
        let gids = self.gids.clone();
        let internal_peer = self.internal_peer.clone();
        let (qp, mut cx) = self.qp_and_ctx(now, qpn)?;
        let cur = qp.state();
        let to = check_transition(qp.qp_type, cur, mask, attr.qp_state, attr.cur_qp_state)?;
        attr::validate_values(attr, mask, &dev, &gids)?;
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

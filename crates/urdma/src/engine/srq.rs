//! Shared receive queues: one pool of receive WQEs for several QPs.

use super::objects::{build_recv_wqe, RecvRequest};
use super::qp::QpCtx;
use super::rings::{self, NoRecv};
use super::wqe::RecvWqe;
use super::{Ctx, Engine};
use crate::error::{Error, Result};
use crate::types::AsyncEventKind;
use crate::wq::WorkRing;
use std::collections::VecDeque;
use std::sync::Arc;

/// A shared receive queue.
#[derive(Debug)]
pub struct SrqCtx {
    /// Protection domain.
    pub pd: u32,
    /// Capacity.
    pub max_wr: u32,
    /// Scatter/gather entries per WR.
    pub max_sge: u32,
    /// Limit event threshold (0 = not armed).
    pub limit: u32,
    /// Posted WQEs.
    pub rq: VecDeque<RecvWqe>,
    /// The queue in the memory of a driver in another process.
    pub ring: Option<Arc<WorkRing>>,
}

/// Attributes of an SRQ (`ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SrqAttr {
    /// Capacity.
    pub max_wr: u32,
    /// Scatter/gather entries per WR.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// Take the next receive WQE of `qp` (from its SRQ if it has one).
pub fn pop_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> Result<RecvWqe, NoRecv> {
    let Some(n) = qp.srq else {
        return match qp.rq.pop_front() {
            Some(w) => Ok(w),
            None => rings::take_recv(qp, cx),
        };
    };
    let srq = cx.srqs.get_mut(&n).ok_or(NoRecv::Empty)?;
    let mut refused = None;
    let w = match (srq.rq.pop_front(), srq.ring.as_ref()) {
        (Some(w), _) => Ok(w),
        (None, Some(ring)) => {
            rings::take_recv_from(ring, srq.max_sge, srq.pd, cx.mrs, &mut refused)
        }
        (None, None) => Err(NoRecv::Empty),
    };
    let waiting = srq.rq.len() as u64 + srq.ring.as_ref().map_or(0, |r| r.pending().unwrap_or(0));
    if srq.limit != 0 && waiting < u64::from(srq.limit) {
        srq.limit = 0;
        cx.event(AsyncEventKind::SrqLimitReached, n);
    }
    rings::complete_refused(qp, cx, refused);
    w
}

/// Give a receive WQE back to the front of its queue.
pub fn unpop_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>, w: RecvWqe) {
    match qp.srq.and_then(|n| cx.srqs.get_mut(&n)) {
        Some(srq) => srq.rq.push_front(w),
        None => qp.rq.push_front(w),
    }
}

impl Engine {
    /// Create an SRQ in `pd`.
    pub(crate) fn create_srq(&mut self, pd: u32, attr: SrqAttr) -> Result<u32> {
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if attr.max_wr == 0 || attr.max_wr > self.attr.max_qp_wr || attr.max_sge > self.attr.max_sge
        {
            return Err(Error::inval("SRQ size outside the device limits"));
        }
        let srqn = self.next_srqn;
        self.next_srqn = self.next_srqn.wrapping_add(1).max(1);
        self.srqs.insert(
            srqn,
            SrqCtx {
                pd,
                max_wr: attr.max_wr,
                max_sge: attr.max_sge.max(1),
                limit: 0,
                rq: VecDeque::new(),
                ring: None,
            },
        );
        Ok(srqn)
    }

    /// Change the limit (and, not supported, the size) of an SRQ.
    pub(crate) fn modify_srq(
        &mut self,
        srqn: u32,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<()> {
        let srq = self
            .srqs
            .get_mut(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        if max_wr.is_some() {
            return Err(Error::NotSupported("resizing an SRQ".into()));
        }
        if let Some(l) = limit {
            if l > srq.max_wr {
                return Err(Error::inval("srq_limit above max_wr"));
            }
            srq.limit = l;
        }
        Ok(())
    }

    /// Current attributes of an SRQ.
    pub(crate) fn query_srq(&self, srqn: u32) -> Result<SrqAttr> {
        let s = self
            .srqs
            .get(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        Ok(SrqAttr {
            max_wr: s.max_wr,
            max_sge: s.max_sge,
            srq_limit: s.limit,
        })
    }

    /// Destroy an SRQ no QP uses.
    pub(crate) fn destroy_srq(&mut self, srqn: u32) -> Result<()> {
        if self.qps.values().any(|q| q.srq == Some(srqn)) {
            return Err(Error::Busy(format!("srq {srqn} still has QPs")));
        }
        self.srqs
            .remove(&srqn)
            .map(|_| ())
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))
    }

    /// Post a receive WQE to an SRQ.
    pub(crate) fn post_srq_recv(&mut self, srqn: u32, wr: RecvRequest) -> Result<()> {
        let srq = self
            .srqs
            .get_mut(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        if srq.rq.len() >= srq.max_wr as usize {
            return Err(Error::Exhausted("shared receive queue full".into()));
        }
        let wqe = build_recv_wqe(srq.max_sge, srq.pd, &self.mrs, wr)?;
        srq.rq.push_back(wqe);
        Ok(())
    }
}

//! Shared receive queues: one pool of receive WQEs for several QPs.

use super::objects::{build_recv_wqe, RecvRequest};
use super::qp::QpCtx;
use super::rings::{self, NoRecv};
use super::wqe::RecvWqe;
use super::{Ctx, Engine};
use crate::error::{Error, Result};
use crate::types::AsyncEventKind;
use crate::work::WorkSource;
use std::collections::VecDeque;
use std::sync::Arc;

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct SrqCtx {
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
    pub ring: Option<Arc<dyn WorkSource>>,
    /// Rings a resize replaced, oldest first, still holding requests the
    /// driver posted before it: they are taken before `ring`'s.
    pub draining: VecDeque<Arc<dyn WorkSource>>,
}

impl SrqCtx {
    /// Receive requests waiting, in the engine and in the rings.
    fn waiting(&self) -> u64 {
        let pending = |r: &Arc<dyn WorkSource>| r.pending().unwrap_or(0);
        self.rq.len() as u64
            + self.draining.iter().map(pending).sum::<u64>()
            + self.ring.as_ref().map_or(0, pending)
    }
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
pub(crate) fn pop_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> Result<RecvWqe, NoRecv> {
    let Some(n) = qp.srq else {
        return match qp.rq.pop_front() {
            Some(w) => Ok(w),
            None => rings::take_recv(qp, cx),
        };
    };
    let srq = cx.srqs.get_mut(&n).ok_or(NoRecv::Empty)?;
    let mut refused = None;
    let mut w = srq.rq.pop_front().ok_or(NoRecv::Empty);
    // The rings a resize replaced first, then the current one.
    while w.is_err() {
        let Some(ring) = srq.draining.front().or(srq.ring.as_ref()) else {
            break;
        };
        w = rings::take_recv_from(&**ring, srq.max_sge, srq.pd, cx.mrs, &mut refused);
        match (&w, srq.draining.is_empty()) {
            (Err(NoRecv::Empty), false) => {
                srq.draining.pop_front();
            }
            _ => break,
        }
    }
    let waiting = srq.waiting();
    if srq.limit != 0 && waiting < u64::from(srq.limit) {
        srq.limit = 0;
        cx.event(AsyncEventKind::SrqLimitReached, n);
    }
    rings::complete_refused(qp, cx, refused);
    w
}

/// Give a receive WQE back to the front of its queue.
pub(crate) fn unpop_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>, w: RecvWqe) {
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
                draining: VecDeque::new(),
            },
        );
        Ok(srqn)
    }

    /// Change the size (an embedded SRQ's; see [`Engine::resize_srq`])
    /// or the limit of an SRQ.
    pub(crate) fn modify_srq(
        &mut self,
        srqn: u32,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<()> {
        if let Some(n) = max_wr {
            return self.resize_srq(srqn, n, limit, None);
        }
        let srq = self
            .srqs
            .get_mut(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        if let Some(l) = limit {
            if l > srq.max_wr {
                return Err(Error::inval("srq_limit above max_wr"));
            }
            srq.limit = l;
        }
        Ok(())
    }

    /// Make an SRQ hold `max_wr` receive requests (and arm `limit`, if
    /// given); one whose driver is in another process gives the new ring
    /// it posts to from now on (the requests in the old one are taken
    /// first). Everything is checked before anything changes: refused
    /// outside the device's limits, below the limit (the new one, else the
    /// armed one), or below the requests waiting.
    pub fn resize_srq(
        &mut self,
        srqn: u32,
        max_wr: u32,
        limit: Option<u32>,
        ring: Option<Arc<dyn WorkSource>>,
    ) -> Result<()> {
        let max = self.attr.max_qp_wr;
        let srq = self
            .srqs
            .get_mut(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        if max_wr == 0 || max_wr > max {
            return Err(Error::inval(format!("SRQ size {max_wr} outside 1..={max}")));
        }
        if limit.unwrap_or(srq.limit) > max_wr {
            return Err(Error::inval("SRQ size below its limit"));
        }
        if srq.waiting() > u64::from(max_wr) {
            return Err(Error::inval(
                "more receive requests wait than the SRQ would hold",
            ));
        }
        if srq.ring.is_some() != ring.is_some() {
            return Err(Error::inval("an SRQ's ring is replaced by a ring"));
        }
        if let (Some(old), Some(new)) = (srq.ring.take(), ring) {
            srq.draining.push_back(old);
            srq.ring = Some(new);
        }
        srq.max_wr = max_wr;
        if let Some(l) = limit {
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

#[cfg(test)]
mod tests {
    use crate::engine::command::{AllocPd, CreateSrq, ModifySrq, PostSrqRecv, QuerySrq, RegMr};
    use crate::engine::{Engine, RecvRequest, SgEntry, SrqAttr};
    use crate::memory::VecMemory;
    use crate::types::AccessFlags;
    use crate::verbs::DeviceAttr;

    #[test]
    fn an_srq_grows_and_shrinks_down_to_what_waits_and_its_limit() {
        let mut e = Engine::new(
            "127.0.0.1:4791".parse().unwrap(),
            DeviceAttr::default(),
            Some(1),
        );
        let pd = e.call(0, AllocPd {}).unwrap();
        let mem = VecMemory::new(4096);
        let reg = RegMr {
            pd,
            access: AccessFlags::LOCAL_WRITE,
            iova: 0x1000,
            mem: Box::new(mem),
            rekey: None,
        };
        let mr = e.call(0, reg).unwrap();
        let attr = SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        };
        let srqn = e.call(0, CreateSrq { pd, attr }).unwrap();
        for wr_id in 0..4 {
            let sges = vec![SgEntry {
                addr: 0x1000,
                length: 64,
                lkey: mr.lkey,
            }];
            let wr = RecvRequest { wr_id, sges };
            e.call(0, PostSrqRecv { srqn, wr }).unwrap();
        }
        let size = |e: &mut Engine, n: u32, limit: Option<u32>| {
            e.call(
                0,
                ModifySrq {
                    srqn,
                    max_wr: Some(n),
                    limit,
                },
            )
        };
        assert!(size(&mut e, 3, None).is_err(), "below the 4 waiting");
        assert!(size(&mut e, 0, None).is_err());
        assert!(size(&mut e, 1 << 30, None).is_err());
        assert!(size(&mut e, 16, Some(17)).is_err(), "limit above the size");
        assert_eq!(e.call(0, QuerySrq { srqn }).unwrap().max_wr, 8, "unchanged");
        size(&mut e, 16, Some(6)).unwrap();
        assert!(size(&mut e, 5, None).is_err(), "below the armed limit");
        // A new limit comes with the new size.
        size(&mut e, 4, Some(0)).unwrap();
        let q = e.call(0, QuerySrq { srqn }).unwrap();
        assert_eq!((q.max_wr, q.srq_limit), (4, 0));
    }
}

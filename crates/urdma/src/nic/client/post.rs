//! Posts: work requests checked as the engine would check them, written
//! straight into a QP's or SRQ's work queue, with a doorbell when the NIC
//! asks for one.

use super::{AgentLink, QpMirror};
use crate::engine::{
    check_recv_request, check_recv_sges, check_send_request, RecvRequest, SendLimits, SendRequest,
};
use crate::error::{Error, Result};
use crate::types::QpState;
use crate::wq::{PushError, WorkRing};

impl AgentLink {
    fn mirror(&self, qpn: u32) -> Result<QpMirror> {
        self.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("QP {qpn}")))
    }

    /// Post send WRs: each is checked here as the engine would check it,
    /// then written into the QP's send queue. Ok: all posted; Err((i, e)):
    /// the first `i` were posted, the `i`th refused.
    pub fn post_sends(
        &self,
        qpn: u32,
        wrs: Vec<SendRequest>,
    ) -> std::result::Result<(), (usize, Error)> {
        let q = self.mirror(qpn).map_err(|e| (0, e))?;
        if matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err((0, Error::WrongState(q.state)));
        }
        let limits = SendLimits {
            qp_type: q.qp_type,
            cap: q.cap,
            max_rd_atomic: q.max_rd_atomic,
            ud_max: self.ud_max,
        };
        self.post_to(Some(qpn), &q.sq, &wrs, |w| {
            check_send_request(&limits, w).map(|_| ())
        })
    }

    /// Post receive WRs to a QP (`srq` false) or an SRQ.
    pub fn post_recvs(
        &self,
        n: u32,
        srq: bool,
        wrs: Vec<RecvRequest>,
    ) -> std::result::Result<(), (usize, Error)> {
        if srq {
            let s = self
                .srqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&n)
                .cloned()
                .ok_or_else(|| (0, Error::NotFound(format!("SRQ {n}"))))?;
            // The NIC takes an SRQ's requests when messages need them.
            let ring = s.ring.read().unwrap_or_else(|e| e.into_inner());
            return self.post_to(None, &ring, &wrs, |w| check_recv_sges(w, s.max_sge));
        }
        let q = self.mirror(n).map_err(|e| (0, e))?;
        if q.state == QpState::Reset {
            return Err((0, Error::WrongState(q.state)));
        }
        let rq = q.rq.as_ref().ok_or_else(|| {
            (
                0,
                Error::inval("the QP takes receive requests from its SRQ"),
            )
        })?;
        self.post_to(Some(n), rq, &wrs, |w| check_recv_request(&q.cap, w))
    }

    /// Write the WRs into `ring` up to the first one `check` refuses or the
    /// ring has no room for, then ring QP `qpn`'s doorbell (if any) if the
    /// NIC asked for it. Err((i, e)): the `i`th was refused for `e`.
    fn post_to<T: serde::Serialize>(
        &self,
        qpn: Option<u32>,
        ring: &WorkRing,
        wrs: &[T],
        check: impl Fn(&T) -> Result<()>,
    ) -> std::result::Result<(), (usize, Error)> {
        let mut bell = false;
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            let pushed = check(wr).and_then(|()| {
                ring.push(wr).map_err(|e| match e {
                    PushError::Full => Error::Exhausted(e.to_string()),
                    PushError::TooLarge => Error::inval(e.to_string()),
                })
            });
            match pushed {
                Ok(b) => bell |= b,
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        if let (true, Some(qpn)) = (bell, qpn) {
            // The requests are posted; a NIC that cannot hear the doorbell
            // is gone, which every CQ of this driver then reports.
            if let Err(e) = self.ring_doorbell(qpn) {
                tracing::warn!(qpn, error = %e, "doorbell not delivered");
            }
        }
        refused.map_or(Ok(()), Err)
    }
}

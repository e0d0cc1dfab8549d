//! Work queues that a driver in another process fills in shared memory
//! ([`WorkRing`]), as the engine reads them. Send requests are pulled into
//! the SQ whenever the engine works on the QP (a post's doorbell, an
//! acknowledgement, a timer); receive requests are taken one at a time when
//! a message needs one. A send request the engine refuses fails in order
//! and moves the QP to ERR, as a NIC reports a bad WQE it fetched; a
//! refused receive request (a buffer outside the PD's MRs) completes with
//! an error status and the message that needed it cannot be placed (an RC
//! QP NAKs it and goes to ERR); a malformed ring breaks only its own QP.

use super::objects::{build_recv_wqe, enqueue_failed, enqueue_send};
use super::qp::{QpCtx, QpRings};
use super::timer::TimerKind;
use super::wqe::RecvWqe;
use super::{requester, Ctx, Engine};
use crate::error::{Error, Result};
use crate::mr::MrTable;
use crate::types::{AsyncEventKind, QpState, WcOpcode, WcStatus, WorkCompletion};
use crate::work::WorkSource;
use std::sync::Arc;

/// Rounds of pulling and re-arming before the engine leaves a ring that
/// its driver keeps filling to the next doorbell.
const MAX_ARM_ROUNDS: usize = 64;

/// A ring that cannot be read any more: the QP goes to ERR.
fn broken_ring(qp: &mut QpCtx, cx: &mut Ctx<'_>, e: &crate::work::TakeError) {
    tracing::warn!(qpn = qp.qpn, error = %e, "work queue unreadable");
    qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
}

/// Pull posted send requests into the SQ while it has room.
pub(crate) fn pull_sends(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    let Some(ring) = qp.rings.sq.clone() else {
        return;
    };
    if !takes_sends(qp) {
        return;
    }
    // At most a ring's worth per call, however fast the driver refills it.
    for _ in 0..ring.capacity() {
        if qp.req.sq.len() + qp.req.held.len() >= qp.cap.max_send_wr as usize {
            return;
        }
        let wr = match ring.pop_send() {
            None => return,
            Some(Ok(wr)) => wr,
            Some(Err(e)) => {
                ring.retire(1);
                broken_ring(qp, cx, &e);
                continue;
            }
        };
        let (id, op) = (wr.wr_id, wr.op);
        if qp.state() == QpState::Err {
            // Its room is free before its completion is seen.
            ring.retire(1);
            let wc = WorkCompletion::new(id, WcStatus::WrFlushErr, op.wc_opcode(), qp.qpn);
            qp.push_wc(cx, wc, false, false);
            continue;
        }
        if let Err(e) = enqueue_send(qp, cx, wr) {
            tracing::debug!(qpn = qp.qpn, error = %e, "send request refused");
            // The driver ran the same checks: what fails here is a bad
            // WQE, as a NIC reports one it fetched.
            enqueue_failed(qp, id, op, WcStatus::LocQpOpErr);
        }
    }
}

/// A QP takes send requests from RTS on (a driver posts none before).
fn takes_sends(qp: &QpCtx) -> bool {
    !matches!(qp.state(), QpState::Reset | QpState::Init | QpState::Rtr)
}

/// After the requester's work: true if nothing more is to be pulled now.
/// When a new request could be sent at once (everything queued has been
/// transmitted, so the send window or credits do not hold it back, or the
/// QP is in ERR), the doorbell is armed, so that a post is taken without
/// waiting for the next acknowledgement; false means a post arrived
/// meanwhile.
pub(crate) fn settled(qp: &QpCtx) -> bool {
    let Some(ring) = &qp.rings.sq else {
        return true;
    };
    // Unsent work waits for an acknowledgement, a timer or a transition,
    // which come back; so does a full SQ, with a completion.
    let held = qp.req.send_pos < qp.req.sq.len()
        || qp.req.sq.len() + qp.req.held.len() >= qp.cap.max_send_wr as usize
        || !qp.req.held.is_empty();
    // Before RTS the transition to RTS comes back for what was posted.
    if !takes_sends(qp) || (held && qp.state() != QpState::Err) {
        return true;
    }
    ring.arm()
}

/// Pull and transmit until the QP is settled (see [`settled`]).
pub(crate) fn pump_rings(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    transmit: impl Fn(&mut QpCtx, &mut Ctx<'_>),
) {
    for _ in 0..MAX_ARM_ROUNDS {
        pull_sends(qp, cx);
        transmit(qp, cx);
        // What the transmission completed (UC: at once) may release a
        // local operation and the requests behind it.
        if super::local_ops::run_held(qp, cx) {
            continue;
        }
        if settled(qp) {
            return;
        }
    }
    // A driver that keeps posting as fast as the engine drains: come back
    // for the rest once other work had the engine.
    qp.timers.set(TimerKind::Revisit, Some(cx.now));
}

/// Why no receive request was taken from a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRecv {
    /// Nothing posted.
    Empty,
    /// The next request was refused (a buffer outside the PD's MRs, more
    /// SGEs than the queue allows) and completed in error; the message
    /// that needed it cannot be placed.
    Refused,
}

/// Take the next receive request from `ring`, checked against the queue's
/// `max_sge` and resolved in `pd`. A refused request is taken too: its
/// wr_id and status go to `refused`, for an error completion.
pub(crate) fn take_recv_from(
    ring: &dyn WorkSource,
    max_sge: u32,
    pd: u32,
    mrs: &MrTable,
    refused: &mut Option<(u64, WcStatus)>,
) -> Result<RecvWqe, NoRecv> {
    // Unreadable slots are skipped, at most a ring's worth per call.
    for _ in 0..ring.capacity() {
        let got = ring.pop_recv().ok_or(NoRecv::Empty)?;
        ring.retire(1);
        let wr = match got {
            Ok(wr) => wr,
            Err(e) => {
                tracing::warn!(error = %e, "receive request unreadable");
                continue;
            }
        };
        let id = wr.wr_id;
        return build_recv_wqe(max_sge, pd, mrs, wr).map_err(|r| {
            tracing::debug!(error = %r.error, "receive request refused");
            *refused = Some((id, r.status));
            NoRecv::Refused
        });
    }
    Err(NoRecv::Empty)
}

/// Complete a refused receive request on `qp`'s receive CQ.
pub(crate) fn complete_refused(qp: &mut QpCtx, cx: &mut Ctx<'_>, refused: Option<(u64, WcStatus)>) {
    if let Some((id, status)) = refused {
        let wc = WorkCompletion::new(id, status, WcOpcode::Recv, qp.qpn);
        qp.push_wc(cx, wc, true, false);
    }
}

/// Take the next receive request of a QP's own ring.
pub(crate) fn take_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> Result<RecvWqe, NoRecv> {
    let ring = qp.rings.rq.clone().ok_or(NoRecv::Empty)?;
    let mut refused = None;
    let w = take_recv_from(&*ring, qp.cap.max_recv_sge, qp.pd, cx.mrs, &mut refused);
    complete_refused(qp, cx, refused);
    w
}

/// Flush everything posted to a QP's rings (the QP is in ERR) and arm
/// the doorbells, so that later posts are flushed too.
pub(crate) fn flush_rings(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    pump_rings(qp, cx, |_, _| {});
    let Some(ring) = qp.rings.rq.clone() else {
        return;
    };
    for _ in 0..MAX_ARM_ROUNDS {
        while let Some(got) = ring.pop_recv() {
            ring.retire(1);
            if let Ok(wr) = got {
                let wc =
                    WorkCompletion::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn);
                qp.push_wc(cx, wc, true, false);
            }
        }
        if ring.arm() {
            return;
        }
    }
    ring.arm();
}

/// Forget everything posted (the QP went back to RESET).
pub(crate) fn discard(rings: &QpRings) {
    for r in rings.sq.iter().chain(rings.rq.iter()) {
        r.discard();
    }
}

impl Engine {
    /// Give QP `qpn` the work queues its driver fills.
    pub fn attach_rings(&mut self, qpn: u32, rings: QpRings) -> Result<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| Error::NotFound(format!("qp {qpn}")))?;
        qp.rings = rings;
        Ok(())
    }

    /// Give SRQ `srqn` the receive queue its driver fills.
    pub fn attach_srq_ring(&mut self, srqn: u32, ring: Arc<dyn WorkSource>) -> Result<()> {
        let srq = self
            .srqs
            .get_mut(&srqn)
            .ok_or_else(|| Error::NotFound(format!("srq {srqn}")))?;
        srq.ring = Some(ring);
        Ok(())
    }

    /// A driver posted to an idle QP's rings: take the new work.
    pub fn doorbell(&mut self, now: u64, qpn: u32) -> Result<()> {
        let (qp, mut cx) = self.qp_and_ctx(now, qpn)?;
        if qp.state() == QpState::Err {
            flush_rings(qp, &mut cx);
        }
        requester::pump(qp, &mut cx);
        Ok(())
    }
}

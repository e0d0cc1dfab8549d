//! Local operations of the send queue: memory window binds and local
//! invalidations. They send no packet and are carried out in order: a
//! local operation waits until every request posted before it has
//! completed (the SQ is empty), and the requests posted after it wait
//! behind it, so that a window is bound before a SEND that hands its
//! R_Key to a peer leaves, and taken back only once the work before the
//! invalidation is done. Waiting requests are held in
//! [`super::qp::ReqState::held`] and count against the send queue's
//! depth.

use super::mw;
use super::objects::{enqueue_failed, queue_send, SendRequest};
use super::qp::QpCtx;
use super::wqe::SendOp;
use super::Ctx;
use crate::types::{AsyncEventKind, QpState, QpType, WcStatus, WorkCompletion};

/// Whether `wr` must be held: a local operation, or anything behind one.
pub(crate) fn must_hold(qp: &QpCtx, wr: &SendRequest) -> bool {
    wr.op.is_local() || !qp.req.held.is_empty()
}

/// Run what is held as far as possible, in RTS only (SQD starts no new
/// work): a local operation once the SQ is empty, the requests behind it
/// into the SQ. True if anything ran or moved.
pub(crate) fn run_held(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> bool {
    let mut moved = false;
    while let Some(front) = qp.req.held.front() {
        if qp.state() != QpState::Rts || (front.op.is_local() && !qp.req.sq.is_empty()) {
            return moved;
        }
        let Some(wr) = qp.req.held.pop_front() else {
            return moved;
        };
        moved = true;
        if !wr.op.is_local() {
            let (id, op) = (wr.wr_id, wr.op);
            // Checked like any request; a bad one fails in order.
            match queue_send(qp, cx, wr) {
                Ok(Some(wc)) => {
                    if let Some(ring) = &qp.rings.sq {
                        ring.retire(1);
                    }
                    qp.push_wc(cx, wc, false, false);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(qpn = qp.qpn, error = %e, "send request refused");
                    enqueue_failed(qp, id, op, WcStatus::LocQpOpErr);
                }
            }
            continue;
        }
        let status = execute(qp, cx, &wr);
        complete(qp, cx, &wr, status);
        if status != WcStatus::Success {
            qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
            return true;
        }
    }
    moved
}

/// Carry out a local operation: its completion status.
fn execute(qp: &QpCtx, cx: &mut Ctx<'_>, wr: &SendRequest) -> WcStatus {
    if qp.qp_type == QpType::Ud {
        return WcStatus::LocQpOpErr;
    }
    match wr.op {
        SendOp::BindMw(b) => match mw::bind(cx.mws, cx.mrs, qp.qpn, qp.pd, &b) {
            Ok(()) => WcStatus::Success,
            Err(status) => status,
        },
        SendOp::LocalInv(rkey) => match mw::invalidate(cx.mws, qp.qpn, qp.pd, rkey, false) {
            true => WcStatus::Success,
            false => WcStatus::LocQpOpErr,
        },
        _ => WcStatus::LocQpOpErr,
    }
}

/// Complete a local operation (its room in the driver's ring is free
/// first).
fn complete(qp: &mut QpCtx, cx: &mut Ctx<'_>, wr: &SendRequest, status: WcStatus) {
    if let Some(ring) = &qp.rings.sq {
        ring.retire(1);
    }
    if wr.signaled || qp.sq_sig_all || status != WcStatus::Success {
        let wc = WorkCompletion::new(wr.wr_id, status, wr.op.wc_opcode(), qp.qpn);
        qp.push_wc(cx, wc, false, false);
    }
}

/// Complete every held request with WR_FLUSH_ERR (QP in ERR).
pub(crate) fn flush_held(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    while let Some(wr) = qp.req.held.pop_front() {
        complete(qp, cx, &wr, WcStatus::WrFlushErr);
    }
}

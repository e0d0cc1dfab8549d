//! The responder: executes incoming requests (SEND, WRITE, READ, atomics)
//! against receive WQEs and registered memory, in PSN order, and answers
//! with ACKs, NAKs, READ responses and atomic ACKs.
//!
//! Every request packet goes through one chain of steps; each step either
//! lets it through or names a [`RespError`](error::RespError), and one
//! place ([`error::reject`]) turns that error into what the transport does
//! about it (a NAK on RC, a dropped message on UC and UD). The steps, in
//! order, all in [`check`] but the last:
//!
//! 0. the QP is in a state that receives;
//! 1. PSN: expected, duplicate (answered again by [`duplicate`]) or out of
//!    sequence (kept for later by [`reorder`] when the requester marks it
//!    selective); UC resynchronises instead;
//! 2. opcode sequence: FIRST/ONLY outside a message, MIDDLE/LAST inside
//!    one;
//! 3. opcode valid for the QP's transport, with its headers, and allowed by
//!    the QP's access rights;
//! 4. lengths: payload against the path MTU by position, announced DMA
//!    length;
//! 5. R_Key and access through the one MR lookup ([`crate::mr::lookup`]),
//!    then the payload against what remains of the message;
//! 6. resources: the receive WQE of a SEND or of a WRITE with immediate
//!    data; for a READ or atomic, fewer than `max_dest_rd_atomic` of them
//!    not yet fully answered (their responses wait in [`outbound`]);
//! 7. execute: copy, reply, complete ([`execute`]), then acknowledge.
//!
//! Resources come last among the checks: a request that is wrong in any
//! other way is refused for that reason, never with an RNR NAK, and takes
//! no receive WQE. UD requests take the steps that apply to them in [`ud`].

mod check;
mod duplicate;
mod error;
mod execute;
mod outbound;
mod reorder;
mod reply;
pub(crate) mod state;
mod ud;
pub(super) use ud::received_grh;

use super::qp::QpCtx;
use super::Ctx;
use crate::types::QpType;
use check::{Plan, Psn};
use error::Refusal;
use urdma_wire::Packet;

pub(super) use outbound::Responding;
#[cfg(test)]
pub(crate) use outbound::{DEVICE_READ_BYTES, PACE_NS, READ_WINDOW};
pub(super) use reply::flush_ack;
pub(super) use state::HeldBudget;

/// Longest message a request may announce (2^31 bytes, as IBTA allows);
/// it also keeps a READ's PSN span below half the 24-bit PSN space.
const MAX_MSG_SIZE: usize = super::objects::MAX_MSG_SIZE;

/// Handle a request packet for `qp`.
pub(super) fn on_request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let outcome = check::qp_state(qp)
        .map_err(Refusal::from)
        .and_then(|()| match qp.qp_type {
            QpType::Ud => ud::request(qp, cx, pkt),
            QpType::Rc | QpType::Uc => connected(qp, cx, pkt),
        });
    match outcome {
        Ok(()) => reorder::release(qp, cx, pkt.repr.bth.psn),
        Err(refusal) => {
            if refusal.wqe.is_some() || !reorder::hold(qp, cx, pkt, refusal.kind) {
                error::reject(qp, cx, pkt, refusal);
            }
        }
    }
}

/// The chain for RC and UC requests.
fn connected(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) -> Result<(), Refusal> {
    qp.resp.peer_marks = pkt.repr.bth.selective && cx.selective;
    if check::psn(qp, cx, pkt)? == Psn::Duplicate {
        duplicate::answer(qp, cx, pkt);
        return Ok(());
    }
    check::opcode_sequence(qp, pkt)?;
    let op = check::opcode(qp, pkt)?;
    check::length(qp, pkt, &op)?;
    let mrs = cx.mrs;
    let target = check::target(qp, (mrs, &*cx.mws), pkt, op)?;
    let plan = check::resources(qp, cx, pkt, target)?;
    let acknowledged = matches!(plan, Plan::Send { .. } | Plan::Write { .. });
    execute::execute(qp, cx, pkt, plan)?;
    if acknowledged && qp.qp_type == QpType::Rc {
        reply::ack_if_asked(qp, cx, pkt);
    }
    Ok(())
}

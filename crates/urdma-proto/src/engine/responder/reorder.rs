//! Selective retransmission, the responder's half: RC requests that arrive
//! after a lost one are kept, not dropped, when their requester marks them
//! ([`urdma_wire::Bth::selective`]), and executed in PSN order once the
//! lost packets arrive again. Sequence NAKs then carry the mark too, and
//! mean something else than IBTA's: a marked NAK names one missing PSN
//! and acknowledges nothing, so the requester resends that packet alone
//! instead of going back N, and every gap is repaired at once.
//!
//! - A packet held after a gap NAKs each PSN it shows missing: those
//!   between the highest PSN received before it and itself, at most
//!   [`MAX_NAKS`]; a longer run of losses is found by the requester's
//!   loss probe or by the ACKs that reach past the expected PSN, which
//!   have it resent one after the other.
//! - Resent packets arrive in the order they were NAKed. One that arrives
//!   shows that the resends of PSNs NAKed before it, still missing, were
//!   lost (or their NAKs were): those are NAKed again, at most
//!   [`MAX_NAKS`], without waiting for the requester's loss probe.
//! - A copy of a held packet that asks for an ACK (the requester's loss
//!   probe) NAKs again every PSN still missing: the resent packets may
//!   have been lost too.
//! - Once the expected PSN arrives, the held packets that follow it run
//!   and are acknowledged with an ordinary ACK.
//! - Marked ACKs and NAKs carry in the AETH, where IBTA puts the MSN, how
//!   far the requests received reach: past a gap, the PSN after the
//!   highest one held (in NAKs, and in an ACK of the PSN just before the
//!   gap), else the PSN after the one acknowledged. What lies below it
//!   and was not NAKed has arrived, so the requester's window moves past
//!   it; an ACK of `p` that reaches past `p + 1` says `p + 1` is missing.
//!   A held packet that asks for an ACK is answered with such an ACK.
//! - Each QP keeps at most [`MAX_HELD`] packets within [`MAX_AHEAD`] PSNs
//!   of the expected one, and every QP of a device together at most
//!   [`HeldBudget::LIMIT`] bytes. A packet beyond those is dropped as
//!   before: the requester's timeout recovers it.
//! - A held packet is checked when it is executed, like any other: one
//!   that is refused then is refused as it would have been in order, and
//!   everything held after it is dropped.
//!
//! Requesters that do not mark their requests (other RoCE implementations)
//! get IBTA go-back-N: their out-of-sequence packets are dropped and NAKed
//! once per expected PSN.

use super::error::{reject, RespError};
use super::reply;
use super::state::{HeldPacket, PACKET_COST};
use crate::engine::qp::QpCtx;
use crate::engine::{psn, Counter, Ctx};
use crate::types::{QpState, QpType};
use urdma_wire::Packet;

/// Most packets one QP keeps.
pub(super) const MAX_HELD: usize = crate::engine::requester::SELECTIVE_SPAN as usize;
/// Farthest a kept packet may be ahead of the expected PSN.
pub(super) const MAX_AHEAD: i32 = crate::engine::requester::SELECTIVE_SPAN as i32;
/// Most NAKs one packet causes (a longer run of losses is found by the
/// requester's loss probe, or its ACK timeout): as many as the longest
/// UDP GSO run, the packets a lossy link drops together.
pub(super) const MAX_NAKS: u32 = 64;
/// Keep `pkt`, refused for `kind`, if it is a marked RC request after a
/// gap and there is room; NAK what it shows missing, as the module says.
/// Returns false if the packet was not kept (the caller refuses it as
/// usual).
pub(super) fn hold(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>, kind: RespError) -> bool {
    let bth = &pkt.repr.bth;
    let marked = bth.selective && cx.selective;
    if kind != RespError::PsnOutOfSequence || qp.qp_type != QpType::Rc || !marked {
        return false;
    }
    let (p, epsn) = (bth.psn, qp.resp.epsn);
    let ahead = psn::diff(p, epsn);
    if ahead <= 0 || ahead > MAX_AHEAD {
        return false;
    }
    let held = &mut qp.resp.held;
    let again = held.by_psn.contains_key(&p);
    // Everything from here up to `p` is newly found missing.
    let from = if held.by_psn.is_empty() {
        epsn
    } else {
        held.high
    };
    if again {
        if bth.ack_req {
            // The requester's loss probe: tell it again all that is missing.
            let high = held.high;
            nak_missing(qp, cx, epsn, high, u64::MAX);
        }
        return true;
    }
    let cost = pkt.payload.len() + PACKET_COST;
    if held.by_psn.len() >= MAX_HELD {
        return false;
    }
    let Ok(payload) = cx.body(pkt.payload).to_boxed() else {
        return false;
    };
    if !cx.held_budget.take(cost) {
        return false;
    }
    held.by_psn.insert(
        p,
        HeldPacket {
            repr: pkt.repr,
            payload,
            cost,
            budget: cx.held_budget.clone(),
        },
    );
    cx.count(&mut qp.counters, Counter::HeldOutOfSequence);
    if !psn::lt(p, from) {
        held.high = psn::add(p, 1);
    }
    let resent = held.naked.remove(&p);
    nak_missing(qp, cx, from, p, u64::MAX);
    if let Some(serial) = resent {
        renak_older(qp, cx, serial);
    }
    if bth.ack_req {
        reply::ack(qp, cx, psn::prev(epsn));
    }
    true
}

/// Send a marked sequence NAK for each PSN from `from` up to (not
/// including) `to` that is not held and was last NAKed before the NAK of
/// serial `before` (or never), at most [`MAX_NAKS`] of them.
fn nak_missing(qp: &mut QpCtx, cx: &mut Ctx<'_>, from: u32, to: u32, before: u64) {
    let mut q = from;
    let mut sent = 0;
    while psn::lt(q, to) && sent < MAX_NAKS {
        let held = &mut qp.resp.held;
        let due = !held.by_psn.contains_key(&q) && held.naked.get(&q).is_none_or(|&s| s < before);
        if due {
            held.naked.insert(q, held.serial);
            held.serial += 1;
            reply::sequence_nak(qp, cx, q, true);
            sent += 1;
        }
        q = psn::add(q, 1);
    }
}

/// A resent packet NAKed with serial `serial` arrived: NAK again the
/// PSNs still missing that were NAKed before it.
fn renak_older(qp: &mut QpCtx, cx: &mut Ctx<'_>, serial: u64) {
    let held = &qp.resp.held;
    if held.by_psn.is_empty() {
        return;
    }
    let (epsn, high) = (qp.resp.epsn, held.high);
    nak_missing(qp, cx, epsn, high, serial);
}

/// After request `p` was executed in order: execute the held ones that
/// are now in order and acknowledge them (the gaps after them were NAKed
/// when they were found), and NAK again what was NAKed before `p`.
pub(super) fn release(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) {
    if qp.resp.held.is_empty() {
        return;
    }
    let resent = qp.resp.held.naked.remove(&p);
    // Whether the last request executed here asked for no ACK.
    let mut unacknowledged = false;
    while let Some(h) = qp.resp.held.by_psn.remove(&qp.resp.epsn) {
        let pkt = Packet {
            repr: h.repr,
            payload: &h.payload,
        };
        let running = matches!(qp.state(), QpState::Rtr | QpState::Rts | QpState::Sqd);
        if !running {
            qp.resp.held.clear();
            return;
        }
        if let Err(refusal) = super::connected(qp, cx, &pkt) {
            qp.resp.held.clear();
            reject(qp, cx, &pkt, refusal);
            return;
        }
        unacknowledged = !pkt.repr.bth.ack_req;
    }
    let epsn = qp.resp.epsn;
    // Requests the expected PSN went past (a READ's span) never come due.
    let held = &mut qp.resp.held;
    held.by_psn.retain(|&p, _| psn::lt(epsn, p));
    held.naked.retain(|&p, _| !psn::lt(p, epsn));
    if unacknowledged {
        reply::ack(qp, cx, psn::prev(epsn));
    }
    if let Some(serial) = resent {
        renak_older(qp, cx, serial);
    }
}

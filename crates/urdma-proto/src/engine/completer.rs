//! The completer: ACKs, NAKs, READ responses and atomic ACKs received by
//! the requester, the retransmission timer, and completion of send WQEs.

use super::qp::QpCtx;
use super::timer::TimerKind;
use super::wqe::{Payload, SendOp};
use super::{drop_packet, psn, requester, Counter, Ctx};
use crate::mr::scatter;
use crate::types::{QpState, WcStatus};
use urdma_wire::{rnr_timer_micros, AckSyndrome, NakCode, OpKind, Packet};

/// Shortest time between two go-backs below the same horizon (ns).
const MIN_REWIND_GAP_NS: u64 = 100_000;

/// PSN of the next packet the send pointer would transmit.
fn send_psn(qp: &QpCtx) -> u32 {
    match qp.req.sq.get(qp.req.send_pos) {
        Some(w) => psn::add(w.first_psn, qp.req.send_pkt),
        None => qp.req.tail_psn,
    }
}

fn outstanding(qp: &QpCtx) -> bool {
    psn::diff(send_psn(qp), qp.req.una) > 0
}

/// Point the send pointer at PSN `to` (past the queue if no WQE holds it).
fn seek(qp: &mut QpCtx, to: u32) {
    (qp.req.send_pos, qp.req.send_pkt) = requester::locate(qp, to).unwrap_or((qp.req.sq.len(), 0));
}

/// Move the send pointer back to `to` (go-back-N).
fn rewind(qp: &mut QpCtx, to: u32) {
    qp.req.rd_atomic.clear();
    seek(qp, to);
}

/// Go back to `una` to recover from a loss that a NAK, a gap in READ
/// responses or an implicit NAK revealed. After such a rewind everything
/// up to the horizon (the first PSN not yet sent then) is on its way
/// again, and packets sent before the rewind can still cause NAKs and
/// gaps: below the horizon, another rewind from the same `una` waits a
/// quarter of the ACK timeout, so that stale signs of loss cannot start a
/// storm of go-backs, while a loss further on (after progress) is repaired
/// at once.
fn rewind_for_loss(qp: &mut QpCtx, now: u64) {
    if rewind_due(qp, now) {
        go_back(qp, now);
    }
}

/// Resend from the oldest unacknowledged PSN and set the horizon below
/// which later signs of the same loss are stale.
fn go_back(qp: &mut QpCtx, now: u64) {
    let una = qp.req.una;
    qp.req.resend_horizon = Some(qp.req.high_psn);
    qp.req.last_rewind_at = now;
    qp.req.last_rewind_psn = una;
    qp.req.sack_high = None;
    qp.req.rtt.on_resend();
    rewind(qp, una);
}

/// Whether a loss signal at `now` calls for a go-back: not while the
/// retransmissions of the last one may still be arriving (see
/// [`rewind_for_loss`]).
fn rewind_due(qp: &QpCtx, now: u64) -> bool {
    let una = qp.req.una;
    if qp.req.resend_horizon.is_some_and(|h| psn::lt(una, h)) {
        // Progress since the last go-back shows that its retransmissions
        // are arriving; one from further on is then worth it at once.
        let progressed = psn::lt(qp.req.last_rewind_psn, una);
        let gap = qp
            .ack_timeout_ns()
            .map_or(MIN_REWIND_GAP_NS, |t| (t / 4).max(MIN_REWIND_GAP_NS));
        if !progressed && now < qp.req.last_rewind_at.saturating_add(gap) {
            return false;
        }
    }
    true
}

/// What names a packet missing at a selective peer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    /// A marked NAK: the peer NAKs a resent packet again only once a
    /// later resend arrived, about a round trip after the first one.
    Nak,
    /// A marked ACK that reaches past the packet: ACKs sent before the
    /// resend arrived still say so up to a round trip after it.
    Ack,
}

/// Whether `p` may be resent on a selective peer's `word`: not if it was
/// resent less than a round trip ago for an ACK, half of one for a NAK
/// (room for the round trips that come shorter than the average), since
/// that copy may still be on its way, or the news of it.
fn resend_due(qp: &QpCtx, now: u64, p: u32, word: Word) -> bool {
    let rtt = qp.req.rtt.srtt().unwrap_or(super::rtt::MIN_PROBE_NS).max(1);
    let wait = if word == Word::Nak { rtt / 2 } else { rtt };
    qp.req
        .resent_at
        .get(&p)
        .is_none_or(|&t| now.saturating_sub(t) >= wait)
}

/// Note forward progress: reset retry counters and the timer.
/// Move the oldest unacknowledged PSN forward to `to`, opening the send
/// window by the packets acknowledged.
fn set_una(qp: &mut QpCtx, to: u32) {
    let n = psn::diff(to, qp.req.una);
    if n > 0 {
        qp.req.window.on_ack(n as u32);
    }
    qp.req.una = to;
}

fn progressed(qp: &mut QpCtx, cx: &Ctx<'_>) {
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_left = qp.attr.rnr_retry;
    if qp
        .req
        .resend_horizon
        .is_some_and(|h| psn::le(h, qp.req.una))
    {
        qp.req.resend_horizon = None;
    }
    while let Some(&last) = qp.req.rd_atomic.front() {
        if psn::lt(last, qp.req.una) {
            qp.req.rd_atomic.pop_front();
        } else {
            break;
        }
    }
    // A send pointer that a go-back or an RNR wait left behind what is
    // now acknowledged moves up: what is acknowledged is never sent again
    // (a READ chunk sent again would count against the READ credit with
    // no response to come).
    let una = qp.req.una;
    if psn::lt(send_psn(qp), una) {
        seek(qp, una);
    }
    qp.req.rtt.on_ack(una, cx.now);
    qp.req.window.on_una(una);
    if qp.req.sack_high.is_some_and(|h| psn::le(h, qp.req.una)) {
        qp.req.sack_high = None;
    }
    if !qp.req.resent_at.is_empty() {
        let una = qp.req.una;
        qp.req.resent_at.retain(|&p, _| psn::le(una, p));
    }
    let busy = outstanding(qp);
    let deadline = busy.then(|| qp.ack_timeout_ns()).flatten();
    qp.timers
        .set(TimerKind::Retransmit, deadline.map(|t| cx.now + t));
    let probe = (busy && qp.req.peer_selective).then(|| qp.probe_deadline(cx.now));
    qp.timers.set(TimerKind::Probe, probe);
}

/// Fail the head WQE and move the QP to ERR.
fn fail(qp: &mut QpCtx, cx: &mut Ctx<'_>, status: WcStatus, vendor_err: u32) {
    tracing::debug!(qpn = qp.qpn, ?status, "send work request failed");
    qp.complete_head(cx, status, vendor_err);
    qp.enter_error(cx, None);
}

/// Complete every SEND/WRITE that ends before `p`. Returns false (after
/// rewinding) if an unfinished READ or atomic lies before `p`: its
/// responses were lost.
fn settle_before(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) -> bool {
    while let Some(w) = qp.req.sq.front() {
        let last = psn::add(w.first_psn, w.npsn - 1);
        // Never acknowledge what was never transmitted in full.
        if !psn::lt(last, p) || !psn::lt(last, qp.req.high_psn) {
            break;
        }
        if w.op.is_read_or_atomic() {
            rewind_for_loss(qp, cx.now);
            return false;
        }
        set_una(qp, psn::add(last, 1));
        qp.complete_head(cx, WcStatus::Success, 0);
        progressed(qp, cx);
    }
    true
}

/// Acknowledge everything up to and including `p`.
fn ack_through(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) {
    let next = psn::add(p, 1);
    if psn::diff(next, qp.req.una) <= 0 || psn::diff(p, qp.req.high_psn) >= 0 {
        return;
    }
    if !settle_before(qp, cx, next) {
        return;
    }
    if let Some(w) = qp.req.sq.front() {
        let sent = psn::lt(w.first_psn, qp.req.high_psn);
        if sent && psn::le(w.first_psn, p) {
            if w.op.is_read_or_atomic() {
                // The responder executed it, yet its responses never came.
                rewind_for_loss(qp, cx.now);
                return;
            }
            set_una(qp, next);
            progressed(qp, cx);
        }
    }
}

/// Handle a response packet (ACK, NAK, READ response, atomic ACK).
pub(super) fn on_response(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    if !matches!(qp.state(), QpState::Rts | QpState::Sqd) {
        drop_packet(qp, cx, "response in a state that expects none");
        return;
    }
    let p = pkt.repr.bth.psn;
    if psn::diff(p, qp.req.high_psn) >= 0 {
        drop_packet(qp, cx, "response for a PSN never sent");
        return;
    }
    match pkt.repr.bth.opcode.info().kind {
        OpKind::Ack => {
            if pkt.repr.bth.selective && cx.selective {
                qp.req.peer_selective = true;
                // The peer answers: a probe is for when it falls silent
                // (a lost last packet or resend), one probe timeout after
                // its last word. While its ACKs and NAKs come, they
                // repair what they report.
                if outstanding(qp) {
                    qp.rearm_probe(cx.now);
                }
            }
            let Some(aeth) = pkt.repr.aeth else { return };
            let reach = (pkt.repr.bth.selective && cx.selective).then_some(aeth.msn);
            on_aeth(qp, cx, p, aeth.syndrome, reach);
        }
        OpKind::ReadResponse => on_read_response(qp, cx, pkt),
        OpKind::AtomicAck => on_atomic_ack(qp, cx, pkt),
        _ => drop_packet(qp, cx, "not a response"),
    }
}

/// Handle an ACK or NAK for `p`. `reach` is set if it carries the
/// selective mark: a marked NAK then says the responder kept what came
/// after `p` ([`requester::resend_one`]) and received requests up to
/// (not including) `reach`.
fn on_aeth(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, syndrome: AckSyndrome, reach: Option<u32>) {
    let selective = reach.is_some();
    if let Some(r) = reach.filter(|&r| psn::lt(qp.req.una, r) && psn::le(r, qp.req.high_psn)) {
        if qp.req.sack_high.is_none_or(|h| psn::lt(h, r)) {
            qp.req.sack_high = Some(r);
        }
    }
    match syndrome {
        AckSyndrome::Ack { .. } => {
            ack_through(qp, cx, p);
            // A marked ACK of `p` that reaches past `p + 1` says `p + 1`
            // is missing there: its NAK or its resend was lost.
            let una = qp.req.una;
            let next = psn::add(p, 1);
            let missing = una == next && reach.is_some_and(|r| psn::lt(psn::add(next, 1), r));
            if missing && resend_due(qp, cx.now, una, Word::Ack) {
                requester::resend_one(qp, cx, una);
            }
        }
        AckSyndrome::RnrNak { timer } => {
            cx.count(&mut qp.counters, Counter::RnrNaksReceived);
            if psn::lt(p, qp.req.una) {
                return;
            }
            ack_through(qp, cx, psn::prev(p));
            if qp.req.rnr_left == 0 {
                fail(qp, cx, WcStatus::RnrRetryExcErr, 0);
                return;
            }
            if qp.req.rnr_left != 7 {
                qp.req.rnr_left -= 1;
            }
            // From `p`, or from an earlier READ or atomic whose responses
            // were lost (the ACK of what precedes `p` left `una` there):
            // going on from `p` would leave that one behind.
            let una = qp.req.una;
            rewind(qp, una);
            // What the responder kept past the refused request may be gone.
            qp.req.sack_high = None;
            let wait = rnr_timer_micros(timer) * 1000;
            qp.timers.set(TimerKind::RnrBackoff, Some(cx.now + wait));
            qp.timers.stop(TimerKind::Retransmit);
            qp.timers.stop(TimerKind::Probe);
        }
        AckSyndrome::Nak(code) => {
            if psn::lt(p, qp.req.una) {
                return;
            }
            if selective && cx.selective && code == NakCode::PsnSequenceError {
                cx.count(&mut qp.counters, Counter::SeqNaksReceived);
                // `p` alone is missing; a marked NAK acknowledges nothing.
                // A READ or atomic request is resent by going back. The
                // retransmission timer, which only progress restarts,
                // bounds how long such NAKs can go on.
                if !resend_due(qp, cx.now, p, Word::Nak) {
                    return;
                }
                if !requester::resend_one(qp, cx, p) && rewind_due(qp, cx.now) {
                    go_back(qp, cx.now);
                }
                // Outside a congestion episode a loss is taken for
                // corruption and leaves the window alone.
                if qp.req.loss_is_congestion(cx.ecn) {
                    let (una, high) = (qp.req.una, qp.req.high_psn);
                    qp.req.window.on_selective_loss(una, high);
                }
                return;
            }
            ack_through(qp, cx, psn::prev(p));
            if code == NakCode::PsnSequenceError {
                cx.count(&mut qp.counters, Counter::SeqNaksReceived);
                // A NAK of a loss already being repaired spends nothing,
                // even with no retry left.
                if !rewind_due(qp, cx.now) {
                    return;
                }
                if qp.req.retry_left == 0 {
                    fail(qp, cx, WcStatus::RetryExcErr, 0);
                    return;
                }
                go_back(qp, cx.now);
                qp.req.window.on_loss();
                qp.req.retry_left -= 1;
                return;
            }
            cx.count(&mut qp.counters, Counter::ErrorNaksReceived);
            let status = match code {
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                _ => WcStatus::RemInvReqErr,
            };
            fail(qp, cx, status, syndrome.to_u8() as u32);
        }
    }
}

/// Common checks of READ responses and atomic ACKs: settle earlier
/// WQEs, insist on in-order arrival. Returns true if `p` is the next
/// expected response PSN of the head WQE.
fn accept_in_order(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) -> bool {
    if psn::lt(p, qp.req.una) {
        cx.count(&mut qp.counters, Counter::Duplicates);
        return false;
    }
    // WQEs wholly before the head WQE holding p.
    loop {
        let Some(w) = qp.req.sq.front() else {
            return false;
        };
        let d = psn::diff(p, w.first_psn);
        if d >= 0 && (d as u32) < w.npsn {
            break;
        }
        let queued = qp.req.sq.len();
        let end = psn::add(w.first_psn, w.npsn);
        if d < 0 || !settle_before(qp, cx, end) || qp.req.sq.len() == queued {
            return false;
        }
    }
    if p != qp.req.una {
        // A response is missing: ask again once per gap.
        rewind_for_loss(qp, cx.now);
        return false;
    }
    true
}

fn on_read_response(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    if !accept_in_order(qp, cx, p) {
        drop_packet(qp, cx, "READ response out of order");
        return;
    }
    let mtu = qp.mtu();
    let Some(w) = qp.req.sq.front() else { return };
    if w.op != SendOp::Read {
        fail(qp, cx, WcStatus::BadRespErr, 0);
        return;
    }
    let k = psn::diff(p, w.first_psn) as usize;
    let off = k * mtu;
    let expect = mtu.min(w.len.saturating_sub(off));
    if pkt.payload.len() != expect {
        fail(qp, cx, WcStatus::BadRespErr, 0);
        return;
    }
    let ok = match &w.payload {
        Payload::Sges(s) => cx.body(pkt.payload).scatter_to(s, off).is_ok(),
        Payload::Inline(_) => false,
    };
    if !ok {
        fail(qp, cx, WcStatus::LocProtErr, 0);
        return;
    }
    let done = k + 1 == w.npsn as usize;
    set_una(qp, psn::add(p, 1));
    if done {
        qp.complete_head(cx, WcStatus::Success, 0);
    }
    progressed(qp, cx);
}

fn on_atomic_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    if !accept_in_order(qp, cx, p) {
        drop_packet(qp, cx, "atomic ACK out of order");
        return;
    }
    let Some(w) = qp.req.sq.front() else { return };
    let Some(ack) = pkt.repr.atomic_ack_eth else {
        return;
    };
    if !w.op.is_atomic() {
        fail(qp, cx, WcStatus::BadRespErr, 0);
        return;
    }
    let ok = match &w.payload {
        Payload::Sges(s) => scatter(s, 0, &ack.orig.to_ne_bytes()).is_ok(),
        Payload::Inline(_) => false,
    };
    if !ok {
        fail(qp, cx, WcStatus::LocProtErr, 0);
        return;
    }
    set_una(qp, psn::add(p, 1));
    qp.complete_head(cx, WcStatus::Success, 0);
    progressed(qp, cx);
}

/// The probe timer expired with no ACK or NAK from the peer for a probe
/// timeout (and no progress): resend the oldest
/// unacknowledged packet and the last one sent to a selective peer, asking
/// for ACKs, and wait twice as long for the next probe. The first fills
/// the gap that holds the QP back (a lost resend) or is answered with an
/// ACK; the second fills a lost tail or is answered with a marked NAK of
/// every PSN still missing, which are then resent as after any NAK.
/// No retry is spent: the retransmission timer still bounds a QP that
/// hears nothing.
fn probe(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    let waiting = qp.timers.is_running(TimerKind::RnrBackoff);
    if !outstanding(qp)
        || waiting
        || !qp.req.peer_selective
        || !matches!(qp.state(), QpState::Rts | QpState::Sqd)
    {
        return;
    }
    let (last, una) = (psn::prev(qp.req.high_psn), qp.req.una);
    let oldest = requester::resend_one(qp, cx, una);
    let newest = last != una && requester::resend_one(qp, cx, last);
    if oldest || newest {
        cx.count(&mut qp.counters, Counter::Probes);
    }
    qp.req.rtt.on_probe();
    let at = qp.probe_deadline(cx.now);
    qp.timers.set(TimerKind::Probe, Some(at));
}

/// Handle the retransmission timer, then transmit what is allowed.
pub(super) fn on_timer(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    if qp.timers.take_expired(TimerKind::Retransmit, cx.now)
        && outstanding(qp)
        && matches!(qp.state(), QpState::Rts | QpState::Sqd)
    {
        cx.count(&mut qp.counters, Counter::Timeouts);
        if qp.req.retry_left == 0 {
            fail(qp, cx, WcStatus::RetryExcErr, 0);
            return;
        }
        qp.req.retry_left -= 1;
        // With a selective peer and no sign of congestion, a timeout
        // follows a run of losses (a lost resend, probe or ACK): halve the
        // window rather than close it.
        if qp.req.peer_selective && !qp.req.loss_is_congestion(cx.ecn) {
            qp.req.window.on_loss();
        } else {
            qp.req.window.on_timeout();
        }
        qp.req.resend_horizon = None;
        // A selective peer that reported holding packets past the oldest
        // unacknowledged one needs that one alone, the first time;
        // otherwise, or again, go back N.
        let una = qp.req.una;
        let first = qp.req.retry_left + 1 >= qp.attr.retry_cnt;
        let held = qp.req.peer_selective && qp.req.sack_high.is_some_and(|h| psn::lt(una, h));
        if !(first && held && requester::resend_one(qp, cx, una)) {
            rewind_for_loss(qp, cx.now);
        }
        let deadline = qp.ack_timeout_ns().map(|t| cx.now + t);
        qp.timers.set(TimerKind::Retransmit, deadline);
    }
    if qp.timers.take_expired(TimerKind::Probe, cx.now) {
        probe(qp, cx);
    }
    // Paced: the pump below sends what the bucket now allows.
    qp.timers.take_expired(TimerKind::Pace, cx.now);
    if qp.timers.take_expired(TimerKind::RnrBackoff, cx.now) {
        let deadline = qp.ack_timeout_ns().map(|t| cx.now + t);
        qp.timers.set(TimerKind::Retransmit, deadline);
    }
    // A revisit of the driver's rings: the pump below takes its sends; in
    // ERR its receives are flushed too.
    if qp.timers.take_expired(TimerKind::Revisit, cx.now) && qp.state() == QpState::Err {
        super::rings::flush_rings(qp, cx);
    }
    requester::pump(qp, cx);
}

//! What the responder sends back on RC: ACKs (coalesced within a batch),
//! NAKs, READ responses and atomic ACKs, in order (those that follow a
//! READ still being answered wait behind it, [`super::outbound`]).

use super::outbound;
use crate::engine::qp::QpCtx;
use crate::engine::{psn, Counter, Ctx};
use urdma_wire::{AckSyndrome, Aeth, AtomicAckEth, Bth, NakCode, Opcode, Packet, PacketRepr};

/// ACK credit field value meaning "no end-to-end credits in use".
const NO_CREDITS: u8 = 31;

/// The syndrome of a positive acknowledgement.
const ACK: AckSyndrome = AckSyndrome::Ack {
    credits: NO_CREDITS,
};

/// Queue a response (no payload) for the connected peer, behind any
/// READ responses still to send ([`super::outbound`]); `rd_atomic` for an
/// atomic ACK.
fn transmit(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, rd_atomic: bool) {
    outbound::respond(qp, cx, *repr, rd_atomic);
}

/// Queue a response after any ACK held back, keeping responses in order.
fn reply(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, rd_atomic: bool) {
    flush_ack(qp, cx);
    transmit(qp, cx, repr, rd_atomic);
}

/// Send the ACK held back while a batch of packets was handled.
pub(crate) fn flush_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    if let Some(p) = qp.resp.ack_due.take() {
        emit_aeth(qp, cx, p, ACK, true);
    }
}

/// Send an ACK or NAK. Within a batch, plain ACKs are coalesced: only the
/// last one goes out, when the batch ends or before any other response.
pub(super) fn send_aeth(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, syndrome: AckSyndrome) {
    if cx.batching && matches!(syndrome, AckSyndrome::Ack { .. }) {
        if qp.resp.ack_due.replace(p).is_none() {
            cx.deferred_acks.push(qp.qpn);
        }
        return;
    }
    flush_ack(qp, cx);
    emit_aeth(qp, cx, p, syndrome, true);
}

/// The AETH of a response: `syndrome` and the current MSN.
fn aeth(qp: &QpCtx, syndrome: AckSyndrome) -> Option<Aeth> {
    Some(Aeth {
        syndrome,
        msn: qp.resp.msn,
    })
}

/// Mark the ACK or NAK `repr` for `p`, if the requester marks its
/// requests selective: it then carries, in the MSN's place, how far the
/// requests received reach (see [`super::reorder`]): past a gap, the PSN
/// after the highest one held, told in NAKs and in an ACK of the PSN just
/// before the gap; else `p + 1`.
fn mark_aeth(qp: &QpCtx, repr: &mut PacketRepr, p: u32, syndrome: AckSyndrome) {
    if !qp.resp.peer_marks {
        return;
    }
    repr.bth.selective = true;
    let next = psn::add(p, 1);
    let nak = !matches!(syndrome, AckSyndrome::Ack { .. });
    let reach = (qp.resp.held.gap_reach(qp.resp.epsn))
        .filter(|_| nak || next == qp.resp.epsn)
        .unwrap_or(next);
    if let Some(a) = repr.aeth.as_mut() {
        a.msn = reach;
    }
}

/// Send an ACK or NAK for PSN `p` now, marked for a selective requester
/// if `mark` says so.
fn emit_aeth(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, syndrome: AckSyndrome, mark: bool) {
    let mut repr = PacketRepr::new(Bth::new(Opcode::RcAck, qp.attr.dest_qp_num, p));
    repr.aeth = aeth(qp, syndrome);
    if mark {
        mark_aeth(qp, &mut repr, p, syndrome);
    }
    transmit(qp, cx, &repr, false);
}

/// NAK PSN `p` for a sequence error (a request after it came first): the
/// expected PSN, or with `selective` any missing PSN (see
/// [`super::reorder`]).
pub(super) fn sequence_nak(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, selective: bool) {
    cx.count(&mut qp.counters, Counter::SeqNaksSent);
    flush_ack(qp, cx);
    emit_aeth(
        qp,
        cx,
        p,
        AckSyndrome::Nak(NakCode::PsnSequenceError),
        selective,
    );
}

/// Acknowledge PSN `p`.
pub(super) fn ack(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) {
    send_aeth(qp, cx, p, ACK);
}

/// Acknowledge an executed SEND or WRITE packet if its sender asked.
pub(super) fn ack_if_asked(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    if pkt.repr.bth.ack_req {
        ack(qp, cx, pkt.repr.bth.psn);
    }
}

/// Answer a READ: its responses go out from `run.first`, a window at a
/// time ([`super::outbound`]), after any ACK held back.
pub(super) fn read_responses(qp: &mut QpCtx, cx: &mut Ctx<'_>, run: outbound::ReadRun<'_>) {
    flush_ack(qp, cx);
    outbound::start_read(qp, cx, run);
}

/// Send the atomic ACK of PSN `p` with the original value `orig`.
pub(super) fn atomic_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, orig: u64) {
    let mut repr = PacketRepr::new(Bth::new(Opcode::RcAtomicAck, qp.attr.dest_qp_num, p));
    repr.aeth = aeth(qp, ACK);
    repr.atomic_ack_eth = Some(AtomicAckEth { orig });
    reply(qp, cx, &repr, true);
}

//! What the responder sends back on RC: ACKs (coalesced within a batch),
//! NAKs, READ responses and atomic ACKs, in order.

use super::check::Range;
use crate::engine::qp::QpCtx;
use crate::engine::requester::STAGE_BYTES;
use crate::engine::tx::{self, PayloadSrc};
use crate::engine::{psn, Counter, Ctx};
use urdma_wire::{AckSyndrome, Aeth, AtomicAckEth, Bth, NakCode, Opcode, Packet, PacketRepr};

/// ACK credit field value meaning "no end-to-end credits in use".
const NO_CREDITS: u8 = 31;

/// The syndrome of a positive acknowledgement.
const ACK: AckSyndrome = AckSyndrome::Ack {
    credits: NO_CREDITS,
};

/// Queue a response for the connected peer. A READ response to a device
/// of this NIC names bytes by reference only once they are in the
/// requester's buffer ([`read_responses`]): read when the READ executes,
/// as IBTA orders it before the requests that follow it on the QP (a
/// WRITE or atomic of the same requester to the same bytes), which a copy
/// made later, when the requester places it, would not be.
fn transmit(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, payload: PayloadSrc<'_>) {
    let Some(dst) = qp.remote else { return };
    let icrc = tx::Icrc::for_peer(qp.internal, None);
    let _ = tx::send(cx, &mut qp.counters, dst, repr, payload, icrc);
}

/// Queue a response after any ACK held back, keeping responses in order.
fn reply(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, payload: PayloadSrc<'_>) {
    flush_ack(qp, cx);
    transmit(qp, cx, repr, payload);
}

/// Send the ACK held back while a batch of packets was handled.
pub fn flush_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
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
    transmit(qp, cx, &repr, PayloadSrc::Empty);
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

/// Number of PSNs (responses) of a READ of `len` bytes.
pub(super) fn read_span(qp: &QpCtx, len: usize) -> u32 {
    len.div_ceil(qp.mtu()).max(1) as u32
}

/// Send the responses to a READ of `len` bytes from `range` (none for
/// zero bytes), starting at PSN `first`.
pub(super) fn read_responses(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    range: Option<Range<'_>>,
    len: usize,
    first: u32,
) {
    let mtu = qp.mtu();
    let n = read_span(qp, len) as usize;
    // A device of this NIC named the READ's buffer: the data goes straight
    // there now, in the READ's turn, and the responses name it in place.
    let placed = match (cx.sink, range) {
        (Some(buf), Some((mr, off))) if qp.internal && len > 0 => {
            buf.fill_from(&mr.mem, off, len).is_ok().then_some(buf)
        }
        _ => None,
    };
    // The region's bytes, read up to STAGE_BYTES at once where that pays.
    let mut ahead = tx::ReadAhead::default();
    let read_ahead = n > 1 && range.is_some_and(|(mr, _)| mr.mem.prefers_large_reads(mtu));
    for i in 0..n {
        let opcode = match (i, n) {
            (_, 1) => Opcode::RcReadResponseOnly,
            (0, _) => Opcode::RcReadResponseFirst,
            (i, n) if i + 1 == n => Opcode::RcReadResponseLast,
            _ => Opcode::RcReadResponseMiddle,
        };
        let p = psn::add(first, i as u32);
        let mut repr = PacketRepr::new(Bth::new(opcode, qp.attr.dest_qp_num, p));
        if opcode.info().has_aeth {
            repr.aeth = aeth(qp, ACK);
        }
        let start = i * mtu;
        let plen = mtu.min(len - start.min(len));
        let in_place = placed
            .filter(|_| plen > 0)
            .and_then(|b| b.piece(start, plen));
        let src = match (in_place, range) {
            (Some(piece), _) => PayloadSrc::Reference(piece),
            (None, Some((mr, off))) if plen > 0 && read_ahead => {
                let want = (len - start).min(STAGE_BYTES).max(plen);
                match ahead
                    .get_or_read(start, plen, |at, out| mr.mem.read_into(off + at, want, out))
                {
                    Ok(Some(b)) => PayloadSrc::Bytes(b),
                    // Read packet by packet, which reports the error.
                    _ => PayloadSrc::Region(mr, off + start, plen),
                }
            }
            (None, Some((mr, off))) if plen > 0 => PayloadSrc::Region(mr, off + start, plen),
            _ => PayloadSrc::Empty,
        };
        reply(qp, cx, &repr, src);
    }
}

/// Send the atomic ACK of PSN `p` with the original value `orig`.
pub(super) fn atomic_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, orig: u64) {
    let mut repr = PacketRepr::new(Bth::new(Opcode::RcAtomicAck, qp.attr.dest_qp_num, p));
    repr.aeth = aeth(qp, ACK);
    repr.atomic_ack_eth = Some(AtomicAckEth { orig });
    reply(qp, cx, &repr, PayloadSrc::Empty);
}

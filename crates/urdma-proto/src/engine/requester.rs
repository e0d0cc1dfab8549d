//! The requester: turns send WQEs into request packets, segmenting by
//! path MTU, within the send window and the READ/atomic credit.

use super::qp::QpCtx;
use super::timer::TimerKind;
use super::tx::{self, PayloadSrc};
use super::wqe::{Payload, SendOp, SendWqe};
use super::{device_window, psn, Counter, Ctx, Transmit};
use crate::types::{AsyncEventKind, QpState, QpType, WcStatus};
use urdma_wire::{AtomicEth, Bth, Deth, Opcode, PacketRepr, Position, Reth, Transport};

pub(crate) mod stage;
pub(crate) use stage::STAGE_BYTES;

/// Most PSNs outstanding (sent, not acknowledged) per QP.
pub const WINDOW: u32 = 256;
/// Most PSNs outstanding with a selective peer, counting those it reported
/// received out of sequence, which leave the window (see [`window_base`]).
pub(crate) const SELECTIVE_SPAN: u32 = 4 * WINDOW;
/// A request asks for an ACK at least this often (in packets).
pub(crate) const ACK_EVERY: u32 = 32;
/// A request asks for an ACK at least once per quarter of the round
/// trip, and not more often for that reason than this (ns).
pub(crate) const MIN_ACK_GAP_NS: u64 = 50_000;
/// Largest READ request, in response packets; longer READs are split.
pub(crate) const READ_CHUNK: u32 = 64;

/// Transmit what the window allows. Called after every input.
pub(crate) fn pump(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    // A local operation waiting for the SQ to empty goes first.
    super::local_ops::run_held(qp, cx);
    super::rings::pump_rings(qp, cx, |qp, cx| match qp.qp_type {
        QpType::Ud => pump_ud(qp, cx),
        QpType::Rc | QpType::Uc => pump_connected(qp, cx),
    });
}

fn pump_connected(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    let rc = qp.qp_type == QpType::Rc;
    // ACKs handled before this call may have shrunk the QP's part.
    device_window::sync(qp, cx.device_inflight);
    loop {
        let state = qp.state();
        if state != QpState::Rts && state != QpState::Sqd {
            return;
        }
        if let Some(t) = qp.timers.deadline(TimerKind::RnrBackoff) {
            if cx.now < t {
                return;
            }
            qp.timers.stop(TimerKind::RnrBackoff);
        }
        let pos = qp.req.send_pos;
        let Some(wqe) = qp.req.sq.get(pos) else { break };
        if state == QpState::Sqd && qp.req.send_pkt == 0 {
            break;
        }
        if let Some(err) = wqe.local_error {
            if pos == 0 {
                qp.complete_head(cx, err, 0);
                qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
            }
            return;
        }
        // A fenced request waits for the READs and atomics before it to
        // complete (their responses to arrive).
        if wqe.fence && qp.req.sq.iter().take(pos).any(|w| w.op.is_read_or_atomic()) {
            break;
        }
        let cur = psn::add(wqe.first_psn, qp.req.send_pkt);
        if rc
            && (psn::diff(cur, window_base(qp, cx.ecn)) >= qp.req.window.size() as i32
                || psn::diff(cur, qp.req.una) >= SELECTIVE_SPAN as i32)
        {
            break;
        }
        if wqe.op.is_read_or_atomic()
            && qp.req.rd_atomic.len() >= usize::from(qp.attr.max_rd_atomic.max(1))
        {
            break;
        }
        if device_window::holds_back(qp, cur, *cx.device_inflight, cx.device_window) {
            break;
        }
        let Some(dst) = qp.remote else { return };
        // Paced after congestion notifications: wait for a token.
        let at = qp.req.rate.next_send(cx.now);
        if at > cx.now {
            qp.timers.set(TimerKind::Pace, Some(at));
            break;
        }
        if !transmit(qp, cx, dst, cur, false) {
            return;
        }
        if psn::diff(cur, qp.req.high_psn) < 0 {
            cx.count(&mut qp.counters, Counter::Retransmits);
        } else if rc {
            qp.req.rtt.on_send(cur, cx.now);
        }
        let wqe = &qp.req.sq[pos];
        if qp.req.send_pkt >= wqe.npsn {
            let end = psn::add(wqe.first_psn, wqe.npsn);
            if psn::lt(qp.req.high_psn, end) {
                qp.req.high_psn = end;
            }
            qp.req.send_pos += 1;
            qp.req.send_pkt = 0;
            if !rc {
                // UC: no acknowledgements; the WQE is done once sent.
                qp.complete_head(cx, WcStatus::Success, 0);
            }
        } else {
            let next = psn::add(wqe.first_psn, qp.req.send_pkt);
            if psn::lt(qp.req.high_psn, next) {
                qp.req.high_psn = next;
            }
        }
        device_window::sync(qp, cx.device_inflight);
        if rc && !qp.timers.is_running(TimerKind::Retransmit) {
            qp.timers.set(
                TimerKind::Retransmit,
                qp.ack_timeout_ns().map(|t| cx.now + t),
            );
        }
        if rc {
            qp.arm_probe(cx.now);
        }
    }
    if qp.state() == QpState::Sqd && qp.req.send_pkt == 0 {
        let idle = qp.req.send_pos == 0 || qp.req.una == qp.req.tail_psn;
        if idle && !qp.req.drained_reported {
            qp.req.drained_reported = true;
            if qp.attr.en_sqd_async_notify {
                cx.event(AsyncEventKind::SqDrained, qp.qpn);
            }
        }
    }
}

/// Where the send window starts: the oldest unacknowledged PSN, or past
/// it, outside a congestion episode, the PSN after the highest one a
/// selective peer reported received (the packets below it that it lacks
/// are being resent: a loss does not stall the window for a round trip).
fn window_base(qp: &QpCtx, ecn: bool) -> u32 {
    match qp.req.sack_high {
        Some(h) if psn::lt(qp.req.una, h) && !qp.req.loss_is_congestion(ecn) => h,
        _ => qp.req.una,
    }
}

/// The transport of a QP type, as the opcode table names it.
fn transport(qp_type: QpType) -> Transport {
    match qp_type {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// One request packet of a WQE: where it sits in the message and which
/// bytes of the message it carries (for a READ request: asks for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    /// Position in the message.
    position: Position,
    /// Message offset of its data.
    offset: usize,
    /// Data length.
    len: usize,
    /// PSNs it uses (more than one only for a READ request).
    psns: u32,
}

/// The segment of `wqe` that starts at its PSN `k`, with path MTU `mtu`.
fn segment(wqe: &SendWqe, k: u32, mtu: usize) -> Segment {
    let offset = k as usize * mtu;
    let rest = wqe.len.saturating_sub(offset);
    match wqe.op {
        // A READ request covers the same PSN range as the first time, even
        // when resent from the middle of one (the responder answers a
        // duplicate only within the range it remembers).
        SendOp::Read => {
            let psns = (READ_CHUNK - k % READ_CHUNK).min(wqe.npsn - k);
            let len = (psns as usize * mtu).min(rest);
            Segment {
                position: Position::Only,
                offset,
                len,
                psns,
            }
        }
        op if op.is_atomic() => Segment {
            position: Position::Only,
            offset: 0,
            len: wqe.len,
            psns: 1,
        },
        _ => Segment {
            position: Position::of(k, wqe.npsn),
            offset,
            len: mtu.min(rest),
            psns: 1,
        },
    }
}

/// The headers of request packet `seg` of `wqe`: the opcode comes from the
/// opcode table, and the extension headers are the ones its row lists.
/// None if the table has no opcode for it (a WQE the QP type cannot
/// carry; posting refuses those).
fn request_repr(
    t: Transport,
    wqe: &SendWqe,
    seg: Segment,
    bth: Bth,
    src_qp: u32,
) -> Option<PacketRepr> {
    let (kind, imm) = wqe.op.wire_kind();
    let last = seg.position.ends_message();
    let imm = imm.filter(|_| last);
    let ieth = wqe.op.invalidates().filter(|_| last);
    let opcode = match (ieth, seg.position) {
        (Some(_), Position::Last) if t == Transport::Rc => Opcode::RcSendLastInv,
        (Some(_), Position::Only) if t == Transport::Rc => Opcode::RcSendOnlyInv,
        (Some(_), _) => return None,
        (None, _) => Opcode::find(t, kind, seg.position, imm.is_some())?,
    };
    let info = opcode.info();
    let mut repr = PacketRepr::new(Bth { opcode, ..bth });
    repr.bth.solicited = info.has_payload && last && wqe.solicited;
    if info.has_reth {
        let dma_len = if wqe.op == SendOp::Read {
            seg.len
        } else {
            wqe.len
        };
        repr.reth = Some(Reth {
            va: wqe.remote_va.wrapping_add(seg.offset as u64),
            rkey: wqe.rkey,
            dma_len: dma_len as u32,
        });
    }
    if info.has_atomic_eth {
        let (compare, swap_add) = wqe.op.atomic_operands()?;
        repr.atomic_eth = Some(AtomicEth {
            va: wqe.remote_va,
            rkey: wqe.rkey,
            swap_add,
            compare,
        });
    }
    if info.has_deth {
        repr.deth = Some(Deth {
            qkey: wqe.ud?.qkey,
            src_qp,
        });
    }
    if info.has_immdt {
        repr.immdt = imm;
    }
    if info.has_ieth {
        repr.ieth = ieth;
    }
    Some(repr)
}

/// Where the payload of `seg` of `wqe` comes from.
fn payload_of(wqe: &SendWqe, seg: Segment, has_payload: bool) -> PayloadSrc<'_> {
    if !has_payload {
        return PayloadSrc::Empty;
    }
    let (off, len) = (seg.offset, seg.len);
    match &wqe.payload {
        Payload::Inline(b) => PayloadSrc::Bytes(b.get(off..off + len).unwrap_or(&[])),
        Payload::Sges(s) => PayloadSrc::Gather(s, off, len),
    }
}

/// Send the packet (or READ request chunk) at `cur` of `sq[send_pos]`
/// and advance the send pointer; `ask_ack` asks for an acknowledgement
/// whatever its place.
fn send_one(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    dst: std::net::SocketAddr,
    cur: u32,
    ask_ack: bool,
) -> Result<(), tx::PayloadError> {
    let k = qp.req.send_pkt;
    let rc = qp.qp_type == QpType::Rc;
    let window_full_next =
        psn::diff(cur, window_base(qp, cx.ecn)) + 1 >= qp.req.window.size() as i32;
    let wqe = &qp.req.sq[qp.req.send_pos];
    let seg = segment(wqe, k, qp.mtu());
    let mut bth = Bth::new(Opcode::RcSendOnly, qp.attr.dest_qp_num, cur);
    // Also by time, at least once per quarter round trip: a slow (paced)
    // QP's ACKs then come well within its loss-probe timeout.
    let ack_gap = qp.req.rtt.srtt().map(|s| (s / 4).max(MIN_ACK_GAP_NS));
    let ack_due = ack_gap.is_some_and(|g| cx.now.saturating_sub(qp.req.ack_req_at) >= g);
    bth.ack_req = rc
        && !wqe.op.is_read_or_atomic()
        && (ask_ack
            || seg.position.ends_message()
            || (k + 1).is_multiple_of(ACK_EVERY)
            || window_full_next
            || ack_due
            || device_window::asks_ack(qp, cur, *cx.device_inflight, cx.device_window));
    bth.selective = rc && cx.selective;
    let repr =
        request_repr(transport(qp.qp_type), wqe, seg, bth, qp.qpn).ok_or(tx::PayloadError)?;
    if bth.ack_req {
        qp.req.answered_psn = cur;
        qp.req.ack_req_at = cx.now;
    } else if wqe.op.is_read_or_atomic() {
        qp.req.answered_psn = psn::add(wqe.first_psn, wqe.npsn.saturating_sub(1));
    }
    let has_payload = repr.bth.opcode.info().has_payload;
    let staged = match &wqe.payload {
        // A message of several packets is read a run of packets at once
        // (by the send pointer; a resend takes what is there).
        Payload::Sges(s)
            if has_payload
                && seg.len < wqe.len
                && s.first()
                    .is_some_and(|g| g.mr.mem.prefers_large_reads(seg.len)) =>
        {
            qp.req
                .stage
                .bytes(wqe, s, (seg.offset, seg.len), !ask_ack)?
        }
        _ => None,
    };
    let src = staged.map_or_else(|| payload_of(wqe, seg, has_payload), PayloadSrc::Bytes);
    let icrc = tx::Icrc::for_peer(qp.internal, rc.then_some(&qp.req.live));
    tx::send(cx, &mut qp.counters, dst, &repr, src, icrc)?;
    if wqe.op == SendOp::Read && rc && qp.internal {
        if let (Some(t), Payload::Sges(s)) = (cx.tx.back_mut(), &wqe.payload) {
            t.sink = crate::mr::within_one(s, seg.offset, seg.len).and_then(|(sge, at)| {
                super::dma::DmaSource::read_buffer(&sge.mr, at, seg.len, &qp.req.live)
            });
        }
    }
    if seg.position.ends_message() {
        qp.req.stage.release(wqe);
    }
    if wqe.op.is_read_or_atomic() {
        qp.req.rd_atomic.push_back(psn::add(cur, seg.psns - 1));
    }
    qp.req.send_pkt += seg.psns;
    Ok(())
}

/// The send queue entry holding PSN `p` and `p`'s place in it.
pub(super) fn locate(qp: &QpCtx, p: u32) -> Option<(usize, u32)> {
    qp.req.sq.iter().enumerate().find_map(|(i, w)| {
        let d = psn::diff(p, w.first_psn);
        (d >= 0 && (d as u32) < w.npsn).then_some((i, d as u32))
    })
}

/// Resend the one SEND or WRITE packet at PSN `p` (one a selective peer
/// lacks: named by its NAK or ACK, or probed), leaving the send pointer
/// where it is. Returns false if `p` is
/// no such packet (a READ or atomic request, or nothing sent): the caller
/// then goes back N.
pub(super) fn resend_one(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) -> bool {
    let Some((pos, k)) = locate(qp, p) else {
        return false;
    };
    if qp.req.sq[pos].op.is_read_or_atomic() || !psn::lt(p, qp.req.high_psn) {
        return false;
    }
    let Some(dst) = qp.remote else { return true };
    qp.req.rtt.on_resend();
    qp.req.resent_at.insert(p, cx.now);
    let at = (qp.req.send_pos, qp.req.send_pkt);
    (qp.req.send_pos, qp.req.send_pkt) = (pos, k);
    let sent = transmit(qp, cx, dst, p, true);
    (qp.req.send_pos, qp.req.send_pkt) = at;
    if sent {
        cx.count(&mut qp.counters, Counter::Retransmits);
    }
    true
}

/// [`send_one`], with the bytes it sent charged to the QP's rate; a
/// packet that cannot be built from its memory fails the head WQE and
/// moves the QP to ERR (returns false).
fn transmit(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    dst: std::net::SocketAddr,
    cur: u32,
    ask_ack: bool,
) -> bool {
    let before = cx.tx.len();
    if send_one(qp, cx, dst, cur, ask_ack).is_err() {
        qp.complete_head(cx, WcStatus::LocProtErr, 0);
        qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
        return false;
    }
    let bytes: usize = cx.tx.iter().skip(before).map(Transmit::wire_len).sum();
    let srtt = qp.req.rtt.srtt();
    qp.req.rate.sent(cx.now, bytes, srtt);
    true
}

/// The Q_Key bit that marks a controlled Q_Key (QP 1's among them).
pub const CONTROLLED_QKEY: u32 = 0x8000_0000;

fn pump_ud(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    while qp.state() == QpState::Rts {
        let Some(wqe) = qp.req.sq.front() else { break };
        if let Some(err) = wqe.local_error {
            qp.complete_head(cx, err, 0);
            continue;
        }
        let Some(ud) = wqe.ud else {
            qp.complete_head(cx, WcStatus::LocQpOpErr, 0);
            continue;
        };
        let cur = qp.req.tail_psn;
        qp.req.tail_psn = psn::add(cur, 1);
        let seg = Segment {
            position: Position::Only,
            offset: 0,
            len: wqe.len,
            psns: 1,
        };
        let bth = Bth::new(Opcode::UdSendOnly, ud.qpn, cur);
        let Some(mut repr) = request_repr(Transport::Ud, wqe, seg, bth, qp.qpn) else {
            qp.complete_head(cx, WcStatus::LocQpOpErr, 0);
            continue;
        };
        // A controlled Q_Key in the WR names none: the QP's own is sent
        // (IBTA 10.2.5), and only a privileged owner gives a QP one.
        if let Some(d) = repr.deth.as_mut().filter(|d| d.qkey & CONTROLLED_QKEY != 0) {
            d.qkey = qp.attr.qkey;
        }
        let src = payload_of(wqe, seg, true);
        let status = match tx::send(cx, &mut qp.counters, ud.addr, &repr, src, tx::Icrc::Sealed) {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocProtErr,
        };
        qp.req.send_pos = qp.req.send_pos.max(1);
        qp.complete_head(cx, status, 0);
    }
}

#[cfg(test)]
mod tests;

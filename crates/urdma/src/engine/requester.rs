//! The requester: turns send WQEs into request packets, segmenting by
//! path MTU, within the send window and the READ/atomic credit.

use super::qp::QpCtx;
use super::timer::TimerKind;
use super::tx::{self, PayloadSrc};
use super::wqe::{Payload, SendOp};
use super::{psn, Counter, Ctx};
use crate::types::{AsyncEventKind, QpState, QpType, WcStatus};
use urdma_wire::{AtomicEth, Bth, Deth, Opcode, PacketRepr, Reth, DEFAULT_PKEY};

/// Most PSNs outstanding (sent, not acknowledged) per QP.
pub const WINDOW: u32 = 256;
/// A request asks for an ACK at least this often (in packets).
pub const ACK_EVERY: u32 = 32;
/// Largest READ request, in response packets; longer READs are split.
pub const READ_CHUNK: u32 = 64;

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    First,
    Middle,
    Last,
    Only,
}

fn position(k: u32, n: u32) -> Pos {
    match (k, n) {
        (_, 1) => Pos::Only,
        (0, _) => Pos::First,
        (k, n) if k + 1 == n => Pos::Last,
        _ => Pos::Middle,
    }
}

/// The opcode of packet `pos` of a SEND or WRITE on `qp_type`.
fn data_opcode(qp_type: QpType, op: SendOp, pos: Pos) -> Opcode {
    use Opcode::*;
    let rc = qp_type == QpType::Rc;
    let pick = |r: Opcode, u: Opcode| if rc { r } else { u };
    match (op, pos) {
        (SendOp::Send | SendOp::SendImm(_), Pos::First) => pick(RcSendFirst, UcSendFirst),
        (SendOp::Send | SendOp::SendImm(_), Pos::Middle) => pick(RcSendMiddle, UcSendMiddle),
        (SendOp::Send, Pos::Last) => pick(RcSendLast, UcSendLast),
        (SendOp::Send, Pos::Only) => pick(RcSendOnly, UcSendOnly),
        (SendOp::SendImm(_), Pos::Last) => pick(RcSendLastImm, UcSendLastImm),
        (SendOp::SendImm(_), Pos::Only) => pick(RcSendOnlyImm, UcSendOnlyImm),
        (SendOp::Write | SendOp::WriteImm(_), Pos::First) => pick(RcWriteFirst, UcWriteFirst),
        (SendOp::Write | SendOp::WriteImm(_), Pos::Middle) => pick(RcWriteMiddle, UcWriteMiddle),
        (SendOp::Write, Pos::Last) => pick(RcWriteLast, UcWriteLast),
        (SendOp::Write, Pos::Only) => pick(RcWriteOnly, UcWriteOnly),
        (SendOp::WriteImm(_), Pos::Last) => pick(RcWriteLastImm, UcWriteLastImm),
        (SendOp::WriteImm(_), Pos::Only) => pick(RcWriteOnlyImm, UcWriteOnlyImm),
        (SendOp::Read, _) => RcReadRequest,
        (SendOp::CompSwap { .. }, _) => RcCompareSwap,
        (SendOp::FetchAdd { .. }, _) => RcFetchAdd,
    }
}

/// Transmit what the window allows. Called after every input.
pub fn pump(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    match qp.qp_type {
        QpType::Ud => pump_ud(qp, cx),
        QpType::Rc | QpType::Uc => pump_connected(qp, cx),
    }
}

fn pump_connected(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    let rc = qp.qp_type == QpType::Rc;
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
        let cur = psn::add(wqe.first_psn, qp.req.send_pkt);
        if rc && psn::diff(cur, qp.req.una) >= WINDOW as i32 {
            break;
        }
        if wqe.op.is_read_or_atomic()
            && qp.req.rd_atomic.len() >= usize::from(qp.attr.max_rd_atomic.max(1))
        {
            break;
        }
        let Some(dst) = qp.remote else { return };
        if send_one(qp, cx, dst, cur).is_err() {
            qp.complete_head(cx, WcStatus::LocProtErr, 0);
            qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
            return;
        }
        if psn::diff(cur, qp.req.high_psn) < 0 {
            cx.count(&mut qp.counters, Counter::Retransmits);
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
        if rc && !qp.timers.is_running(TimerKind::Retransmit) {
            qp.timers.set(
                TimerKind::Retransmit,
                qp.ack_timeout_ns().map(|t| cx.now + t),
            );
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

/// Send the packet (or READ request chunk) at `cur` of `sq[send_pos]`
/// and advance the send pointer.
fn send_one(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    dst: std::net::SocketAddr,
    cur: u32,
) -> Result<(), tx::PayloadError> {
    let mtu = qp.mtu();
    let pos = qp.req.send_pos;
    let k = qp.req.send_pkt;
    let dest_qp = qp.attr.dest_qp_num;
    let rc = qp.qp_type == QpType::Rc;
    let window_full_next = psn::diff(cur, qp.req.una) + 1 >= WINDOW as i32;
    let wqe = &qp.req.sq[pos];
    let n = wqe.npsn;
    let mut bth = Bth::new(Opcode::RcSendOnly, dest_qp, cur);
    bth.pkey = DEFAULT_PKEY;
    match wqe.op {
        SendOp::Read => {
            // Requests cover the same PSN ranges as the first time, even
            // when resent from the middle of one (the responder answers a
            // duplicate only within the range it remembers).
            let chunk = (READ_CHUNK - k % READ_CHUNK).min(n - k);
            let off = k as usize * mtu;
            let len = (chunk as usize * mtu).min(wqe.len - off.min(wqe.len));
            bth.opcode = Opcode::RcReadRequest;
            let mut repr = PacketRepr::new(bth);
            repr.reth = Some(Reth {
                va: wqe.remote_va.wrapping_add(off as u64),
                rkey: wqe.rkey,
                dma_len: len as u32,
            });
            tx::send(cx, &mut qp.counters, dst, &repr, PayloadSrc::Empty)?;
            qp.req.rd_atomic.push_back(psn::add(cur, chunk - 1));
            qp.req.send_pkt += chunk;
        }
        SendOp::CompSwap { .. } | SendOp::FetchAdd { .. } => {
            let (compare, swap) = match wqe.op {
                SendOp::CompSwap { compare, swap } => (compare, swap),
                SendOp::FetchAdd { add } => (0, add),
                _ => (0, 0),
            };
            bth.opcode = data_opcode(qp.qp_type, wqe.op, Pos::Only);
            let mut repr = PacketRepr::new(bth);
            repr.atomic_eth = Some(AtomicEth {
                va: wqe.remote_va,
                rkey: wqe.rkey,
                swap_add: swap,
                compare,
            });
            tx::send(cx, &mut qp.counters, dst, &repr, PayloadSrc::Empty)?;
            qp.req.rd_atomic.push_back(cur);
            qp.req.send_pkt += 1;
        }
        op => {
            let p = position(k, n);
            let off = k as usize * mtu;
            let len = mtu.min(wqe.len.saturating_sub(off));
            bth.opcode = data_opcode(qp.qp_type, op, p);
            let last = matches!(p, Pos::Last | Pos::Only);
            bth.solicited = last && wqe.solicited;
            bth.ack_req = rc && (last || (k + 1).is_multiple_of(ACK_EVERY) || window_full_next);
            let mut repr = PacketRepr::new(bth);
            if matches!(op, SendOp::Write | SendOp::WriteImm(_))
                && matches!(p, Pos::First | Pos::Only)
            {
                repr.reth = Some(Reth {
                    va: wqe.remote_va,
                    rkey: wqe.rkey,
                    dma_len: wqe.len as u32,
                });
            }
            if let SendOp::SendImm(imm) | SendOp::WriteImm(imm) = op {
                if last {
                    repr.immdt = Some(imm);
                }
            }
            let src = match &wqe.payload {
                Payload::Inline(b) => PayloadSrc::Bytes(b.get(off..off + len).unwrap_or(&[])),
                Payload::Sges(s) => PayloadSrc::Gather(s, off, len),
            };
            tx::send(cx, &mut qp.counters, dst, &repr, src)?;
            qp.req.send_pkt += 1;
        }
    }
    Ok(())
}

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
        let opcode = match wqe.op {
            SendOp::SendImm(_) => Opcode::UdSendOnlyImm,
            _ => Opcode::UdSendOnly,
        };
        let mut bth = Bth::new(opcode, ud.qpn, cur);
        bth.solicited = wqe.solicited;
        let mut repr = PacketRepr::new(bth);
        repr.deth = Some(Deth {
            qkey: ud.qkey,
            src_qp: qp.qpn,
        });
        if let SendOp::SendImm(imm) = wqe.op {
            repr.immdt = Some(imm);
        }
        let src = match &wqe.payload {
            Payload::Inline(b) => PayloadSrc::Bytes(b),
            Payload::Sges(s) => PayloadSrc::Gather(s, 0, wqe.len),
        };
        let status = match tx::send(cx, &mut qp.counters, ud.addr, &repr, src) {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocProtErr,
        };
        qp.req.send_pos = qp.req.send_pos.max(1);
        qp.complete_head(cx, status, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions() {
        assert_eq!(position(0, 1), Pos::Only);
        assert_eq!(position(0, 3), Pos::First);
        assert_eq!(position(1, 3), Pos::Middle);
        assert_eq!(position(2, 3), Pos::Last);
    }

    #[test]
    fn opcodes_follow_transport() {
        assert_eq!(
            data_opcode(QpType::Rc, SendOp::WriteImm(1), Pos::Only),
            Opcode::RcWriteOnlyImm
        );
        assert_eq!(
            data_opcode(QpType::Uc, SendOp::Send, Pos::Middle),
            Opcode::UcSendMiddle
        );
        assert_eq!(
            data_opcode(QpType::Rc, SendOp::SendImm(0), Pos::Last),
            Opcode::RcSendLastImm
        );
    }
}

//! The responder: executes incoming requests (SEND, WRITE, READ, atomics)
//! against receive WQEs and registered memory, in PSN order, and answers
//! with ACKs, NAKs, READ responses and atomic ACKs.

use super::qp::{QpCtx, RdAtomicRecord, WriteCtx};
use super::tx::{self, PayloadSrc};
use super::wqe::RecvWqe;
use super::{drop_packet, psn, srq, Counter, Ctx};
use crate::mr::{scatter, MrEntry};
use crate::types::{
    AccessFlags, AsyncEventKind, QpState, QpType, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::Arc;
use urdma_wire::{
    AckSyndrome, Aeth, AtomicAckEth, Bth, NakCode, OpKind, Opcode, Packet, PacketRepr, Position,
};

/// Longest message a request may announce (2^31 bytes, as IBTA allows);
/// it also keeps a READ's PSN span below half the 24-bit PSN space.
const MAX_MSG_SIZE: usize = super::objects::MAX_MSG_SIZE;

/// ACK credit field value meaning "no end-to-end credits in use".
const NO_CREDITS: u8 = 31;
/// READ/atomic requests remembered for duplicates, at least.
const MIN_HISTORY: usize = 16;

/// Handle a request packet for `qp`.
pub fn on_request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    if !matches!(
        qp.state(),
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    ) {
        drop_packet(qp, cx, "request in a state that cannot receive");
        return;
    }
    match qp.qp_type {
        QpType::Rc => rc_request(qp, cx, pkt),
        QpType::Uc => uc_request(qp, cx, pkt),
        QpType::Ud => ud_request(qp, cx, pkt),
    }
}

/// Queue a response for the connected peer.
fn transmit(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, payload: PayloadSrc<'_>) {
    let Some(dst) = qp.remote else { return };
    let _ = tx::send(cx, &mut qp.counters, dst, repr, payload);
}

/// Queue a response after any ACK held back, keeping responses in order.
fn reply(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: &PacketRepr, payload: PayloadSrc<'_>) {
    flush_ack(qp, cx);
    transmit(qp, cx, repr, payload);
}

/// Send the ACK held back while a batch of packets was handled.
pub fn flush_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    if let Some(p) = qp.resp.ack_due.take() {
        emit_aeth(
            qp,
            cx,
            p,
            AckSyndrome::Ack {
                credits: NO_CREDITS,
            },
        );
    }
}

/// Send an ACK or NAK. Within a batch, plain ACKs are coalesced: only the
/// last one goes out, when the batch ends or before any other response.
fn send_aeth(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, syndrome: AckSyndrome) {
    if cx.batching && matches!(syndrome, AckSyndrome::Ack { .. }) {
        if qp.resp.ack_due.replace(p).is_none() {
            cx.deferred_acks.push(qp.qpn);
        }
        return;
    }
    flush_ack(qp, cx);
    emit_aeth(qp, cx, p, syndrome);
}

fn emit_aeth(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, syndrome: AckSyndrome) {
    let mut repr = PacketRepr::new(Bth::new(Opcode::RcAck, qp.attr.dest_qp_num, p));
    repr.aeth = Some(Aeth {
        syndrome,
        msn: qp.resp.msn,
    });
    transmit(qp, cx, &repr, PayloadSrc::Empty);
}

/// NAK a request that cannot be executed and move the QP to ERR.
fn nak_error(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, code: NakCode) {
    tracing::debug!(qpn = qp.qpn, psn = p, ?code, "request NAKed");
    cx.count(&mut qp.counters, Counter::ErrorNaksSent);
    send_aeth(qp, cx, p, AckSyndrome::Nak(code));
    let event = match code {
        NakCode::RemoteAccessError => AsyncEventKind::QpAccessErr,
        NakCode::InvalidRequest | NakCode::InvalidRdRequest => AsyncEventKind::QpReqErr,
        _ => AsyncEventKind::QpFatal,
    };
    qp.enter_error(cx, Some(event));
}

/// Complete the receive WQE of the message in progress with an error.
fn fail_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>, wqe: RecvWqe, status: WcStatus) {
    let wc = WorkCompletion::new(wqe.wr_id, status, WcOpcode::Recv, qp.qpn);
    drop(wqe);
    qp.push_wc(cx, wc, true, false);
}

fn rc_request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    let d = psn::diff(p, qp.resp.epsn);
    if d > 0 {
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            cx.count(&mut qp.counters, Counter::SeqNaksSent);
            let e = qp.resp.epsn;
            send_aeth(qp, cx, e, AckSyndrome::Nak(NakCode::PsnSequenceError));
        }
        drop_packet(qp, cx, "PSN sequence error");
        return;
    }
    if d < 0 {
        cx.count(&mut qp.counters, Counter::Duplicates);
        duplicate(qp, cx, pkt);
        return;
    }
    qp.resp.nak_sent = false;
    match pkt.repr.bth.opcode.info().kind {
        OpKind::Send => rc_send(qp, cx, pkt),
        OpKind::Write => rc_write(qp, cx, pkt),
        OpKind::ReadRequest => rc_read(qp, cx, pkt),
        OpKind::CompareSwap | OpKind::FetchAdd => rc_atomic(qp, cx, pkt),
        _ => drop_packet(qp, cx, "not a request"),
    }
}

/// Check a packet's payload length against its position in the message.
fn length_ok(pos: Position, len: usize, mtu: usize) -> bool {
    match pos {
        Position::First | Position::Middle => len == mtu,
        Position::Last | Position::Only => len <= mtu,
    }
}

/// Take the receive WQE for a new message, or send an RNR NAK.
fn take_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32) -> Option<RecvWqe> {
    let w = srq::pop_recv(qp, cx);
    if w.is_none() {
        qp.resp.nak_sent = true;
        cx.count(&mut qp.counters, Counter::RnrNaksSent);
        let timer = qp.attr.min_rnr_timer;
        send_aeth(qp, cx, p, AckSyndrome::RnrNak { timer });
    }
    w
}

fn ack_if_asked(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    if pkt.repr.bth.ack_req {
        send_aeth(
            qp,
            cx,
            pkt.repr.bth.psn,
            AckSyndrome::Ack {
                credits: NO_CREDITS,
            },
        );
    }
}

/// Complete a receive WQE consumed by a SEND or an RDMA WRITE with
/// immediate data, carrying the packet's immediate data if any.
fn complete_recv(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wqe: RecvWqe,
    opcode: WcOpcode,
    byte_len: usize,
    pkt: &Packet<'_>,
) {
    let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, opcode, qp.qpn);
    wc.byte_len = byte_len as u32;
    wc.src_qp = qp.attr.dest_qp_num;
    if let Some(imm) = pkt.repr.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    // Release the buffers before the completion becomes visible.
    drop(wqe);
    qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
}

fn rc_send(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    let info = pkt.repr.bth.opcode.info();
    let starts = matches!(info.position, Position::First | Position::Only);
    let in_msg = qp.resp.recv.is_some();
    if info.has_ieth
        || qp.resp.write.is_some()
        || starts == in_msg
        || !length_ok(info.position, pkt.payload.len(), qp.mtu())
    {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    if starts {
        let Some(w) = take_recv(qp, cx, p) else {
            return;
        };
        qp.resp.recv = Some((w, 0));
    }
    let Some((wqe, off)) = qp.resp.recv.take() else {
        return;
    };
    if off + pkt.payload.len() > wqe.len {
        fail_recv(qp, cx, wqe, WcStatus::LocLenErr);
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    if scatter(&wqe.sges, off, pkt.payload).is_err() {
        fail_recv(qp, cx, wqe, WcStatus::LocProtErr);
        nak_error(qp, cx, p, NakCode::RemoteOperationalError);
        return;
    }
    let off = off + pkt.payload.len();
    qp.resp.epsn = psn::add(p, 1);
    if matches!(info.position, Position::Last | Position::Only) {
        qp.resp.msn = psn::add(qp.resp.msn, 1);
        complete_recv(qp, cx, wqe, WcOpcode::Recv, off, pkt);
    } else {
        qp.resp.recv = Some((wqe, off));
    }
    ack_if_asked(qp, cx, pkt);
}

/// Resolve an rkey for a remote access of `len` bytes at `va`.
fn remote_mr(
    qp: &QpCtx,
    cx: &Ctx<'_>,
    rkey: u32,
    va: u64,
    len: usize,
    need: AccessFlags,
) -> Result<(Arc<MrEntry>, usize), ()> {
    let mr = cx.mrs.get(&rkey).ok_or(())?;
    let off = mr.check(qp.pd, va, len, need).map_err(|_| ())?;
    Ok((mr.clone(), off))
}

fn rc_write(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    let info = pkt.repr.bth.opcode.info();
    let mtu = qp.mtu();
    let len = pkt.payload.len();
    let starts = matches!(info.position, Position::First | Position::Only);
    if qp.resp.recv.is_some()
        || starts == qp.resp.write.is_some()
        || !length_ok(info.position, len, mtu)
    {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    if starts {
        if !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE) {
            nak_error(qp, cx, p, NakCode::InvalidRequest);
            return;
        }
        let Some(reth) = pkt.repr.reth else { return };
        let total = reth.dma_len as usize;
        if total > MAX_MSG_SIZE {
            nak_error(qp, cx, p, NakCode::InvalidRequest);
            return;
        }
        let (mr, offset) = if total == 0 {
            (None, 0)
        } else {
            match remote_mr(qp, cx, reth.rkey, reth.va, total, AccessFlags::REMOTE_WRITE) {
                Ok((m, o)) => (Some(m), o),
                Err(()) => {
                    nak_error(qp, cx, p, NakCode::RemoteAccessError);
                    return;
                }
            }
        };
        qp.resp.write = Some(WriteCtx {
            mr,
            offset,
            remaining: total,
            total,
        });
    }
    let Some(w) = qp.resp.write.as_ref() else {
        return;
    };
    let last = matches!(info.position, Position::Last | Position::Only);
    if (last && len != w.remaining) || (!last && len >= w.remaining) {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    let recv = if last && info.has_immdt {
        match take_recv(qp, cx, p) {
            Some(r) => Some(r),
            None => {
                // RNR NAK: leave the responder as it was before this packet.
                if starts {
                    qp.resp.write = None;
                }
                return;
            }
        }
    } else {
        None
    };
    let Some(mut w) = qp.resp.write.take() else {
        return;
    };
    if let Some(mr) = &w.mr {
        if mr.mem.write(w.offset, pkt.payload).is_err() {
            if let Some(r) = recv {
                srq::unpop_recv(qp, cx, r);
            }
            nak_error(qp, cx, p, NakCode::RemoteAccessError);
            return;
        }
    }
    w.offset += len;
    w.remaining -= len;
    qp.resp.epsn = psn::add(p, 1);
    if last {
        qp.resp.msn = psn::add(qp.resp.msn, 1);
        if let Some(r) = recv {
            complete_recv(qp, cx, r, WcOpcode::RecvRdmaWithImm, w.total, pkt);
        }
    } else {
        qp.resp.write = Some(w);
    }
    ack_if_asked(qp, cx, pkt);
}

fn remember(qp: &mut QpCtx, rec: RdAtomicRecord) {
    let cap = usize::from(qp.attr.max_dest_rd_atomic).max(MIN_HISTORY);
    while qp.resp.history.len() >= cap {
        qp.resp.history.pop_front();
    }
    qp.resp.history.push_back(rec);
}

/// Send the responses to a READ of `len` bytes at region offset `off`,
/// starting at PSN `first`.
fn read_responses(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    mr: Option<&MrEntry>,
    off: usize,
    len: usize,
    first: u32,
) {
    let mtu = qp.mtu();
    let n = len.div_ceil(mtu).max(1);
    for i in 0..n {
        let opcode = match (i, n) {
            (_, 1) => Opcode::RcReadResponseOnly,
            (0, _) => Opcode::RcReadResponseFirst,
            (i, n) if i + 1 == n => Opcode::RcReadResponseLast,
            _ => Opcode::RcReadResponseMiddle,
        };
        let mut repr = PacketRepr::new(Bth::new(
            opcode,
            qp.attr.dest_qp_num,
            psn::add(first, i as u32),
        ));
        if opcode.info().has_aeth {
            repr.aeth = Some(Aeth {
                syndrome: AckSyndrome::Ack {
                    credits: NO_CREDITS,
                },
                msn: qp.resp.msn,
            });
        }
        let start = i * mtu;
        let plen = mtu.min(len - start.min(len));
        let src = match mr {
            Some(m) if plen > 0 => PayloadSrc::Region(m, off + start, plen),
            _ => PayloadSrc::Empty,
        };
        reply(qp, cx, &repr, src);
    }
}

fn rc_read(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    if qp.resp.recv.is_some()
        || qp.resp.write.is_some()
        || !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_READ)
    {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    let Some(reth) = pkt.repr.reth else { return };
    let len = reth.dma_len as usize;
    if len > MAX_MSG_SIZE {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    let region = if len == 0 {
        None
    } else {
        match remote_mr(qp, cx, reth.rkey, reth.va, len, AccessFlags::REMOTE_READ) {
            Ok(r) => Some(r),
            Err(()) => {
                nak_error(qp, cx, p, NakCode::RemoteAccessError);
                return;
            }
        }
    };
    let n = len.div_ceil(qp.mtu()).max(1) as u32;
    remember(
        qp,
        RdAtomicRecord {
            first_psn: p,
            last_psn: psn::add(p, n - 1),
            atomic_orig: None,
        },
    );
    qp.resp.epsn = psn::add(p, n);
    qp.resp.msn = psn::add(qp.resp.msn, 1);
    let (mr, off) = match &region {
        Some((m, o)) => (Some(m.as_ref()), *o),
        None => (None, 0),
    };
    read_responses(qp, cx, mr, off, len, p);
}

fn rc_atomic(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    let Some(a) = pkt.repr.atomic_eth else { return };
    if qp.resp.recv.is_some()
        || qp.resp.write.is_some()
        || !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_ATOMIC)
        || a.va % 8 != 0
    {
        nak_error(qp, cx, p, NakCode::InvalidRequest);
        return;
    }
    let Ok((mr, off)) = remote_mr(qp, cx, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC) else {
        nak_error(qp, cx, p, NakCode::RemoteAccessError);
        return;
    };
    let r = if pkt.repr.bth.opcode == Opcode::RcCompareSwap {
        mr.mem.compare_swap(off, a.compare, a.swap_add)
    } else {
        mr.mem.fetch_add(off, a.swap_add)
    };
    let Ok(orig) = r else {
        nak_error(qp, cx, p, NakCode::RemoteAccessError);
        return;
    };
    remember(
        qp,
        RdAtomicRecord {
            first_psn: p,
            last_psn: p,
            atomic_orig: Some(orig),
        },
    );
    qp.resp.epsn = psn::add(p, 1);
    qp.resp.msn = psn::add(qp.resp.msn, 1);
    atomic_ack(qp, cx, p, orig);
}

fn atomic_ack(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, orig: u64) {
    let mut repr = PacketRepr::new(Bth::new(Opcode::RcAtomicAck, qp.attr.dest_qp_num, p));
    repr.aeth = Some(Aeth {
        syndrome: AckSyndrome::Ack {
            credits: NO_CREDITS,
        },
        msn: qp.resp.msn,
    });
    repr.atomic_ack_eth = Some(AtomicAckEth { orig });
    reply(qp, cx, &repr, PayloadSrc::Empty);
}

/// A request whose PSN is before the expected one: answer it again
/// without executing it again.
fn duplicate(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    match pkt.repr.bth.opcode.info().kind {
        OpKind::Send | OpKind::Write => {
            if pkt.repr.bth.ack_req {
                let last = psn::prev(qp.resp.epsn);
                send_aeth(
                    qp,
                    cx,
                    last,
                    AckSyndrome::Ack {
                        credits: NO_CREDITS,
                    },
                );
            }
        }
        OpKind::ReadRequest => {
            let Some(rec) = qp
                .resp
                .history
                .iter()
                .rev()
                .find(|r| {
                    r.atomic_orig.is_none() && psn::le(r.first_psn, p) && psn::le(p, r.last_psn)
                })
                .copied()
            else {
                drop_packet(qp, cx, "duplicate READ no longer remembered");
                return;
            };
            let Some(reth) = pkt.repr.reth else { return };
            let len = reth.dma_len as usize;
            if len > MAX_MSG_SIZE {
                drop_packet(qp, cx, "duplicate READ longer than any message");
                return;
            }
            let n = len.div_ceil(qp.mtu()).max(1) as u32;
            if psn::lt(rec.last_psn, psn::add(p, n - 1)) {
                drop_packet(qp, cx, "duplicate READ larger than the original");
                return;
            }
            let region = if len == 0 {
                None
            } else {
                match remote_mr(qp, cx, reth.rkey, reth.va, len, AccessFlags::REMOTE_READ) {
                    Ok(r) => Some(r),
                    Err(()) => {
                        drop_packet(qp, cx, "duplicate READ no longer valid");
                        return;
                    }
                }
            };
            let (mr, off) = match &region {
                Some((m, o)) => (Some(m.as_ref()), *o),
                None => (None, 0),
            };
            read_responses(qp, cx, mr, off, len, p);
        }
        OpKind::CompareSwap | OpKind::FetchAdd => {
            let orig = qp
                .resp
                .history
                .iter()
                .rev()
                .find(|r| r.first_psn == p)
                .and_then(|r| r.atomic_orig);
            match orig {
                Some(o) => atomic_ack(qp, cx, p, o),
                None => drop_packet(qp, cx, "duplicate atomic no longer remembered"),
            }
        }
        _ => drop_packet(qp, cx, "not a request"),
    }
}

/// UC: no ACKs; a PSN gap abandons the message in progress.
fn uc_request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let p = pkt.repr.bth.psn;
    let info = pkt.repr.bth.opcode.info();
    let starts = matches!(info.position, Position::First | Position::Only);
    if p != qp.resp.epsn {
        if let Some((w, _)) = qp.resp.recv.take() {
            srq::unpop_recv(qp, cx, w);
        }
        qp.resp.write = None;
        qp.resp.epsn = p;
    }
    let in_msg = qp.resp.recv.is_some() || qp.resp.write.is_some();
    if starts == in_msg || !length_ok(info.position, pkt.payload.len(), qp.mtu()) {
        // Middle of a message whose start was lost: drop until the next one.
        if let Some((w, _)) = qp.resp.recv.take() {
            srq::unpop_recv(qp, cx, w);
        }
        qp.resp.write = None;
        qp.resp.epsn = psn::add(p, 1);
        drop_packet(qp, cx, "UC packet out of message order");
        return;
    }
    match info.kind {
        OpKind::Send => uc_send(qp, cx, pkt, starts),
        OpKind::Write => uc_write(qp, cx, pkt, starts),
        _ => drop_packet(qp, cx, "opcode not valid on UC"),
    }
}

fn uc_abandon(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, why: &str) {
    qp.resp.epsn = psn::add(p, 1);
    drop_packet(qp, cx, why);
}

fn uc_send(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>, starts: bool) {
    let p = pkt.repr.bth.psn;
    if starts {
        let Some(w) = srq::pop_recv(qp, cx) else {
            uc_abandon(qp, cx, p, "UC SEND with no receive WQE");
            return;
        };
        qp.resp.recv = Some((w, 0));
    }
    let Some((wqe, off)) = qp.resp.recv.take() else {
        return;
    };
    if off + pkt.payload.len() > wqe.len || scatter(&wqe.sges, off, pkt.payload).is_err() {
        fail_recv(qp, cx, wqe, WcStatus::LocLenErr);
        uc_abandon(qp, cx, p, "UC SEND longer than the receive buffer");
        return;
    }
    let off = off + pkt.payload.len();
    qp.resp.epsn = psn::add(p, 1);
    let info = pkt.repr.bth.opcode.info();
    if matches!(info.position, Position::Last | Position::Only) {
        complete_recv(qp, cx, wqe, WcOpcode::Recv, off, pkt);
    } else {
        qp.resp.recv = Some((wqe, off));
    }
}

fn uc_write(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>, starts: bool) {
    let p = pkt.repr.bth.psn;
    let info = pkt.repr.bth.opcode.info();
    let len = pkt.payload.len();
    if starts {
        let Some(reth) = pkt.repr.reth else { return };
        let total = reth.dma_len as usize;
        let allowed = qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE);
        let target = if !allowed || total > MAX_MSG_SIZE {
            Err(())
        } else if total == 0 {
            Ok(None)
        } else {
            remote_mr(qp, cx, reth.rkey, reth.va, total, AccessFlags::REMOTE_WRITE).map(Some)
        };
        let Ok(target) = target else {
            uc_abandon(qp, cx, p, "UC WRITE access violation");
            return;
        };
        let (mr, offset) = match target {
            Some((m, o)) => (Some(m), o),
            None => (None, 0),
        };
        qp.resp.write = Some(WriteCtx {
            mr,
            offset,
            remaining: total,
            total,
        });
    }
    let last = matches!(info.position, Position::Last | Position::Only);
    let Some(mut w) = qp.resp.write.take() else {
        return;
    };
    if (last && len != w.remaining) || (!last && len >= w.remaining) {
        uc_abandon(qp, cx, p, "UC WRITE length mismatch");
        return;
    }
    let recv = if last && info.has_immdt {
        match srq::pop_recv(qp, cx) {
            Some(r) => Some(r),
            None => {
                uc_abandon(qp, cx, p, "UC WRITE with immediate and no receive WQE");
                return;
            }
        }
    } else {
        None
    };
    if let Some(mr) = &w.mr {
        if mr.mem.write(w.offset, pkt.payload).is_err() {
            if let Some(r) = recv {
                srq::unpop_recv(qp, cx, r);
            }
            uc_abandon(qp, cx, p, "UC WRITE target gone");
            return;
        }
    }
    w.offset += len;
    w.remaining -= len;
    qp.resp.epsn = psn::add(p, 1);
    if let Some(r) = recv {
        complete_recv(qp, cx, r, WcOpcode::RecvRdmaWithImm, w.total, pkt);
    } else if !last {
        qp.resp.write = Some(w);
    }
}

/// Size of the GRH area at the start of a UD receive buffer.
pub use urdma_wire::GRH_LEN;

/// The 40-byte GRH area as RoCE v2 presents it: for IPv4, 20 zero bytes
/// then the IPv4 header; for IPv6, the IPv6 header.
fn grh_bytes(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    udp_len: usize,
) -> [u8; GRH_LEN] {
    let udp_len = u16::try_from(udp_len).unwrap_or(u16::MAX);
    let mut g = [0u8; GRH_LEN];
    urdma_wire::GrhRepr::new(src.ip(), dst.ip(), udp_len).emit(&mut g);
    g
}

fn ud_request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    let Some(deth) = pkt.repr.deth else { return };
    if deth.qkey != qp.attr.qkey {
        drop_packet(qp, cx, "UD Q_Key mismatch");
        return;
    }
    if pkt.payload.len() > qp.mtu() {
        drop_packet(qp, cx, "UD payload above the path MTU");
        return;
    }
    let Some(wqe) = srq::pop_recv(qp, cx) else {
        drop_packet(qp, cx, "UD SEND with no receive WQE");
        return;
    };
    let total = GRH_LEN + pkt.payload.len();
    if total > wqe.len {
        fail_recv(qp, cx, wqe, WcStatus::LocLenErr);
        return;
    }
    let src = cx.last_src;
    let udp_len = 8
        + pkt.repr.header_len()
        + pkt.payload.len()
        + pkt.repr.bth.pad_count as usize
        + urdma_wire::ICRC_LEN;
    let grh = grh_bytes(src, cx.local, udp_len);
    if scatter(&wqe.sges, 0, &grh).is_err() || scatter(&wqe.sges, GRH_LEN, pkt.payload).is_err() {
        fail_recv(qp, cx, wqe, WcStatus::LocProtErr);
        return;
    }
    let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
    wc.byte_len = total as u32;
    wc.src_qp = deth.src_qp;
    wc.wc_flags |= WcFlags::GRH;
    if let Some(imm) = pkt.repr.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    drop(wqe);
    qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_of_ipv4_has_a_valid_checksum() {
        let g = grh_bytes(
            "127.0.0.1:4791".parse().unwrap(),
            "127.0.0.2:4791".parse().unwrap(),
            100,
        );
        assert!(g[..20].iter().all(|&b| b == 0));
        let h: &[u8; 20] = g[20..].try_into().unwrap();
        assert_eq!(urdma_wire::ipv4_header_sum(h), 0xffff);
        assert_eq!(&h[12..16], &[127, 0, 0, 1]);
        assert_eq!(
            urdma_wire::GrhRepr::parse(&g),
            Ok(urdma_wire::GrhRepr::new(
                [127, 0, 0, 1].into(),
                [127, 0, 0, 2].into(),
                100
            ))
        );
    }

    #[test]
    fn payload_length_rules() {
        assert!(length_ok(Position::First, 1024, 1024));
        assert!(!length_ok(Position::Middle, 1000, 1024));
        assert!(length_ok(Position::Last, 1, 1024));
        assert!(!length_ok(Position::Only, 1025, 1024));
    }
}

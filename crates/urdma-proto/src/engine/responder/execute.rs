//! Step 7 of the responder's chain: execute a request that passed every
//! check (place the data, reply, complete receive WQEs) and move the
//! expected PSN and the MSN on.

use super::check::{Plan, Range};
use super::error::{Refusal, RespError};
use super::outbound::{read_span, ReadRun};
use super::reply;
use crate::engine::dma::Body;
use crate::engine::qp::{QpCtx, RdAtomicRecord, WriteCtx};
use crate::engine::wqe::RecvWqe;
use crate::engine::{psn, srq, Ctx};
use crate::types::{AsyncEventKind, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use urdma_wire::{AtomicEth, Packet};

/// READ/atomic requests remembered for duplicates, at least.
const MIN_HISTORY: usize = 16;

/// Execute `plan`, the request of `pkt`.
pub(super) fn execute(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    pkt: &Packet<'_>,
    plan: Plan<'_>,
) -> Result<(), Refusal> {
    match plan {
        Plan::Send { wqe, off } => send(qp, cx, pkt, wqe, off),
        Plan::Write { ctx, recv } => write(qp, cx, pkt, ctx, recv),
        Plan::Read {
            range,
            len,
            rkey,
            va,
        } => {
            let run = ReadRun {
                range,
                rkey,
                va,
                len,
                first: pkt.repr.bth.psn,
                request: pkt.repr.bth.psn,
            };
            read(qp, cx, run);
            Ok(())
        }
        Plan::Atomic { range, eth, swap } => atomic(qp, cx, pkt.repr.bth.psn, range, eth, swap),
    }
}

/// The successful completion of a receive WQE: `byte_len` bytes from QP
/// `src_qp`, with the packet's immediate data if any.
pub(super) fn recv_wc(
    qp: &QpCtx,
    wqe: &RecvWqe,
    opcode: WcOpcode,
    byte_len: usize,
    src_qp: u32,
    pkt: &Packet<'_>,
) -> WorkCompletion {
    let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, opcode, qp.qpn);
    wc.byte_len = byte_len as u32;
    wc.src_qp = src_qp;
    if let Some(imm) = pkt.repr.immdt {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    wc
}

/// Complete a receive WQE consumed by a SEND or an RDMA WRITE with
/// immediate data.
fn complete_recv(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wqe: RecvWqe,
    opcode: WcOpcode,
    byte_len: usize,
    pkt: &Packet<'_>,
) {
    let mut wc = recv_wc(qp, &wqe, opcode, byte_len, qp.attr.dest_qp_num, pkt);
    // Release the buffers before the completion becomes visible.
    drop(wqe);
    let Some(rkey) = pkt.repr.ieth else {
        qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
        return;
    };
    if invalidate(qp, cx, rkey) {
        wc.invalidated_rkey = rkey;
        wc.wc_flags |= WcFlags::WITH_INV;
        qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
    } else {
        // The R_Key names no region of the QP's PD that may be ended:
        // the receive fails and the QP with it (as a class J error).
        wc.status = WcStatus::RemInvReqErr;
        qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
        qp.enter_error(cx, Some(AsyncEventKind::QpFatal));
    }
}

/// End the region `rkey` names for a peer's SEND with invalidate; false if
/// it is not a region of the QP's PD that allows it.
fn invalidate(qp: &QpCtx, cx: &mut Ctx<'_>, rkey: u32) -> bool {
    if crate::engine::mw::is_window_key(cx.mws, rkey) {
        // A type 2 window bound through this QP.
        return crate::engine::mw::invalidate(cx.mws, qp.qpn, qp.pd, rkey, true);
    }
    match cx.mrs.get(&rkey) {
        Some(mr) if mr.pd == qp.pd && mr.invalidatable && mr.rkey == rkey => {
            mr.mem.invalidate();
            true
        }
        _ => false,
    }
}

/// The packet `p` is executed: expect the next one, and count a message
/// ended by it.
fn advance(qp: &mut QpCtx, p: u32, ends_message: bool) {
    qp.resp.epsn = psn::add(p, 1);
    if ends_message {
        qp.resp.msn = psn::add(qp.resp.msn, 1);
    }
}

/// Write `parts` one after the other into `wqe` from message offset
/// `off`; returns the WQE and the offset after them. A message longer than
/// the buffer is a length error (nothing written), a buffer that cannot be
/// written an operational one; either fails the WQE.
pub(super) fn place(
    wqe: RecvWqe,
    off: usize,
    parts: &[Body<'_>],
) -> Result<(RecvWqe, usize), Refusal> {
    let end = off + parts.iter().map(Body::len).sum::<usize>();
    if end > wqe.len {
        return Err(Refusal::failing(RespError::Length, wqe));
    }
    let mut at = off;
    for part in parts {
        if part.scatter_to(&wqe.sges, at).is_err() {
            return Err(Refusal::failing(RespError::RemoteOperational, wqe));
        }
        at += part.len();
    }
    Ok((wqe, end))
}

/// Place a SEND packet at offset `off` of the message in `wqe`.
fn send(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    pkt: &Packet<'_>,
    wqe: RecvWqe,
    off: usize,
) -> Result<(), Refusal> {
    let (wqe, end) = place(wqe, off, &[cx.body(pkt.payload)])?;
    let last = pkt.repr.bth.opcode.info().position.ends_message();
    advance(qp, pkt.repr.bth.psn, last);
    if last {
        complete_recv(qp, cx, wqe, WcOpcode::Recv, end, pkt);
    } else {
        qp.resp.recv = Some((wqe, end));
    }
    Ok(())
}

/// Write a WRITE packet into the region of its message: `ctx` for a new
/// message (None: the one in progress); `recv` is completed by its
/// immediate data.
fn write(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    pkt: &Packet<'_>,
    ctx: Option<WriteCtx>,
    recv: Option<RecvWqe>,
) -> Result<(), Refusal> {
    let Some(mut w) = ctx.or_else(|| qp.resp.write.take()) else {
        if let Some(r) = recv {
            srq::unpop_recv(qp, cx, r);
        }
        return Err(RespError::WrongContinuation.into());
    };
    if let Some(mr) = &w.mr {
        if cx.body(pkt.payload).write_to(&*mr.mem, w.offset).is_err() {
            if let Some(r) = recv {
                srq::unpop_recv(qp, cx, r);
            }
            return Err(RespError::RemoteAccess.into());
        }
    }
    w.offset += pkt.payload.len();
    w.remaining -= pkt.payload.len();
    let last = pkt.repr.bth.opcode.info().position.ends_message();
    advance(qp, pkt.repr.bth.psn, last);
    if !last {
        qp.resp.write = Some(w);
    } else if let Some(r) = recv {
        complete_recv(qp, cx, r, WcOpcode::RecvRdmaWithImm, w.total, pkt);
    }
    Ok(())
}

/// Remember a READ or atomic request for its duplicates.
fn remember(qp: &mut QpCtx, rec: RdAtomicRecord) {
    let cap = usize::from(qp.attr.max_dest_rd_atomic).max(MIN_HISTORY);
    while qp.resp.history.len() >= cap {
        qp.resp.history.pop_front();
    }
    qp.resp.history.push_back(rec);
}

/// Answer the READ request `run`.
fn read(qp: &mut QpCtx, cx: &mut Ctx<'_>, run: ReadRun<'_>) {
    let p = run.first;
    let n = read_span(qp, run.len);
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
    reply::read_responses(qp, cx, run);
    // A copy of this request in the same batch is not answered again.
    qp.resp.dup_read_answered = Some((p, cx.now));
}

/// Execute the atomic request `p` on `range` and answer it.
fn atomic(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    p: u32,
    (mr, off): Range<'_>,
    eth: AtomicEth,
    swap: bool,
) -> Result<(), Refusal> {
    let r = if swap {
        mr.mem.compare_swap(off, eth.compare, eth.swap_add)
    } else {
        mr.mem.fetch_add(off, eth.swap_add)
    };
    let orig = r.map_err(|_| RespError::RemoteAccess)?;
    remember(
        qp,
        RdAtomicRecord {
            first_psn: p,
            last_psn: p,
            atomic_orig: Some(orig),
        },
    );
    advance(qp, p, true);
    reply::atomic_ack(qp, cx, p, orig);
    Ok(())
}

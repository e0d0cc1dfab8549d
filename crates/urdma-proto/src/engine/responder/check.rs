//! The checks of the responder's chain (steps 0 to 6), in the order the
//! chain runs them. Each lets the request through, with what the next step
//! needs, or names the [`RespError`] that refuses it. Only the PSN check
//! (which clears a sent NAK, or resynchronises UC) and the resources check
//! (which takes a receive WQE) change the QP.

use super::error::{abandon_message, RespError};
use super::MAX_MSG_SIZE;
use crate::engine::mw::{self, MwTable};
use crate::engine::qp::{QpCtx, WriteCtx};
use crate::engine::rings::NoRecv;
use crate::engine::wqe::RecvWqe;
use crate::engine::{psn, srq, Counter, Ctx};
use crate::mr::{self, MrEntry, MrTable};
use crate::types::{AccessFlags, QpState, QpType};
use std::sync::Arc;
use urdma_wire::{AtomicEth, OpKind, OpcodeInfo, Packet, Position, Reth};

/// Bytes of a registered region a request reaches: the region and the
/// offset of the first byte in it.
pub(super) type Range<'m> = (&'m Arc<MrEntry>, usize);

/// Where a request's PSN stands (step 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Psn {
    /// The expected PSN: the request is new.
    Expected,
    /// Before the expected PSN (RC): a request executed already.
    Duplicate,
}

/// What a request asks for, with the headers it needs (step 3).
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    /// A SEND packet.
    Send,
    /// An RDMA WRITE packet; the RETH of a FIRST or ONLY one.
    Write(Option<Reth>),
    /// An RDMA READ request.
    Read(Reth),
    /// An atomic request; true for compare-and-swap.
    Atomic(AtomicEth, bool),
}

/// The memory a request reaches, resolved (step 5).
#[derive(Debug)]
pub(super) enum Target<'m> {
    /// A SEND: the receive buffer, not a region.
    Send,
    /// A WRITE: a new one's context, or None to continue the one in
    /// progress.
    Write(Option<WriteCtx>),
    /// A READ of `len` bytes (no range for zero bytes) under the RETH's
    /// R_Key and address.
    Read(Option<Range<'m>>, usize, Reth),
    /// An atomic on 8 bytes; true for compare-and-swap.
    Atomic(Range<'m>, AtomicEth, bool),
}

/// A request that passed every check, with what it executes with (step 6).
#[derive(Debug)]
pub(super) enum Plan<'m> {
    /// A SEND into `wqe`, from message offset `off`.
    Send {
        /// The receive WQE of the message.
        wqe: RecvWqe,
        /// Bytes of the message received before this packet.
        off: usize,
    },
    /// A WRITE; `recv` is the receive WQE a WRITE with immediate data
    /// completes.
    Write {
        /// A new WRITE's context, or None to continue the one in progress.
        ctx: Option<WriteCtx>,
        /// The receive WQE consumed by the immediate data.
        recv: Option<RecvWqe>,
    },
    /// A READ of `len` bytes.
    Read {
        /// The bytes read (none for zero bytes).
        range: Option<Range<'m>>,
        /// The DMA length.
        len: usize,
        /// The R_Key, under which every window of responses looks the
        /// bytes up again.
        rkey: u32,
        /// The address of the first byte.
        va: u64,
    },
    /// An atomic.
    Atomic {
        /// The 8 bytes operated on.
        range: Range<'m>,
        /// Its operands.
        eth: AtomicEth,
        /// Compare-and-swap (else fetch-and-add).
        swap: bool,
    },
}

/// True for the packet that starts its message (FIRST or ONLY).
fn starts_message(info: &OpcodeInfo) -> bool {
    matches!(info.position, Position::First | Position::Only)
}

/// A header the opcode carries (the parser guarantees it).
pub(super) fn header<T>(h: Option<T>) -> Result<T, RespError> {
    h.ok_or(RespError::Malformed)
}

/// Step 0: the QP is in a state that receives requests.
pub(super) fn qp_state(qp: &QpCtx) -> Result<(), RespError> {
    match qp.state() {
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe => Ok(()),
        _ => Err(RespError::Unsupported),
    }
}

/// Step 1: the PSN. On RC a PSN after the expected one is a loss and one
/// before it a duplicate; on UC a gap abandons the message in progress
/// and the PSN becomes the expected one.
pub(super) fn psn(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) -> Result<Psn, RespError> {
    let p = pkt.repr.bth.psn;
    if qp.qp_type == QpType::Uc {
        if p != qp.resp.epsn {
            abandon_message(qp, cx);
            qp.resp.epsn = p;
        }
        return Ok(Psn::Expected);
    }
    let d = psn::diff(p, qp.resp.epsn);
    if d > 0 {
        return Err(RespError::PsnOutOfSequence);
    }
    if d < 0 {
        return Ok(Psn::Duplicate);
    }
    qp.resp.nak_sent = false;
    Ok(Psn::Expected)
}

/// Step 2: a packet that starts a message comes outside any, one that
/// continues a message comes inside one.
pub(super) fn opcode_sequence(qp: &QpCtx, pkt: &Packet<'_>) -> Result<(), RespError> {
    let in_message = qp.resp.recv.is_some() || qp.resp.write.is_some();
    if starts_message(pkt.repr.bth.opcode.info()) == in_message {
        return Err(RespError::OpcodeSequence);
    }
    Ok(())
}

/// Step 3: the opcode is a request of the QP's transport, carries its
/// headers, and the QP's access rights allow it (RC and UC QPs: UD
/// requests take `ud.rs`).
pub(super) fn opcode(qp: &QpCtx, pkt: &Packet<'_>) -> Result<Op, RespError> {
    let info = pkt.repr.bth.opcode.info();
    let r = &pkt.repr;
    let rc = qp.qp_type == QpType::Rc;
    let (op, need) = match info.kind {
        OpKind::Send => (Op::Send, AccessFlags::empty()),
        OpKind::Write if starts_message(info) => {
            (Op::Write(Some(header(r.reth)?)), AccessFlags::REMOTE_WRITE)
        }
        OpKind::Write => (Op::Write(None), AccessFlags::empty()),
        OpKind::ReadRequest if rc => (Op::Read(header(r.reth)?), AccessFlags::REMOTE_READ),
        OpKind::CompareSwap | OpKind::FetchAdd if rc => {
            let swap = info.kind == OpKind::CompareSwap;
            (
                Op::Atomic(header(r.atomic_eth)?, swap),
                AccessFlags::REMOTE_ATOMIC,
            )
        }
        _ => return Err(RespError::Unsupported),
    };
    if !qp.attr.qp_access_flags.contains(need) {
        return Err(RespError::InvalidRequest);
    }
    Ok(op)
}

/// Whether a packet's payload length suits its position in the message:
/// all but the last packet carry exactly one MTU.
fn length_ok(pos: Position, len: usize, mtu: usize) -> bool {
    match pos {
        Position::First | Position::Middle => len == mtu,
        Position::Last | Position::Only => len <= mtu,
    }
}

/// The DMA length a RETH announces, if no longer than any message.
pub(super) fn dma_len(reth: &Reth) -> Result<usize, RespError> {
    let len = reth.dma_len as usize;
    if len > MAX_MSG_SIZE {
        return Err(RespError::Length);
    }
    Ok(len)
}

/// Step 4: the payload suits the packet's position and the path MTU; a
/// new WRITE or a READ announces no more than the largest message.
pub(super) fn length(qp: &QpCtx, pkt: &Packet<'_>, op: &Op) -> Result<(), RespError> {
    let position = pkt.repr.bth.opcode.info().position;
    if matches!(op, Op::Send | Op::Write(_)) && !length_ok(position, pkt.payload.len(), qp.mtu()) {
        return Err(RespError::Length);
    }
    if let Op::Write(Some(reth)) | Op::Read(reth) = op {
        dma_len(reth)?;
    }
    Ok(())
}

/// The bytes `[va, va+len)` under `rkey`, in the QP's PD with the rights
/// `need`, through the one MR lookup; none for zero bytes.
pub(super) fn remote_range<'m>(
    qp: &QpCtx,
    (mrs, mws): (&'m MrTable, &MwTable),
    rkey: u32,
    va: u64,
    len: usize,
    need: AccessFlags,
) -> Result<Option<Range<'m>>, RespError> {
    if len == 0 {
        return Ok(None);
    }
    // A window's R_Key first: windows and regions share no key.
    mw::lookup(mws, mrs, rkey, (qp.qpn, qp.pd), va, len, need)
        .unwrap_or_else(|| mr::lookup(mrs, rkey, qp.pd, va, len, need))
        .map(Some)
        .map_err(|_| RespError::RemoteAccess)
}

/// A WRITE packet of `len` bytes suits a message with `remaining` bytes
/// to come: the last packet brings all of them, another leaves some.
fn fits(remaining: usize, len: usize, last: bool) -> Result<(), RespError> {
    if (last && len != remaining) || (!last && len >= remaining) {
        return Err(RespError::Length);
    }
    Ok(())
}

/// Step 5: resolve the memory a WRITE, READ or atomic reaches (R_Key, PD,
/// access rights, bounds; atomics aligned), then check a WRITE's payload
/// against what remains of its message.
pub(super) fn target<'m>(
    qp: &QpCtx,
    mrs: (&'m MrTable, &MwTable),
    pkt: &Packet<'_>,
    op: Op,
) -> Result<Target<'m>, RespError> {
    let len = pkt.payload.len();
    let last = pkt.repr.bth.opcode.info().position.ends_message();
    match op {
        Op::Send => Ok(Target::Send),
        Op::Write(Some(reth)) => {
            let total = dma_len(&reth)?;
            let range = remote_range(
                qp,
                mrs,
                reth.rkey,
                reth.va,
                total,
                AccessFlags::REMOTE_WRITE,
            )?;
            fits(total, len, last)?;
            Ok(Target::Write(Some(WriteCtx {
                mr: range.map(|(m, _)| m.clone()),
                offset: range.map_or(0, |(_, o)| o),
                remaining: total,
                total,
            })))
        }
        Op::Write(None) => {
            let w = qp.resp.write.as_ref().ok_or(RespError::WrongContinuation)?;
            fits(w.remaining, len, last)?;
            Ok(Target::Write(None))
        }
        Op::Read(reth) => {
            let len = dma_len(&reth)?;
            let range = remote_range(qp, mrs, reth.rkey, reth.va, len, AccessFlags::REMOTE_READ)?;
            Ok(Target::Read(range, len, reth))
        }
        Op::Atomic(eth, swap) => {
            if eth.va % 8 != 0 {
                return Err(RespError::InvalidRequest);
            }
            let range = remote_range(qp, mrs, eth.rkey, eth.va, 8, AccessFlags::REMOTE_ATOMIC)?
                .ok_or(RespError::RemoteAccess)?;
            Ok(Target::Atomic(range, eth, swap))
        }
    }
}

/// Take a new receive WQE for the request, or refuse it: RNR when none
/// is posted, a remote operational error when the next one is bad (it
/// has completed in error already).
pub(super) fn take_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> Result<RecvWqe, RespError> {
    srq::pop_recv(qp, cx).map_err(|e| match e {
        NoRecv::Empty => RespError::Rnr,
        NoRecv::Refused => RespError::RemoteOperational,
    })
}

/// A new READ or atomic request finds fewer than the QP's
/// `max_dest_rd_atomic` not yet fully answered; else it is an invalid
/// request (IBTA: too many outstanding READ/atomic requests), counted.
fn rd_atomic_room(qp: &mut QpCtx, cx: &mut Ctx<'_>) -> Result<(), RespError> {
    if qp.resp.out.outstanding() >= usize::from(qp.attr.max_dest_rd_atomic) {
        cx.count(&mut qp.counters, Counter::RdAtomicRefused);
        return Err(RespError::InvalidRequest);
    }
    Ok(())
}

/// Step 6: the receive WQE a SEND fills (a new one for its first packet,
/// the one in progress after) or a WRITE with immediate data completes.
pub(super) fn resources<'m>(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    pkt: &Packet<'_>,
    target: Target<'m>,
) -> Result<Plan<'m>, RespError> {
    let info = pkt.repr.bth.opcode.info();
    Ok(match target {
        Target::Send if starts_message(info) => Plan::Send {
            wqe: take_recv(qp, cx)?,
            off: 0,
        },
        Target::Send => {
            let (wqe, off) = qp.resp.recv.take().ok_or(RespError::WrongContinuation)?;
            Plan::Send { wqe, off }
        }
        Target::Write(ctx) => {
            let recv = if info.position.ends_message() && info.has_immdt {
                Some(take_recv(qp, cx)?)
            } else {
                None
            };
            Plan::Write { ctx, recv }
        }
        Target::Read(range, len, reth) => {
            rd_atomic_room(qp, cx)?;
            Plan::Read {
                range,
                len,
                rkey: reth.rkey,
                va: reth.va,
            }
        }
        Target::Atomic(range, eth, swap) => {
            rd_atomic_room(qp, cx)?;
            Plan::Atomic { range, eth, swap }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_length_rules() {
        assert!(length_ok(Position::First, 1024, 1024));
        assert!(!length_ok(Position::Middle, 1000, 1024));
        assert!(length_ok(Position::Last, 1, 1024));
        assert!(!length_ok(Position::Only, 1025, 1024));
    }

    #[test]
    fn write_payload_against_the_rest_of_the_message() {
        assert_eq!(fits(100, 100, true), Ok(()));
        assert_eq!(fits(100, 99, true), Err(RespError::Length));
        assert_eq!(fits(100, 64, false), Ok(()));
        assert_eq!(fits(64, 64, false), Err(RespError::Length));
    }
}

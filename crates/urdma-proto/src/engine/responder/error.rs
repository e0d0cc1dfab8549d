//! Why the responder refuses a request, and the one place that turns a
//! refusal into its consequence for the QP's transport.
//!
//! | error | RC | UC | UD |
//! |---|---|---|---|
//! | `Unsupported` | dropped | dropped | dropped |
//! | `Malformed` | ignored | ignored | ignored |
//! | `PsnOutOfSequence` | sequence NAK (once per ePSN), dropped; kept if marked selective ([`super::reorder`]) | - | - |
//! | `OpcodeSequence` | NAK invalid request, ERR (`QpReqErr`) | message abandoned | - |
//! | `WrongContinuation` | NAK invalid request, ERR (`QpReqErr`) | ignored | - |
//! | `InvalidRequest` | NAK invalid request, ERR (`QpReqErr`) | message abandoned | dropped |
//! | `Length` | NAK invalid request, ERR (`QpReqErr`) | message abandoned | dropped |
//! | `RemoteAccess` | NAK remote access, ERR (`QpAccessErr`) | message abandoned | dropped |
//! | `RemoteOperational` | NAK remote operational, ERR (`QpFatal`) | message abandoned | dropped |
//! | `Rnr` | RNR NAK with the QP's timer | message abandoned | dropped |
//!
//! "Dropped" counts the packet in `dropped`; "message abandoned" also gives
//! the receive WQE of the message in progress back to its queue, forgets a
//! WRITE in progress and expects the next PSN. A receive WQE the request
//! had consumed completes first, in error: `LOC_LEN_ERR`, or
//! `LOC_PROT_ERR` for `RemoteOperational` on RC and UD; on UD the packet
//! is then not counted as dropped.

use super::reply::send_aeth;
use crate::engine::qp::QpCtx;
use crate::engine::wqe::RecvWqe;
use crate::engine::{drop_packet, psn, srq, Counter, Ctx};
use crate::types::{AsyncEventKind, QpType, WcOpcode, WcStatus, WorkCompletion};
use urdma_wire::{AckSyndrome, NakCode, Packet};

/// What a step of the responder's chain found wrong with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RespError {
    /// The QP executes no such request: an opcode outside its transport's
    /// requests, or a state in which it receives nothing.
    Unsupported,
    /// A header the opcode carries is missing (the parser lets no such
    /// packet through).
    Malformed,
    /// RC: the PSN is after the expected one (a packet was lost).
    PsnOutOfSequence,
    /// A FIRST or ONLY packet inside a message, or a MIDDLE or LAST one
    /// outside any.
    OpcodeSequence,
    /// A MIDDLE or LAST packet continuing a message of another operation
    /// than the one in progress.
    WrongContinuation,
    /// Not allowed here: missing QP access rights, SEND with invalidate, a
    /// misaligned atomic, a wrong Q_Key, a READ or atomic beyond the QP's
    /// `max_dest_rd_atomic` not yet answered.
    InvalidRequest,
    /// A payload that does not suit its place in the message, the path MTU
    /// or what remains of the message; a DMA length above any message; a
    /// message longer than its receive buffer.
    Length,
    /// The target region refuses the access (R_Key, PD, access rights,
    /// bounds) or its memory is gone.
    RemoteAccess,
    /// The data could not be placed in the receive buffer.
    RemoteOperational,
    /// No receive WQE for a message that needs one.
    Rnr,
}

impl RespError {
    /// A short description, for logs.
    pub(super) fn describe(self) -> &'static str {
        match self {
            RespError::Unsupported => "no such request on this QP or in this state",
            RespError::Malformed => "request without its headers",
            RespError::PsnOutOfSequence => "PSN sequence error",
            RespError::OpcodeSequence => "packet out of message order",
            RespError::WrongContinuation => "packet continues another operation",
            RespError::InvalidRequest => "request not allowed",
            RespError::Length => "length error",
            RespError::RemoteAccess => "remote access error",
            RespError::RemoteOperational => "receive buffer not writable",
            RespError::Rnr => "no receive WQE",
        }
    }
}

/// A refused request: why, and the receive WQE it had consumed, if any,
/// which completes in error.
#[derive(Debug)]
pub(super) struct Refusal {
    /// What was wrong.
    pub kind: RespError,
    /// The receive WQE taken for the request.
    pub wqe: Option<RecvWqe>,
}

impl Refusal {
    /// A refusal that fails the receive WQE `wqe`.
    pub(super) fn failing(kind: RespError, wqe: RecvWqe) -> Self {
        Refusal {
            kind,
            wqe: Some(wqe),
        }
    }
}

impl From<RespError> for Refusal {
    fn from(kind: RespError) -> Self {
        Refusal { kind, wqe: None }
    }
}

/// Apply the consequence of refusing `pkt` on `qp`'s transport (see the
/// module's table).
pub(super) fn reject(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>, refusal: Refusal) {
    let Refusal { kind, wqe } = refusal;
    let consumed = wqe.is_some();
    if let Some(w) = wqe {
        let status = match (qp.qp_type, kind) {
            (QpType::Rc | QpType::Ud, RespError::RemoteOperational) => WcStatus::LocProtErr,
            _ => WcStatus::LocLenErr,
        };
        fail_recv(qp, cx, w, status);
    }
    let p = pkt.repr.bth.psn;
    match qp.qp_type {
        QpType::Rc => rc(qp, cx, p, kind),
        QpType::Uc => match kind {
            RespError::Malformed | RespError::WrongContinuation => {}
            RespError::Unsupported => drop_packet(qp, cx, kind.describe()),
            RespError::PsnOutOfSequence
            | RespError::OpcodeSequence
            | RespError::InvalidRequest
            | RespError::Length
            | RespError::RemoteAccess
            | RespError::RemoteOperational
            | RespError::Rnr => {
                abandon_message(qp, cx);
                qp.resp.epsn = psn::add(p, 1);
                drop_packet(qp, cx, kind.describe());
            }
        },
        QpType::Ud => {
            if !consumed && kind != RespError::Malformed {
                drop_packet(qp, cx, kind.describe());
            }
        }
    }
}

/// The consequence of refusing the RC request `p`.
fn rc(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, kind: RespError) {
    match kind {
        RespError::Malformed => {}
        RespError::Unsupported => drop_packet(qp, cx, kind.describe()),
        RespError::PsnOutOfSequence => {
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                let e = qp.resp.epsn;
                super::reply::sequence_nak(qp, cx, e, false);
            }
            drop_packet(qp, cx, kind.describe());
        }
        RespError::Rnr => {
            qp.resp.nak_sent = true;
            cx.count(&mut qp.counters, Counter::RnrNaksSent);
            let timer = qp.attr.min_rnr_timer;
            send_aeth(qp, cx, p, AckSyndrome::RnrNak { timer });
        }
        RespError::OpcodeSequence
        | RespError::WrongContinuation
        | RespError::InvalidRequest
        | RespError::Length => nak_error(qp, cx, p, NakCode::InvalidRequest),
        RespError::RemoteAccess => nak_error(qp, cx, p, NakCode::RemoteAccessError),
        RespError::RemoteOperational => nak_error(qp, cx, p, NakCode::RemoteOperationalError),
    }
}

/// NAK a request that cannot be executed and move the QP to ERR. The
/// responses still waiting are dropped (the QP would drop them), so that
/// the NAK goes out now.
pub(super) fn nak_error(qp: &mut QpCtx, cx: &mut Ctx<'_>, p: u32, code: NakCode) {
    tracing::debug!(qpn = qp.qpn, psn = p, ?code, "request NAKed");
    cx.count(&mut qp.counters, Counter::ErrorNaksSent);
    qp.resp.out.clear();
    send_aeth(qp, cx, p, AckSyndrome::Nak(code));
    let event = match code {
        NakCode::RemoteAccessError => AsyncEventKind::QpAccessErr,
        NakCode::InvalidRequest | NakCode::InvalidRdRequest => AsyncEventKind::QpReqErr,
        _ => AsyncEventKind::QpFatal,
    };
    qp.enter_error(cx, Some(event));
}

/// Complete a receive WQE the refused request had consumed with an error.
fn fail_recv(qp: &mut QpCtx, cx: &mut Ctx<'_>, wqe: RecvWqe, status: WcStatus) {
    let wc = WorkCompletion::new(wqe.wr_id, status, WcOpcode::Recv, qp.qpn);
    drop(wqe);
    qp.push_wc(cx, wc, true, false);
}

/// Give up the message in progress (UC): its receive WQE goes back to the
/// front of its queue, a WRITE in progress is forgotten.
pub(super) fn abandon_message(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    if let Some((w, _)) = qp.resp.recv.take() {
        srq::unpop_recv(qp, cx, w);
    }
    qp.resp.write = None;
}

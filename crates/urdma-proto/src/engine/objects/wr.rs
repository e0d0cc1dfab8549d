//! Work requests: the checks a send or receive request must pass, and
//! their making into WQEs queued on a QP (or failing in order there).

use super::{RecvRequest, SendData, SendRequest, SgEntry, MAX_MSG_SIZE};
use crate::engine::qp::QpCtx;
use crate::engine::wqe::{Payload, RecvWqe, SendOp, SendWqe};
use crate::engine::{local_ops, psn, Ctx};
use crate::error::{Error, Result};
use crate::mr::{self, LocalSge, MrCheckError, MrTable, SgeList};
use crate::types::{AccessFlags, QpState, QpType, WcStatus, WorkCompletion};

/// Check a send request and queue it on `qp`. Does not transmit. In the
/// ERR state the request is not queued: Ok(Some) is its flush completion,
/// for the caller to deliver.
pub(crate) fn enqueue_send(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wr: SendRequest,
) -> Result<Option<WorkCompletion>> {
    if qp.req.sq.len() + qp.req.held.len() >= qp.cap.max_send_wr as usize {
        return Err(Error::Exhausted("send queue full".into()));
    }
    if local_ops::must_hold(qp, &wr) {
        if qp.state() == QpState::Err {
            let wc = WorkCompletion::new(wr.wr_id, WcStatus::WrFlushErr, wr.op.wc_opcode(), qp.qpn);
            return Ok(Some(wc));
        }
        qp.req.held.push_back(wr);
        local_ops::run_held(qp, cx);
        return Ok(None);
    }
    queue_send(qp, cx, wr)
}

/// [`enqueue_send`] of a request nothing holds back.
pub(crate) fn queue_send(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    wr: SendRequest,
) -> Result<Option<WorkCompletion>> {
    if qp.req.sq.len() >= qp.cap.max_send_wr as usize {
        return Err(Error::Exhausted("send queue full".into()));
    }
    let mut wqe = build_send_wqe(qp, cx.mrs, wr)?;
    if qp.state() == QpState::Err {
        let wc = WorkCompletion::new(wqe.wr_id, WcStatus::WrFlushErr, wqe.op.wc_opcode(), qp.qpn);
        // The local buffers are released before the completion is seen.
        drop(wqe);
        return Ok(Some(wc));
    }
    if qp.qp_type != QpType::Ud {
        wqe.first_psn = qp.req.tail_psn;
        qp.req.tail_psn = psn::add(qp.req.tail_psn, wqe.npsn);
    }
    qp.req.sq.push_back(wqe);
    Ok(None)
}

/// Queue a send request the NIC refused as a WQE that fails in order:
/// when it reaches the head of the SQ it completes with `status` and the
/// QP enters ERR, as a NIC reports a bad WQE it fetched.
pub(crate) fn enqueue_failed(qp: &mut QpCtx, wr_id: u64, op: SendOp, status: WcStatus) {
    let mut wqe = SendWqe {
        wr_id,
        op,
        payload: Payload::Sges(SgeList::new()),
        len: 0,
        remote_va: 0,
        rkey: 0,
        signaled: true,
        solicited: false,
        ud: None,
        first_psn: 0,
        npsn: 1,
        local_error: Some(status),
        fence: false,
    };
    if qp.qp_type != QpType::Ud {
        wqe.first_psn = qp.req.tail_psn;
        qp.req.tail_psn = psn::add(qp.req.tail_psn, wqe.npsn);
    }
    qp.req.sq.push_back(wqe);
}

/// A receive request the engine refused: the error a poster sees, and
/// the completion status a NIC that fetched the request reports.
#[derive(Debug)]
pub(crate) struct RecvRefused {
    /// What was wrong.
    pub error: Error,
    /// LOC_PROT_ERR for a buffer outside the PD's MRs, LOC_QP_OP_ERR for
    /// a request beyond the queue's limits.
    pub status: WcStatus,
}

impl From<RecvRefused> for Error {
    fn from(r: RecvRefused) -> Self {
        r.error
    }
}

/// Check a receive request against a queue's limits and resolve its
/// buffers in `pd`.
pub(crate) fn build_recv_wqe(
    max_sge: u32,
    pd: u32,
    mrs: &MrTable,
    wr: RecvRequest,
) -> std::result::Result<RecvWqe, RecvRefused> {
    check_recv_sges(&wr, max_sge).map_err(|error| RecvRefused {
        error,
        status: WcStatus::LocQpOpErr,
    })?;
    let sges =
        resolve_sges(mrs, pd, &wr.sges, AccessFlags::LOCAL_WRITE).map_err(|e| RecvRefused {
            error: Error::inval(format!("receive buffer: {e}")),
            status: WcStatus::LocProtErr,
        })?;
    let len = crate::mr::total_len(&sges);
    Ok(RecvWqe {
        wr_id: wr.wr_id,
        sges,
        len,
    })
}

/// Resolve a caller's SGEs against the MR table.
pub(super) fn resolve_sges(
    mrs: &MrTable,
    pd: u32,
    sges: &[SgEntry],
    need: AccessFlags,
) -> std::result::Result<SgeList, String> {
    let mut out = SgeList::with_capacity(sges.len());
    for s in sges {
        if s.length == 0 {
            continue;
        }
        let len = s.length as usize;
        let (mr, off) = mr::lookup(mrs, s.lkey, pd, s.addr, len, need).map_err(|e| match e {
            MrCheckError::UnknownKey => format!("unknown lkey {:#x}", s.lkey),
            e => format!("lkey {:#x}: {e}", s.lkey),
        })?;
        out.push(LocalSge::new(mr.clone(), off, len));
    }
    Ok(out)
}

/// What [`check_send_request`] needs to know of a QP.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    /// Transport.
    pub qp_type: QpType,
    /// Queue capacities.
    pub cap: crate::verbs::QpCap,
    /// Outstanding READ/atomic requests allowed (0: none).
    pub max_rd_atomic: u8,
    /// Largest UD message (the port MTU), in bytes.
    pub ud_max: usize,
}

/// The check of a receive work request that needs no memory lookup: its
/// SGE count against the QP's limit. The engine runs it when the request
/// is posted; a driver of a NIC in another process runs it before.
pub fn check_recv_request(cap: &crate::verbs::QpCap, wr: &RecvRequest) -> Result<()> {
    check_recv_sges(wr, cap.max_recv_sge)
}

/// A receive request's SGE count against its queue's `max_sge`.
pub fn check_recv_sges(wr: &RecvRequest, max_sge: u32) -> Result<()> {
    if wr.sges.len() > max_sge as usize {
        return Err(Error::inval(format!(
            "{} SGEs above the queue's max_sge {}",
            wr.sges.len(),
            max_sge
        )));
    }
    Ok(())
}

/// The checks of a send work request that need no memory lookup: what
/// the transport allows, inline and SGE limits, message and atomic sizes.
/// The engine runs them when the request is posted; a driver of a NIC in
/// another process runs them before it posts, so that such errors reach
/// the caller of `ibv_post_send`. Answers the message length.
pub fn check_send_request(q: &SendLimits, wr: &SendRequest) -> Result<usize> {
    let op = wr.op;
    match q.qp_type {
        QpType::Uc | QpType::Ud if op.invalidates().is_some() => {
            return Err(Error::inval("SEND with invalidate needs an RC QP"))
        }
        QpType::Uc if op.is_read_or_atomic() => {
            return Err(Error::inval("UC QPs support only SEND and RDMA WRITE"))
        }
        QpType::Ud if op.has_remote() => return Err(Error::inval("UD QPs support only SEND")),
        QpType::Ud if wr.ud.is_none() => {
            return Err(Error::inval("UD send without an address handle"))
        }
        QpType::Rc if op.is_read_or_atomic() && q.max_rd_atomic == 0 => {
            return Err(Error::inval("READ/atomic on a QP with max_rd_atomic 0"))
        }
        _ => {}
    }
    let len = match &wr.data {
        SendData::Inline(bytes) => {
            if op.is_read_or_atomic() {
                return Err(Error::inval("inline data with READ or atomic"));
            }
            if bytes.len() > q.cap.max_inline_data as usize {
                return Err(Error::inval(format!(
                    "{} inline bytes above max_inline_data {}",
                    bytes.len(),
                    q.cap.max_inline_data
                )));
            }
            bytes.len() as u64
        }
        SendData::Sges(list) => {
            if list.len() > q.cap.max_send_sge as usize {
                return Err(Error::inval(format!(
                    "{} SGEs above max_send_sge {}",
                    list.len(),
                    q.cap.max_send_sge
                )));
            }
            let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
            if total > MAX_MSG_SIZE as u64 {
                return Err(Error::inval("message larger than 2^31 bytes"));
            }
            total
        }
    };
    if op.is_atomic() && len != 8 {
        return Err(Error::inval(
            "atomic operations need one 8-byte local buffer",
        ));
    }
    if q.qp_type == QpType::Ud && len > q.ud_max as u64 {
        return Err(Error::inval("UD message larger than the path MTU"));
    }
    Ok(len as usize)
}

fn build_send_wqe(qp: &QpCtx, mrs: &MrTable, wr: SendRequest) -> Result<SendWqe> {
    let limits = SendLimits {
        qp_type: qp.qp_type,
        cap: qp.cap,
        max_rd_atomic: qp.attr.max_rd_atomic,
        ud_max: qp.mtu(),
    };
    let len = check_send_request(&limits, &wr)?;
    let op = wr.op;
    let need = if op.is_read_or_atomic() {
        AccessFlags::LOCAL_WRITE
    } else {
        AccessFlags::empty()
    };
    let (payload, local_error) = match wr.data {
        SendData::Inline(bytes) => (Payload::Inline(bytes), None),
        SendData::Sges(list) => match resolve_sges(mrs, qp.pd, &list, need) {
            Ok(sges) => (Payload::Sges(sges), None),
            Err(why) => {
                tracing::debug!(qpn = qp.qpn, why, "send WR with a bad local buffer");
                (Payload::Sges(SgeList::new()), Some(WcStatus::LocProtErr))
            }
        },
    };
    let mtu = qp.mtu();
    let npsn = match op {
        SendOp::CompSwap { .. } | SendOp::FetchAdd { .. } => 1,
        _ => len.div_ceil(mtu).max(1) as u32,
    };
    Ok(SendWqe {
        wr_id: wr.wr_id,
        op,
        payload,
        len,
        remote_va: wr.remote_va,
        rkey: wr.rkey,
        signaled: wr.signaled,
        solicited: wr.solicited,
        ud: wr.ud,
        first_psn: 0,
        npsn,
        local_error,
        fence: wr.fence,
    })
}

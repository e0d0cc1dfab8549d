//! A QP leaving its work behind: ERR, which completes every queued WQE
//! with a flush error, and RESET, which drops it. Apart from [`QpCtx`]
//! itself because they reach into every part of the QP's state: the
//! requester's held requests ([`super::local_ops`]), the device's window
//! ([`super::device_window`]) and the shared-memory rings
//! ([`super::rings`]).

use super::qp::{default_mtu, QpCtx, ReqState, RespState};
use super::wqe::RecvWqe;
use super::Ctx;
use crate::types::{AsyncEventKind, QpState, WcOpcode, WcStatus, WorkCompletion};
use crate::verbs::QpAttr;

impl QpCtx {
    /// Move to ERR: raise `event` (if any), flush every send and receive WQE.
    pub(crate) fn enter_error(&mut self, cx: &mut Ctx<'_>, event: Option<AsyncEventKind>) {
        if self.state() == QpState::Err {
            return;
        }
        tracing::debug!(qpn = self.qpn, ?event, "QP enters ERR");
        self.attr.qp_state = QpState::Err;
        if let Some(kind) = event {
            cx.event(kind, self.qpn);
        }
        self.flush(cx);
    }

    /// Complete every queued WQE with WR_FLUSH_ERR (QP in ERR).
    pub(crate) fn flush(&mut self, cx: &mut Ctx<'_>) {
        // Payloads left by reference for what is flushed are not taken.
        self.req.live = Default::default();
        super::device_window::sync(self, cx.device_inflight);
        self.timers.stop_all();
        self.req.rd_atomic.clear();
        while !self.req.sq.is_empty() {
            self.complete_head(cx, WcStatus::WrFlushErr, 0);
        }
        super::local_ops::flush_held(self, cx);
        self.req.send_pos = 0;
        self.req.send_pkt = 0;
        self.resp.write = None;
        self.resp.held.clear();
        self.resp.out.clear();
        let mut recvs: Vec<RecvWqe> = Vec::new();
        if let Some((w, _)) = self.resp.recv.take() {
            recvs.push(w);
        }
        recvs.extend(self.rq.drain(..));
        if self.srq.is_some() {
            cx.event(AsyncEventKind::QpLastWqeReached, self.qpn);
        }
        for w in recvs {
            let wc = WorkCompletion::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn);
            drop(w);
            self.push_wc(cx, wc, true, false);
        }
        super::rings::flush_rings(self, cx);
    }

    /// Back to RESET: drop all queued work without completions.
    pub(crate) fn reset(&mut self) {
        self.req = ReqState::default();
        self.timers.stop_all();
        self.resp = RespState::default();
        self.rq.clear();
        super::rings::discard(&self.rings);
        self.remote = None;
        self.internal = false;
        let cap = self.cap;
        self.attr = QpAttr {
            cap,
            path_mtu: default_mtu(self.qp_type, self.port_mtu),
            ..QpAttr::default()
        };
    }
}

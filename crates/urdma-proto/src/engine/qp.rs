//! The engine's per-QP context: queues, requester and responder state,
//! and the state changes that flush queues.

use super::counters::Counters;
use super::timer::{TimerKind, Timers};
use super::wqe::{RecvWqe, SendWqe};
use super::Ctx;
use crate::mr::MrEntry;
use crate::sink::CompletionSink;
use crate::types::{AsyncEventKind, QpState, QpType, WcOpcode, WcStatus, WorkCompletion};
use crate::verbs::{QpAttr, QpCap};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// The shortest ACK timeout a QP gets, whatever code it asks for: a
/// peer's NIC here is a program the OS schedules, which can stall for a
/// scheduler period or more where a hardware NIC answers in microseconds,
/// and Linux rxe rounds a timeout up to at least one timer tick. Code 12
/// (16.8 ms); loss probes (see [`super::rtt`]) still recover losses in
/// about a round trip.
pub const MIN_ACK_TIMEOUT_NS: u64 = 4096 << 12;
use std::sync::Arc;

/// Path MTU of a new QP: UD QPs are never given one (no transition takes
/// it), so they use the port's MTU.
pub(super) fn default_mtu(qp_type: QpType, port_mtu: crate::types::Mtu) -> crate::types::Mtu {
    match qp_type {
        QpType::Ud => port_mtu,
        _ => crate::types::Mtu::Mtu1024.min(port_mtu),
    }
}

impl ReqState {
    /// Whether a loss now signals congestion: always without ECN (`ecn`
    /// false); with ECN, while the QP is paced after congestion
    /// notifications, when the queue that marks its packets may also drop
    /// them. Other losses are taken for corruption: repaired selectively,
    /// they leave the send window alone.
    pub(crate) fn loss_is_congestion(&self, ecn: bool) -> bool {
        !ecn || self.rate.rate().is_some()
    }
}

/// The shared work queues of a QP whose driver runs in another process.
#[derive(Debug, Default)]
pub struct QpRings {
    /// Send queue.
    pub sq: Option<Arc<dyn crate::work::WorkSource>>,
    /// Receive queue (None with an SRQ).
    pub rq: Option<Arc<dyn crate::work::WorkSource>>,
}

/// Requester (send side) state of a QP.
#[derive(Debug, Default)]
pub(crate) struct ReqState {
    /// Posted WQEs not yet completed, in posting order.
    pub sq: VecDeque<SendWqe>,
    /// PSN the next posted WQE starts at.
    pub tail_psn: u32,
    /// Index in `sq` of the WQE being transmitted.
    pub send_pos: usize,
    /// Payload of the message being sent, read ahead of its packets.
    pub stage: super::requester::stage::Stage,
    /// PSNs of `sq[send_pos]` already transmitted.
    pub send_pkt: u32,
    /// Oldest unacknowledged PSN.
    pub una: u32,
    /// Last PSN of each outstanding READ request or atomic.
    pub rd_atomic: VecDeque<u32>,
    /// Transport retries left.
    pub retry_left: u8,
    /// RNR retries left.
    pub rnr_left: u8,
    /// SQ drained event already raised for the current SQD period.
    pub drained_reported: bool,
    /// First PSN never transmitted (to tell retransmissions apart).
    pub high_psn: u32,
    /// After a go-back caused by a sign of loss: the first PSN not yet
    /// sent at that moment (see the completer's `rewind_for_loss`).
    pub resend_horizon: Option<u32>,
    /// When that go-back happened (ns).
    pub last_rewind_at: u64,
    /// The PSN it went back to.
    pub last_rewind_psn: u32,
    /// How many PSNs may be outstanding, after the losses seen.
    pub window: super::cwnd::SendWindow,
    /// How fast it may send, after the congestion notifications seen.
    pub rate: super::rate::SendRate,
    /// When this QP last sent a CNP to its peer (ns).
    pub last_cnp_at: Option<u64>,
    /// When the last request that asks for an ACK left.
    pub ack_req_at: u64,
    /// The last PSN of the last request sent that will be answered: one
    /// that asked for an ACK (a resend too), or a READ or atomic request
    /// (its last response PSN), which its responses answer.
    pub answered_psn: u32,
    /// The peer's responder marks its ACKs and NAKs selective: it keeps
    /// requests received after a loss (see the responder's `reorder`).
    pub peer_selective: bool,
    /// Round-trip time and loss probe timeout.
    pub rtt: super::rtt::RttEstimator,
    /// The PSN after the highest request the selective peer reported
    /// received (in its marked ACKs and NAKs), while above `una`.
    pub sack_high: Option<u32>,
    /// When each packet resent alone (not yet acknowledged) was last
    /// resent, by PSN.
    pub resent_at: rustc_hash::FxHashMap<u32, u64>,
    /// Requests posted behind a local operation (bind, invalidate) that
    /// waits for the SQ to empty, in posting order (see
    /// [`super::local_ops`]).
    pub held: VecDeque<super::request::SendRequest>,
    /// Whether the requests sent so far stand ([`super::dma::Liveness`]):
    /// replaced when the send queue is flushed, and ended with the state.
    pub live: super::dma::Liveness,
}

/// A multi-packet RDMA WRITE in progress at the responder.
#[derive(Debug)]
pub(crate) struct WriteCtx {
    /// Target region (None for a zero-length write).
    pub mr: Option<Arc<MrEntry>>,
    /// Offset of the next byte in the region.
    pub offset: usize,
    /// Bytes still expected.
    pub remaining: usize,
    /// Total DMA length.
    pub total: usize,
}

/// A READ or atomic request remembered for duplicate detection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdAtomicRecord {
    /// PSN of the request.
    pub first_psn: u32,
    /// Last PSN its responses use.
    pub last_psn: u32,
    /// The original value returned by an atomic (None for READ).
    pub atomic_orig: Option<u64>,
}

/// Responder (receive side) state of a QP.
#[derive(Debug, Default)]
pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: u32,
    /// Message sequence number.
    pub msn: u32,
    /// A sequence-error or RNR NAK was sent for `epsn` already.
    pub nak_sent: bool,
    /// SEND in progress: the receive WQE and bytes written so far.
    pub recv: Option<(RecvWqe, usize)>,
    /// WRITE in progress.
    pub write: Option<WriteCtx>,
    /// Recent READ/atomic requests.
    pub history: VecDeque<RdAtomicRecord>,
    /// An ACK held back until the end of the current batch (its PSN).
    pub ack_due: Option<u32>,
    /// The last READ answered (executed or answered again as a
    /// duplicate): its PSN and the time of the input that carried it. Copies of one request that arrive together
    /// (a requester that timed out several times while the responses
    /// were being built) are answered once.
    pub dup_read_answered: Option<(u32, u64)>,
    /// Requests received after a lost one, kept until it comes again
    /// (selective retransmission).
    pub held: super::responder::state::Held,
    /// The peer's last request carried the selective mark: ACKs and NAKs
    /// carry it back.
    pub peer_marks: bool,
    /// Responses waiting behind a READ still being answered.
    pub out: super::responder::state::Outbound,
}

/// Everything the engine knows about one QP.
#[derive(Debug)]
pub(crate) struct QpCtx {
    /// QP number.
    pub qpn: u32,
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: u32,
    /// Current attributes (state included).
    pub attr: QpAttr,
    /// Queue capacities.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// CQ for send completions.
    pub send_cq: Arc<dyn CompletionSink>,
    /// CQ for receive completions.
    pub recv_cq: Arc<dyn CompletionSink>,
    /// Connected peer (RC/UC), from the address vector.
    pub remote: Option<SocketAddr>,
    /// Posted receive WQEs (unused with an SRQ).
    pub rq: VecDeque<RecvWqe>,
    /// Shared receive queue this QP takes receive WQEs from.
    pub srq: Option<u32>,
    /// Requester state.
    pub req: ReqState,
    /// Retransmission and RNR back-off timers.
    pub(crate) timers: Timers,
    /// Responder state.
    pub resp: RespState,
    /// Per-QP counters.
    pub counters: Counters,
    /// Active MTU of the device's port: the largest path MTU, and UD's.
    pub port_mtu: crate::types::Mtu,
    /// Work queues in the memory of a driver in another process.
    pub rings: QpRings,
    /// The peer is served by the same NIC: packets carry
    /// [`super::INTERNAL_UNIT`] bytes instead of the path MTU.
    pub internal: bool,
    /// Its part of the device's packets in flight, as last counted
    /// ([`super::device_window`]).
    pub(crate) window_counted: u32,
}

impl QpCtx {
    /// A QP in the RESET state.
    pub(crate) fn new(
        qpn: u32,
        qp_type: QpType,
        pd: u32,
        cap: QpCap,
        sq_sig_all: bool,
        send_cq: Arc<dyn CompletionSink>,
        recv_cq: Arc<dyn CompletionSink>,
    ) -> Self {
        let attr = QpAttr {
            cap,
            path_mtu: default_mtu(qp_type, crate::types::Mtu::Mtu4096),
            ..QpAttr::default()
        };
        QpCtx {
            qpn,
            qp_type,
            pd,
            attr,
            cap,
            sq_sig_all,
            send_cq,
            recv_cq,
            remote: None,
            rq: VecDeque::new(),
            srq: None,
            req: ReqState::default(),
            timers: Timers::default(),
            resp: RespState::default(),
            counters: Counters::default(),
            port_mtu: crate::types::Mtu::Mtu4096,
            rings: Default::default(),
            internal: false,
            window_counted: 0,
        }
    }

    /// Set the port's active MTU (before the QP leaves RESET).
    pub(crate) fn set_port_mtu(&mut self, mtu: crate::types::Mtu) {
        self.port_mtu = mtu;
        self.attr.path_mtu = default_mtu(self.qp_type, mtu);
    }

    /// Current state.
    pub(crate) fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Payload bytes per packet: the path MTU, or
    /// [`super::INTERNAL_UNIT`] when the peer is served by the same NIC.
    pub(crate) fn mtu(&self) -> usize {
        if self.internal {
            super::INTERNAL_UNIT
        } else {
            self.attr.path_mtu.bytes()
        }
    }

    /// Retransmission timeout in ns (None = infinite, timeout code 0):
    /// 4.096 us * 2^code, but never less than [`MIN_ACK_TIMEOUT_NS`].
    pub(crate) fn ack_timeout_ns(&self) -> Option<u64> {
        match self.attr.timeout {
            0 => None,
            t => Some((4096u64 << t.min(31)).max(MIN_ACK_TIMEOUT_NS)),
        }
    }

    /// Start the loss probe timer, if the peer is selective and it does
    /// not run yet.
    pub(crate) fn arm_probe(&mut self, now: u64) {
        if !self.timers.is_running(TimerKind::Probe) {
            self.rearm_probe(now);
        }
    }

    /// Set the loss probe timer a probe timeout from `now`, if the peer
    /// takes part in selective retransmission.
    pub(crate) fn rearm_probe(&mut self, now: u64) {
        if self.req.peer_selective {
            let at = self.probe_deadline(now);
            self.timers.set(TimerKind::Probe, Some(at));
        }
    }

    /// When a loss probe is due if nothing progresses from `now`: after
    /// the probe timeout ([`super::rtt`]), and never later than a quarter
    /// of the ACK timeout, which goes back N.
    pub(crate) fn probe_deadline(&self, now: u64) -> u64 {
        let pto = self.req.rtt.probe_timeout();
        let cap = self
            .ack_timeout_ns()
            .map_or(pto, |t| (t / 4).max(super::rtt::MIN_PROBE_NS));
        now + pto.min(cap)
    }

    /// Queue a completion on the send or receive CQ. A full CQ moves the
    /// QP to the error state (the CQ reports the overrun).
    pub(crate) fn push_wc(
        &mut self,
        cx: &mut Ctx<'_>,
        wc: WorkCompletion,
        recv: bool,
        solicited: bool,
    ) {
        let cq = if recv { &self.recv_cq } else { &self.send_cq };
        if cq.push(wc, solicited).is_err() {
            let cqn = cq.cqn();
            tracing::debug!(qpn = self.qpn, cqn, "CQ overrun: the QP goes to ERR");
            cx.event(AsyncEventKind::CqErr, cqn);
            if self.state() != QpState::Err {
                self.enter_error(cx, Some(AsyncEventKind::QpFatal));
            }
        }
    }

    /// Complete the WQE at the head of the SQ with `status`.
    pub(crate) fn complete_head(&mut self, cx: &mut Ctx<'_>, status: WcStatus, vendor_err: u32) {
        let Some(wqe) = self.req.sq.pop_front() else {
            return;
        };
        // Its room in the driver's ring is free before its completion.
        if let Some(ring) = &self.rings.sq {
            ring.retire(1);
        }
        if self.req.send_pos == 0 {
            // The send pointer was inside the WQE just completed: resume
            // at the start of the next one.
            self.req.send_pkt = 0;
        } else {
            self.req.send_pos -= 1;
        }
        let report = wqe.signaled || self.sq_sig_all || status != WcStatus::Success;
        let mut wc = WorkCompletion::new(wqe.wr_id, status, wqe.op.wc_opcode(), self.qpn);
        wc.vendor_err = vendor_err;
        wc.src_qp = self.attr.dest_qp_num;
        if status == WcStatus::Success
            && matches!(
                wc.opcode,
                WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
            )
        {
            wc.byte_len = wqe.len as u32;
        }
        // Release the local buffers before the completion becomes visible.
        drop(wqe);
        if report {
            self.push_wc(cx, wc, false, false);
        }
    }
}

impl super::timer::QpDeadlines for super::HashMap<u32, QpCtx> {
    fn deadline_of(&self, qpn: u32) -> Option<u64> {
        self.get(&qpn)?.timers.next_deadline()
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn all(&self) -> impl Iterator<Item = (u32, Option<u64>)> + '_ {
        self.iter()
            .map(|(&qpn, qp)| (qpn, qp.timers.next_deadline()))
    }
}

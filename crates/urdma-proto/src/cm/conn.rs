//! One connection's CM state.

use crate::error::Error;
use std::net::SocketAddr;
use urdma_wire::cm::CmMad;

/// Which end of the connection this CM is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Sent the REQ.
    Active,
    /// Received the REQ.
    Passive,
}

/// IBTA CM states (Vol 1, 12.9.6) this CM goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Active: REQ sent, waiting for a REP.
    ReqSent,
    /// Active: the peer sent an MRA for the REQ.
    MraReqRcvd,
    /// Passive: REQ received, the consumer decides.
    ReqRcvd,
    /// Passive: REQ received again, MRA sent.
    MraReqSent,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    /// Passive: the peer sent an MRA for the REP.
    MraRepRcvd,
    /// Active: REP received, the consumer readies the QP.
    RepRcvd,
    /// Both: connected.
    Established,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// Disconnected; the IDs are kept a while.
    TimeWait,
    /// Active: SIDR_REQ sent, waiting for the SIDR_REP.
    SidrReqSent,
    /// Passive: SIDR_REQ received, the consumer decides.
    SidrReqRcvd,
}

impl State {
    /// The state's name.
    pub(super) fn name(self) -> &'static str {
        match self {
            State::ReqSent => "REQ_SENT",
            State::MraReqRcvd => "MRA_REQ_RCVD",
            State::ReqRcvd => "REQ_RCVD",
            State::MraReqSent => "MRA_REQ_SENT",
            State::RepSent => "REP_SENT",
            State::MraRepRcvd => "MRA_REP_RCVD",
            State::RepRcvd => "REP_RCVD",
            State::Established => "ESTABLISHED",
            State::DreqSent => "DREQ_SENT",
            State::TimeWait => "TIMEWAIT",
            State::SidrReqSent => "SIDR_REQ_SENT",
            State::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }
}

/// A message waiting for its answer, resent until it comes.
pub(super) struct Pending {
    /// The message, resent as it was (same TID).
    pub(super) mad: CmMad,
    /// When to resend it (ns).
    pub(super) deadline: u64,
    /// Time to wait for each answer (ns).
    pub(super) timeout: u64,
    /// Resends left.
    pub(super) retries_left: u8,
}

impl Pending {
    pub(super) fn new(mad: CmMad, now: u64, timeout: u64, retries: u8) -> Self {
        Pending {
            mad,
            deadline: now.saturating_add(timeout),
            timeout,
            retries_left: retries,
        }
    }
}

/// One connection.
pub(super) struct Conn {
    pub(super) role: Role,
    pub(super) state: State,
    /// The peer's CM.
    pub(super) peer: SocketAddr,
    /// The local QP.
    pub(super) local_qpn: u32,
    /// The peer's QP (0 until known).
    pub(super) remote_qpn: u32,
    /// The peer's communication ID (0 until known).
    pub(super) remote_comm_id: u32,
    /// The peer's CA GUID (0 until known).
    pub(super) remote_guid: u64,
    /// TID of the REQ or SIDR_REQ (the passive side answers with it; the
    /// active side withdraws with it).
    pub(super) req_tid: u64,
    /// The service asked for (a SIDR_REP names it).
    pub(super) service_id: u64,
    /// TID of the REP (the active side answers with it).
    pub(super) rep_tid: u64,
    /// CM response timeout code of the peer.
    pub(super) response_timeout: u8,
    /// Resends of REQ, REP and DREQ.
    pub(super) max_retries: u8,
    /// The path's local ACK timeout code (TimeWait lasts about that).
    pub(super) ack_timeout: u8,
    /// The message waiting for an answer.
    pub(super) pending: Option<Pending>,
    /// The RTU sent, for a duplicate REP.
    pub(super) last_rtu: Option<CmMad>,
    /// The MRA sent, for a duplicate REQ.
    pub(super) last_mra: Option<CmMad>,
    /// The DREP sent, for a duplicate DREQ.
    pub(super) last_drep: Option<CmMad>,
    /// End of TimeWait (ns).
    pub(super) timewait_until: Option<u64>,
    /// Passive: when the requester has surely given up on a REQ the
    /// consumer never answered (ns).
    pub(super) answer_by: Option<u64>,
    /// The consumer heard of the disconnection.
    pub(super) disconnect_reported: bool,
    /// The consumer went away ([`super::Cm::destroy`]): it hears nothing
    /// more of this connection.
    pub(super) orphaned: bool,
}

impl Conn {
    pub(super) fn new(role: Role, peer: SocketAddr, local_qpn: u32) -> Self {
        Conn {
            role,
            state: State::ReqSent,
            peer,
            local_qpn,
            remote_qpn: 0,
            remote_comm_id: 0,
            remote_guid: 0,
            req_tid: 0,
            service_id: 0,
            rep_tid: 0,
            response_timeout: super::DEFAULT_RESPONSE_TIMEOUT,
            max_retries: super::DEFAULT_MAX_RETRIES,
            ack_timeout: 0,
            pending: None,
            last_rtu: None,
            last_mra: None,
            last_drep: None,
            timewait_until: None,
            answer_by: None,
            disconnect_reported: false,
            orphaned: false,
        }
    }

    /// When this connection has timer work.
    pub(super) fn deadline(&self) -> Option<u64> {
        [
            self.pending.as_ref().map(|p| p.deadline),
            self.timewait_until,
            self.answer_by,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The error for a call this state does not allow.
    pub(super) fn wrong_state(&self, what: &str) -> Error {
        Error::inval(format!(
            "cannot {what} a connection in state {}",
            self.state.name()
        ))
    }
}

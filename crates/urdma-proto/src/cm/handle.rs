//! The CM's answers to arriving MADs and to its timers.

use super::conn::{Conn, Role, State};
use super::{timeout_nanos, Cm, CmEvent, ConnId};
use std::net::SocketAddr;
use urdma_wire::cm::{
    msg_ref, rej_reason, CmMad, CmMessage, Drep, Dreq, Mra, Rej, Rep, Req, Rtu, REJ_PRIVATE_LEN,
};

/// Service timeout an MRA announces (4.096 µs × 2^22 ≈ 17 s).
const MRA_SERVICE_TIMEOUT: u8 = 22;

/// Connection requests held at once before the consumer answers them (a
/// listen backlog for the whole device); more are rejected for want of
/// resources, so that a flood of REQs holds a bounded amount.
pub(super) const MAX_HALF_OPEN: usize = 1024;

/// The longest a received REQ waits for the consumer's answer, whatever
/// patience its sender announces (its codes allow up to about 39 hours).
pub(super) const MAX_REQ_PATIENCE_NS: u64 = 90_000_000_000;

impl Cm {
    /// Take a MAD that arrived from `from` at `now` (ns).
    pub fn handle(&mut self, now: u64, from: SocketAddr, mad: &CmMad) {
        // A message about one of our connections counts only from that
        // connection's peer: anyone else who names its IDs is ignored.
        let named = match &mad.msg {
            CmMessage::Mra(m) => Some(m.remote_comm_id),
            CmMessage::Rej(m) => Some(m.remote_comm_id),
            CmMessage::Rep(m) => Some(m.remote_comm_id),
            CmMessage::Rtu(m) => Some(m.remote_comm_id),
            CmMessage::Dreq(m) => Some(m.remote_comm_id),
            CmMessage::Drep(m) => Some(m.remote_comm_id),
            _ => None,
        };
        if let Some(c) = named.and_then(|id| self.conns.get(&id)) {
            if c.peer.ip() != from.ip() {
                self.refused += 1;
                tracing::debug!(%from, peer = %c.peer, "CM message about another peer's connection");
                return;
            }
        }
        match &mad.msg {
            CmMessage::Req(m) => self.on_req(now, from, mad.tid, m),
            CmMessage::Mra(m) => self.on_mra(now, m),
            CmMessage::Rej(m) => self.on_rej(now, from, m),
            CmMessage::Rep(m) => self.on_rep(mad.tid, m),
            CmMessage::Rtu(m) => self.on_rtu(m),
            CmMessage::Dreq(m) => self.on_dreq(now, from, mad.tid, m),
            CmMessage::Drep(m) => self.on_drep(now, m),
            CmMessage::SidrReq(m) => self.on_sidr_req(now, from, mad.tid, m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(from, m),
        }
    }

    fn resend(&mut self, to: SocketAddr, mad: Option<CmMad>) {
        if let Some(mad) = mad {
            self.tx.push_back(super::Outgoing { to, mad });
        }
    }

    fn reject_req(&mut self, to: SocketAddr, tid: u64, local: ConnId, req: &Req, reason: u16) {
        let rej = super::rej(
            local,
            req.local_comm_id,
            msg_ref::REQ,
            reason,
            &[],
            [0; REJ_PRIVATE_LEN],
        );
        self.send(to, tid, CmMessage::Rej(rej));
    }

    fn on_req(&mut self, now: u64, from: SocketAddr, tid: u64, req: &Req) {
        let dup = self.conns.iter().find_map(|(&id, c)| {
            (c.role == Role::Passive
                && c.peer.ip() == from.ip()
                && c.remote_comm_id == req.local_comm_id
                && c.remote_guid == req.local_ca_guid)
                .then_some(id)
        });
        if let Some(id) = dup {
            return self.on_duplicate_req(id, from, tid, req);
        }
        // The peer's QP still has a connection here: the REQ is from a
        // peer that restarted (or a stale one); Linux's CM rejects it and
        // ends the old connection. Only that peer's own address may say
        // so: a REQ from anywhere else that names its CA GUID and QP ends
        // nothing.
        let stale = self.conns.iter().find_map(|(&id, c)| {
            (c.peer.ip() == from.ip()
                && c.remote_qpn == req.local_qpn
                && c.remote_guid == req.local_ca_guid)
                .then_some((id, c.state))
        });
        if let Some((old, state)) = stale {
            self.reject_req(from, tid, 0, req, rej_reason::STALE_CONN);
            if state == State::Established && self.disconnect(now, old, &[]).is_ok() {
                self.report_disconnected(old);
            }
            return;
        }
        if !self.listeners.contains(&req.service_id) {
            return self.reject_req(from, tid, 0, req, rej_reason::INVALID_SERVICE_ID);
        }
        if req.transport > 1 {
            return self.reject_req(from, tid, 0, req, rej_reason::INVALID_TRANSPORT_TYPE);
        }
        if self.half_open() >= MAX_HALF_OPEN {
            self.refused += 1;
            return self.reject_req(from, tid, 0, req, rej_reason::NO_RESOURCES);
        }
        let id = self.new_comm_id();
        let mut c = Conn::new(Role::Passive, from, 0);
        c.state = State::ReqRcvd;
        c.remote_comm_id = req.local_comm_id;
        c.remote_guid = req.local_ca_guid;
        c.remote_qpn = req.local_qpn;
        c.req_tid = tid;
        c.response_timeout = req.local_cm_response_timeout;
        c.max_retries = req.max_cm_retries;
        c.ack_timeout = req.primary.local_ack_timeout;
        let patience = self.patience_ns(req.remote_cm_response_timeout, req.max_cm_retries);
        c.answer_by = Some(now.saturating_add(patience.min(MAX_REQ_PATIENCE_NS)));
        self.conns.insert(id, c);
        self.tell(CmEvent::ConnectRequest {
            id,
            peer: from,
            req: Box::new(req.clone()),
        });
    }

    /// Received REQs and SIDR_REQs the consumer has not yet answered.
    pub(super) fn half_open(&self) -> usize {
        self.conns
            .values()
            .filter(|c| {
                c.role == Role::Passive
                    && matches!(
                        c.state,
                        State::ReqRcvd | State::MraReqSent | State::SidrReqRcvd
                    )
            })
            .count()
    }

    fn on_duplicate_req(&mut self, id: ConnId, from: SocketAddr, tid: u64, req: &Req) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            State::ReqRcvd => {
                let mra = Mra {
                    local_comm_id: id,
                    remote_comm_id: req.local_comm_id,
                    message_mraed: msg_ref::REQ,
                    service_timeout: MRA_SERVICE_TIMEOUT,
                    ..Mra::default()
                };
                let mad = self.send(from, tid, CmMessage::Mra(mra));
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = State::MraReqSent;
                    c.last_mra = Some(mad);
                }
            }
            State::MraReqSent => {
                let mad = c.last_mra.clone();
                self.resend(from, mad);
            }
            State::RepSent | State::MraRepRcvd => {
                let mad = c.pending.as_ref().map(|p| p.mad.clone());
                self.resend(from, mad);
            }
            State::TimeWait => self.reject_req(from, tid, id, req, rej_reason::STALE_CONN),
            _ => {}
        }
    }

    fn on_mra(&mut self, now: u64, mra: &Mra) {
        let wait = 2 * timeout_nanos(self.packet_lifetime) + timeout_nanos(mra.service_timeout);
        let Some(c) = self.conns.get_mut(&mra.remote_comm_id) else {
            return;
        };
        // A repeated MRA (the peer answers each resent message) holds the
        // requester again.
        let next = match (c.state, mra.message_mraed) {
            (State::ReqSent | State::MraReqRcvd, msg_ref::REQ) => State::MraReqRcvd,
            (State::RepSent | State::MraRepRcvd, msg_ref::REP) => State::MraRepRcvd,
            _ => return,
        };
        c.state = next;
        if c.remote_comm_id == 0 {
            c.remote_comm_id = mra.local_comm_id;
        }
        if let Some(p) = c.pending.as_mut() {
            p.deadline = now.saturating_add(wait);
        }
    }

    fn on_rej(&mut self, now: u64, from: SocketAddr, rej: &Rej) {
        // A requester that gives up its REQ before it heard our answer
        // does not know our ID: it names its own, and a withdrawal for
        // timeout names its CA GUID.
        if rej.remote_comm_id == 0 {
            let guid = (rej.reason == rej_reason::TIMEOUT && rej.rejected_info_length >= 8)
                .then(|| u64::from_be_bytes(rej.ari[..8].try_into().unwrap_or_default()));
            let withdrawn = self.conns.iter().find_map(|(&id, c)| {
                (c.role == Role::Passive
                    && matches!(
                        c.state,
                        State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd
                    )
                    && c.remote_comm_id == rej.local_comm_id
                    && c.peer.ip() == from.ip()
                    && guid.is_none_or(|g| g == c.remote_guid))
                .then_some(id)
            });
            if let Some(id) = withdrawn {
                self.end(id, rejected(id, rej));
            }
            return;
        }
        let id = rej.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        if c.remote_comm_id != 0 && c.remote_comm_id != rej.local_comm_id {
            return;
        }
        match c.state {
            State::ReqSent
            | State::MraReqRcvd
            | State::ReqRcvd
            | State::MraReqSent
            | State::RepSent
            | State::MraRepRcvd
            | State::RepRcvd => self.end(id, rejected(id, rej)),
            // The peer went away after the handshake (its REJ crossed our
            // RTU): the connection ends, its IDs wait in TimeWait, and the
            // consumer's last word is the reject.
            State::Established | State::DreqSent => {
                self.enter_timewait(now, id, false);
                self.tell(rejected(id, rej));
                if let Some(c) = self.conns.get_mut(&id) {
                    c.orphaned = true;
                }
            }
            _ => {}
        }
    }

    fn on_rep(&mut self, tid: u64, rep: &Rep) {
        let Some(c) = self.conns.get_mut(&rep.remote_comm_id) else {
            return;
        };
        if c.role != Role::Active {
            return;
        }
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                c.state = State::RepRcvd;
                c.pending = None;
                c.remote_comm_id = rep.local_comm_id;
                c.remote_qpn = rep.local_qpn;
                c.remote_guid = rep.local_ca_guid;
                c.rep_tid = tid;
                self.tell(CmEvent::ConnectResponse {
                    id: rep.remote_comm_id,
                    rep: Box::new(rep.clone()),
                });
            }
            // The RTU was lost: send it again.
            State::Established if c.remote_comm_id == rep.local_comm_id => {
                let (peer, mad) = (c.peer, c.last_rtu.clone());
                self.resend(peer, mad);
            }
            _ => {}
        }
    }

    fn on_rtu(&mut self, rtu: &Rtu) {
        let Some(c) = self.conns.get_mut(&rtu.remote_comm_id) else {
            return;
        };
        if c.role == Role::Passive
            && c.remote_comm_id == rtu.local_comm_id
            && matches!(c.state, State::RepSent | State::MraRepRcvd)
        {
            c.state = State::Established;
            c.pending = None;
            self.tell(CmEvent::Established {
                id: rtu.remote_comm_id,
            });
        }
    }

    fn on_dreq(&mut self, now: u64, from: SocketAddr, tid: u64, dreq: &Dreq) {
        let id = dreq.remote_comm_id;
        let drep = |local: u32, remote: u32| Drep {
            local_comm_id: local,
            remote_comm_id: remote,
            ..Drep::default()
        };
        let Some(c) = self.conns.get(&id) else {
            // Already gone: answer, so that the peer stops asking.
            self.send(from, tid, CmMessage::Drep(drep(id, dreq.local_comm_id)));
            return;
        };
        if c.remote_comm_id != dreq.local_comm_id || c.local_qpn != dreq.remote_qpn {
            return;
        }
        match c.state {
            // Both sides may disconnect at once: the DREQ that crosses
            // ours ends the connection (our DREP may never come back).
            State::Established | State::RepSent | State::MraRepRcvd | State::DreqSent => {
                let peer = c.peer;
                let mad = self.send(peer, tid, CmMessage::Drep(drep(id, dreq.local_comm_id)));
                self.enter_timewait(now, id, true);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.last_drep = Some(mad);
                }
            }
            State::TimeWait => match c.last_drep.clone() {
                Some(mad) => self.resend(c.peer, Some(mad)),
                // Ended by a REJ or a destroy: answer so that the peer
                // stops asking.
                None => {
                    let peer = c.peer;
                    self.send(peer, tid, CmMessage::Drep(drep(id, dreq.local_comm_id)));
                }
            },
            _ => {}
        }
    }

    fn on_drep(&mut self, now: u64, drep: &Drep) {
        let id = drep.remote_comm_id;
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        if c.state == State::DreqSent && c.remote_comm_id == drep.local_comm_id {
            self.enter_timewait(now, id, true);
        }
    }

    /// Move `id` to TimeWait, reporting the disconnection if `report`.
    pub(super) fn enter_timewait(&mut self, now: u64, id: ConnId, report: bool) {
        let lifetime = timeout_nanos(self.packet_lifetime);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = State::TimeWait;
        c.pending = None;
        c.timewait_until = Some(now.saturating_add(2 * lifetime + timeout_nanos(c.ack_timeout)));
        if report {
            self.report_disconnected(id);
        }
    }

    /// Tell the consumer `id` is disconnected, once.
    fn report_disconnected(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !c.disconnect_reported {
                c.disconnect_reported = true;
                self.tell(CmEvent::Disconnected { id });
            }
        }
    }

    /// Resend what is unanswered, give up what ran out of retries, and end
    /// TimeWaits, as of `now` (ns).
    pub fn on_timer(&mut self, now: u64) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.timewait_until.is_some_and(|t| t <= now) {
                self.end(id, CmEvent::TimewaitExit { id });
                continue;
            }
            if c.answer_by.is_some_and(|t| t <= now) {
                c.answer_by = None;
                if matches!(
                    c.state,
                    State::ReqRcvd | State::MraReqSent | State::SidrReqRcvd
                ) {
                    tracing::debug!(id, "request left unanswered past the requester's patience");
                    self.end(id, CmEvent::Unreachable { id });
                    continue;
                }
            }
            let peer = c.peer;
            let Some(p) = c.pending.as_mut().filter(|p| p.deadline <= now) else {
                continue;
            };
            if p.retries_left > 0 {
                p.retries_left -= 1;
                p.deadline = now.saturating_add(p.timeout);
                let mad = p.mad.clone();
                self.resend(peer, Some(mad));
                continue;
            }
            match c.state {
                State::DreqSent => self.enter_timewait(now, id, true),
                _ => {
                    tracing::debug!(id, state = c.state.name(), "CM peer did not answer");
                    self.end(id, CmEvent::Unreachable { id });
                }
            }
        }
    }
}

/// The event of a REJ for connection `id`.
fn rejected(id: ConnId, rej: &Rej) -> CmEvent {
    CmEvent::Rejected {
        id,
        reason: rej.reason,
        private_data: rej.private_data.to_vec(),
    }
}

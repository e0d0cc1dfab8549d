//! The consumer's calls on a connection: [`Cm::connect`], [`Cm::accept`],
//! [`Cm::reject`], [`Cm::ready_to_use`], [`Cm::established`],
//! [`Cm::disconnect`] and [`Cm::destroy`].

use super::conn::{Conn, Pending, Role, State};
use super::{copy_private, rej, AcceptParams, Cm, CmEvent, ConnId, ConnectParams};
use super::{msg_ref, rej_reason, Rep, Req, REP_PRIVATE_LEN, REQ_PRIVATE_LEN, SIDR_STATUS_REJECT};
use crate::error::{Error, Result};
use crate::verbs::Gid;
use urdma_wire::cm::{
    CmMessage, Dreq, PathInfo, Rtu, DREQ_PRIVATE_LEN, REJ_PRIVATE_LEN, RTU_PRIVATE_LEN,
};

impl Cm {
    /// Send a REQ: the connection is `ReqSent` until a REP, REJ or the
    /// last retry.
    pub fn connect(&mut self, now: u64, p: &ConnectParams) -> Result<ConnId> {
        let private_data = copy_private::<REQ_PRIVATE_LEN>(&p.private_data)?;
        if p.transport > 1 {
            return Err(Error::inval("the CM connects RC (0) and UC (1) QPs"));
        }
        let id = self.new_comm_id();
        let tid = self.new_tid();
        let path = PathInfo {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: Gid::from_ip(self.local_for(p.peer.ip())).0,
            remote_gid: Gid::from_ip(p.peer.ip()).0,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            local_ack_timeout: p.ack_timeout.min(31),
            ..PathInfo::default()
        };
        let req = Req {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.guid,
            local_qpn: p.qpn & urdma_wire::QPN_MASK,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.response_timeout.min(31),
            transport: p.transport,
            starting_psn: p.starting_psn & urdma_wire::PSN_MASK,
            local_cm_response_timeout: p.response_timeout.min(31),
            retry_count: p.retry_count.min(7),
            pkey: urdma_wire::DEFAULT_PKEY,
            path_mtu: p.path_mtu,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: p.max_retries.min(15),
            srq: p.srq,
            primary: path,
            private_data,
            ..Req::default()
        };
        let mad = self.send(p.peer, tid, CmMessage::Req(req));
        let timeout = self.response_ns(p.response_timeout);
        let mut c = Conn::new(Role::Active, p.peer, p.qpn & urdma_wire::QPN_MASK);
        c.state = State::ReqSent;
        c.req_tid = tid;
        c.response_timeout = p.response_timeout.min(31);
        c.max_retries = p.max_retries.min(15);
        c.ack_timeout = p.ack_timeout.min(31);
        c.pending = Some(Pending::new(mad, now, timeout, c.max_retries));
        self.conns.insert(id, c);
        Ok(id)
    }

    /// Answer a REQ with a REP: the connection is `RepSent` until the RTU
    /// (or the first packet on the QP, [`Cm::established`]).
    pub fn accept(&mut self, now: u64, id: ConnId, p: &AcceptParams) -> Result<()> {
        let private_data = copy_private::<REP_PRIVATE_LEN>(&p.private_data)?;
        let guid = self.guid;
        let c = self.conn_mut(id)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(c.wrong_state("accept"));
        }
        c.local_qpn = p.qpn & urdma_wire::QPN_MASK;
        c.answer_by = None;
        let rep = Rep {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            local_qpn: c.local_qpn,
            starting_psn: p.starting_psn & urdma_wire::PSN_MASK,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: guid,
            private_data,
            ..Rep::default()
        };
        let (peer, tid, code, retries) = (c.peer, c.req_tid, c.response_timeout, c.max_retries);
        c.state = State::RepSent;
        let mad = self.send(peer, tid, CmMessage::Rep(rep));
        let timeout = self.response_ns(code);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = Some(Pending::new(mad, now, timeout, retries));
        }
        Ok(())
    }

    /// Reject a REQ (passive side) or a REP (active side) with `reason`,
    /// or a SIDR_REQ (a SIDR_REP with status reject); the connection is
    /// gone.
    pub fn reject(&mut self, id: ConnId, reason: u16, private_data: &[u8]) -> Result<()> {
        if self.conn_mut(id)?.state == State::SidrReqRcvd {
            return self.answer_sidr(id, SIDR_STATUS_REJECT, 0, 0, private_data);
        }
        let private_data = copy_private::<REJ_PRIVATE_LEN>(private_data)?;
        let c = self.conn_mut(id)?;
        let (message_rejected, tid) = match c.state {
            State::ReqRcvd | State::MraReqSent => (msg_ref::REQ, c.req_tid),
            State::RepRcvd => (msg_ref::REP, c.rep_tid),
            _ => return Err(c.wrong_state("reject")),
        };
        let rej = rej(
            id,
            c.remote_comm_id,
            message_rejected,
            reason,
            &[],
            private_data,
        );
        let peer = c.peer;
        self.conns.remove(&id);
        self.send(peer, tid, CmMessage::Rej(rej));
        Ok(())
    }

    /// Active side, after the REP: send the RTU; the connection is
    /// established.
    pub fn ready_to_use(&mut self, id: ConnId, private_data: &[u8]) -> Result<()> {
        let private_data = copy_private::<RTU_PRIVATE_LEN>(private_data)?;
        let c = self.conn_mut(id)?;
        if c.state != State::RepRcvd {
            return Err(c.wrong_state("send an RTU"));
        }
        c.state = State::Established;
        let rtu = Rtu {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            private_data,
        };
        let (peer, tid) = (c.peer, c.rep_tid);
        let mad = self.send(peer, tid, CmMessage::Rtu(rtu));
        if let Some(c) = self.conns.get_mut(&id) {
            c.last_rtu = Some(mad);
        }
        self.tell(CmEvent::Established { id });
        Ok(())
    }

    /// Passive side: the QP received its first packet before the RTU
    /// (which was lost): the connection is established.
    pub fn established(&mut self, id: ConnId) -> Result<()> {
        let c = self.conn_mut(id)?;
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            return Err(c.wrong_state("establish"));
        }
        c.state = State::Established;
        c.pending = None;
        self.tell(CmEvent::Established { id });
        Ok(())
    }

    /// Send a DREQ: the connection goes to TimeWait on the DREP (or after
    /// the last retry).
    pub fn disconnect(&mut self, now: u64, id: ConnId, private_data: &[u8]) -> Result<()> {
        let private_data = copy_private::<DREQ_PRIVATE_LEN>(private_data)?;
        let tid = self.new_tid();
        let c = self.conn_mut(id)?;
        if c.state != State::Established {
            return Err(c.wrong_state("disconnect"));
        }
        c.state = State::DreqSent;
        let dreq = Dreq {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data,
        };
        let (peer, code, retries) = (c.peer, c.response_timeout, c.max_retries);
        let mad = self.send(peer, tid, CmMessage::Dreq(dreq));
        let timeout = self.response_ns(code);
        if let Some(c) = self.conns.get_mut(&id) {
            c.pending = Some(Pending::new(mad, now, timeout, retries));
        }
        Ok(())
    }

    /// The consumer of `id` went away: end what it left as Linux's CM
    /// does. A REQ it sent is withdrawn (REJ reason 4, timeout, with the
    /// CA GUID); a REQ or REP it was answering, or a REP it sent, is
    /// rejected (reason 28); a SIDR_REQ it was answering gets a SIDR_REP
    /// with status reject; an established connection gets a DREQ. The
    /// IDs of a connection that was set up then wait in TimeWait; the
    /// consumer hears nothing more. False if there is no such connection.
    pub fn destroy(&mut self, now: u64, id: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        c.orphaned = true;
        let (state, peer, tid, remote) = (c.state, c.peer, c.req_tid, c.remote_comm_id);
        match state {
            State::ReqSent | State::MraReqRcvd => {
                let guid = self.guid.to_be_bytes();
                let rej = rej(
                    id,
                    remote,
                    msg_ref::OTHER,
                    rej_reason::TIMEOUT,
                    &guid,
                    [0; REJ_PRIVATE_LEN],
                );
                self.conns.remove(&id);
                self.send(peer, tid, CmMessage::Rej(rej));
            }
            State::RepSent | State::MraRepRcvd => {
                let rej = rej(
                    id,
                    remote,
                    msg_ref::OTHER,
                    rej_reason::CONSUMER_DEFINED,
                    &[],
                    [0; REJ_PRIVATE_LEN],
                );
                self.send(peer, tid, CmMessage::Rej(rej));
                self.enter_timewait(now, id, false);
            }
            State::ReqRcvd | State::MraReqSent | State::RepRcvd | State::SidrReqRcvd => {
                let _ = self.reject(id, rej_reason::CONSUMER_DEFINED, &[]);
            }
            State::Established | State::DreqSent => {
                if state == State::Established {
                    let _ = self.disconnect(now, id, &[]);
                }
                // Linux's CM does not wait for the DREP of a destroyed ID.
                self.enter_timewait(now, id, false);
            }
            State::SidrReqSent => {
                self.conns.remove(&id);
            }
            State::TimeWait => {}
        }
        true
    }
}

//! Service ID resolution (IBTA Vol 1, 12.11): a UD consumer asks a
//! peer's CM which QP and Q_Key serve a service ID, as rdma_cm does for
//! its UDP port space.
//!
//! The requester resends its SIDR_REQ after each response timeout until
//! a SIDR_REP comes or the retries run out (then the request is
//! unreachable). A SIDR_REQ for a service nobody listens on is answered
//! at once with status "unsupported"; one that repeats a request still
//! waiting for its consumer is dropped.

use super::conn::{Conn, Pending, Role, State};
use super::{copy_private, Cm, CmEvent, ConnId, DEFAULT_MAX_RETRIES, DEFAULT_RESPONSE_TIMEOUT};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use urdma_wire::cm::{
    CmMessage, SidrRep, SidrReq, SIDR_REP_PRIVATE_LEN, SIDR_REQ_PRIVATE_LEN, SIDR_STATUS_REJECT,
    SIDR_STATUS_UNSUPPORTED, SIDR_STATUS_VALID,
};

/// What a SIDR_REQ asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResolveParams {
    /// Where the peer's CM is (its address and UDP port).
    pub peer: SocketAddr,
    /// The service to resolve.
    pub service_id: u64,
    /// How long the peer's CM may take to answer (5-bit code).
    pub response_timeout: u8,
    /// How many times the SIDR_REQ is resent.
    pub max_retries: u8,
    /// Private data (at most 216 bytes).
    pub private_data: Vec<u8>,
}

impl ResolveParams {
    /// A resolution of `service_id` at `peer` with Linux's CM response
    /// timeout and retries, no private data.
    pub fn new(peer: SocketAddr, service_id: u64) -> Self {
        ResolveParams {
            peer,
            service_id,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            private_data: Vec::new(),
        }
    }
}

impl Cm {
    /// Send a SIDR_REQ: the request is `SidrReqSent` until the SIDR_REP
    /// ([`CmEvent::ServiceReply`]) or the last retry
    /// ([`CmEvent::Unreachable`]).
    pub fn resolve(&mut self, now: u64, p: &ResolveParams) -> Result<ConnId> {
        let private_data = copy_private::<SIDR_REQ_PRIVATE_LEN>(&p.private_data)?;
        let id = self.new_comm_id();
        let tid = self.new_tid();
        let req = SidrReq {
            request_id: id,
            pkey: urdma_wire::DEFAULT_PKEY,
            service_id: p.service_id,
            private_data,
        };
        let mad = self.send(p.peer, tid, CmMessage::SidrReq(req));
        let code = p.response_timeout.min(31);
        let mut c = Conn::new(Role::Active, p.peer, 0);
        c.state = State::SidrReqSent;
        c.req_tid = tid;
        c.service_id = p.service_id;
        c.response_timeout = code;
        c.max_retries = p.max_retries.min(15);
        c.pending = Some(Pending::new(
            mad,
            now,
            self.response_ns(code),
            c.max_retries,
        ));
        self.conns.insert(id, c);
        Ok(id)
    }

    /// Answer a SIDR_REQ: QP `qpn` with Q_Key `qkey` serves the service.
    pub fn answer_resolve(
        &mut self,
        id: ConnId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<()> {
        self.answer_sidr(id, SIDR_STATUS_VALID, qpn, qkey, private_data)
    }

    /// Send the SIDR_REP of request `id` with `status`; the request is
    /// gone.
    pub(super) fn answer_sidr(
        &mut self,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<()> {
        let private_data = copy_private::<SIDR_REP_PRIVATE_LEN>(private_data)?;
        let c = self.conn_mut(id)?;
        if c.state != State::SidrReqRcvd {
            return Err(c.wrong_state("answer a SIDR_REQ of"));
        }
        let rep = SidrRep {
            request_id: c.remote_comm_id,
            status,
            qpn: qpn & urdma_wire::QPN_MASK,
            service_id: c.service_id,
            qkey,
            private_data,
            ..SidrRep::default()
        };
        let (peer, tid) = (c.peer, c.req_tid);
        self.conns.remove(&id);
        self.send(peer, tid, CmMessage::SidrRep(rep));
        Ok(())
    }

    /// Whether a SIDR_REQ with this request ID waits for its consumer.
    pub(super) fn sidr_duplicate(&self, request_id: u32) -> bool {
        self.find_sidr_request(request_id, None).is_some()
    }

    fn find_sidr_request(&self, request_id: u32, from: Option<SocketAddr>) -> Option<ConnId> {
        self.conns.iter().find_map(|(&id, c)| {
            (c.state == State::SidrReqRcvd
                && c.remote_comm_id == request_id
                && from.is_none_or(|f| f.ip() == c.peer.ip()))
            .then_some(id)
        })
    }

    pub(super) fn on_sidr_req(&mut self, now: u64, from: SocketAddr, tid: u64, req: &SidrReq) {
        if self.find_sidr_request(req.request_id, Some(from)).is_some() {
            return;
        }
        let refusal = if !self.listeners.contains(&req.service_id) {
            Some(SIDR_STATUS_UNSUPPORTED)
        } else if self.half_open() >= super::handle::MAX_HALF_OPEN {
            self.refused += 1;
            Some(SIDR_STATUS_REJECT)
        } else {
            None
        };
        if let Some(status) = refusal {
            let rep = SidrRep {
                request_id: req.request_id,
                status,
                service_id: req.service_id,
                ..SidrRep::default()
            };
            self.send(from, tid, CmMessage::SidrRep(rep));
            return;
        }
        let id = self.new_comm_id();
        let mut c = Conn::new(Role::Passive, from, 0);
        c.state = State::SidrReqRcvd;
        c.remote_comm_id = req.request_id;
        c.req_tid = tid;
        c.service_id = req.service_id;
        // A SIDR_REQ does not say how long its requester waits: Linux's
        // gives up after 16 tries of about 4 s.
        c.answer_by = Some(
            now.saturating_add(self.patience_ns(DEFAULT_RESPONSE_TIMEOUT, DEFAULT_MAX_RETRIES)),
        );
        self.conns.insert(id, c);
        self.tell(CmEvent::ServiceRequest {
            id,
            peer: from,
            req: Box::new(req.clone()),
        });
    }

    pub(super) fn on_sidr_rep(&mut self, from: SocketAddr, rep: &SidrRep) {
        let id = rep.request_id;
        let waiting = self
            .conns
            .get(&id)
            .is_some_and(|c| c.state == State::SidrReqSent && c.peer.ip() == from.ip());
        if !waiting {
            return;
        }
        self.end(
            id,
            CmEvent::ServiceReply {
                id,
                rep: Box::new(rep.clone()),
            },
        );
    }
}

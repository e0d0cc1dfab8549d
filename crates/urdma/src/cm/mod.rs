//! The communication manager of a device (IBTA Vol 1, chapter 12): the
//! state machine that sets RC and UC connections up and tears them down
//! with CM MADs on QP 1, and resolves service IDs for UD consumers.
//!
//! [`Cm`] is deterministic, like the engine: it is fed the consumer's
//! calls ([`Cm::listen`], [`Cm::connect`], [`Cm::accept`], [`Cm::reject`],
//! [`Cm::ready_to_use`], [`Cm::disconnect`]), the MADs that arrive
//! ([`Cm::handle`]) and the time ([`Cm::on_timer`]), and it produces MADs
//! to send ([`Cm::drain_tx`]) and events for the consumer
//! ([`Cm::take_events`]). It never touches a QP: the consumer moves its QP
//! through INIT, RTR and RTS with what the events carry, as rdma_cm does.
//!
//! What it does, as Linux's CM does on the wire:
//! - REQ, REP and DREQ are resent with their transaction ID after the
//!   response timeout (2 × packet lifetime + the peer's CM response time)
//!   up to the advertised retry count; then the connection is reported
//!   unreachable (REQ, REP) or disconnected (DREQ).
//! - An MRA stops the resending and waits for the time it announces.
//! - A duplicate REQ (same remote communication ID and CA GUID) is
//!   answered by an MRA while the consumer decides, by the REP again once
//!   it accepted; a duplicate REP after the RTU is answered by the RTU.
//! - A REQ for a service nobody listens on gets REJ 8 (invalid service
//!   ID); a REQ from a QP whose previous connection is still in TimeWait
//!   gets REJ 10 (stale connection).
//! - A DREQ that names another QP is dropped; a DREQ for a connection
//!   already gone is answered by a DREP.
//! - After a disconnection the connection waits in TimeWait before its
//!   communication ID and the peer's QP are forgotten.
//! - A consumer that goes away ([`Cm::destroy`]) leaves what Linux's CM
//!   leaves: a REJ where a handshake was under way (reason 4, timeout,
//!   from the requester), a DREQ where connected.
//! - Service ID resolution (SIDR) gives UD consumers the QP and Q_Key
//!   that serve a service ([`Cm::resolve`], [`Cm::answer_resolve`]).

mod conn;
mod handle;
mod ops;
mod sidr;

pub use ops::{CmOp, CM_WIRE_MAX};
pub use sidr::ResolveParams;

use crate::error::{Error, Result};
use crate::verbs::Gid;
use conn::{Conn, Pending, Role, State};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use urdma_wire::cm::{
    CmMad, CmMessage, Dreq, PathInfo, Rej, Rtu, DREQ_PRIVATE_LEN, REJ_ARI_LEN, REJ_PRIVATE_LEN,
    RTU_PRIVATE_LEN,
};

pub use urdma_wire::cm::timeout_nanos;
pub use urdma_wire::cm::{
    msg_ref, rej_reason, CmaHeader, Rep, Req, SidrRep, SidrReq, REP_PRIVATE_LEN, REQ_PRIVATE_LEN,
    SIDR_REP_PRIVATE_LEN, SIDR_REQ_PRIVATE_LEN, SIDR_STATUS_REJECT, SIDR_STATUS_UNSUPPORTED,
    SIDR_STATUS_VALID,
};

/// A connection's local communication ID: the consumer's handle for it.
pub type ConnId = u32;

/// Default CM response timeout (5-bit code: 4.096 µs × 2^20 ≈ 4.3 s), as
/// Linux sends.
pub const DEFAULT_RESPONSE_TIMEOUT: u8 = 20;
/// Default number of CM retries, as Linux sends.
pub const DEFAULT_MAX_RETRIES: u8 = 15;
/// Default packet lifetime code on RoCE (4.096 µs × 2^16 ≈ 268 ms).
pub const DEFAULT_PACKET_LIFETIME: u8 = 16;

/// What the active side asks for in its REQ.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectParams {
    /// Where the peer's CM is (its address and UDP port).
    pub peer: SocketAddr,
    /// The service to connect to.
    pub service_id: u64,
    /// The local QP.
    pub qpn: u32,
    /// The first PSN the local QP expects to receive: the peer sends from
    /// it (as Linux's CM uses the field), and the local QP sends from the
    /// REP's.
    pub starting_psn: u32,
    /// 0: RC, 1: UC.
    pub transport: u8,
    /// RDMA READs and atomics the local QP accepts at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the local QP issues at once.
    pub initiator_depth: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// The local QP uses an SRQ.
    pub srq: bool,
    /// Traffic class of the path (the IP TOS byte).
    pub traffic_class: u8,
    /// Hop limit of the path (the IP TTL).
    pub hop_limit: u8,
    /// Local ACK timeout of the QP (5 bits, 4.096 µs × 2^t).
    pub ack_timeout: u8,
    /// How long the peer's CM may take to answer (5-bit code).
    pub response_timeout: u8,
    /// How many times the REQ is resent (4 bits).
    pub max_retries: u8,
    /// Private data (at most 92 bytes).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// An RC connection of QP `qpn` (expecting `starting_psn` first) to
    /// `service_id` at `peer`, with what Linux's rdma_cm asks by default:
    /// one READ or atomic each way, 7 transport and RNR retries, path MTU
    /// 1024, hop limit 64, ACK timeout 14, CM response timeout 20 and 15
    /// CM retries, no private data.
    pub fn rc(peer: SocketAddr, service_id: u64, qpn: u32, starting_psn: u32) -> Self {
        ConnectParams {
            peer,
            service_id,
            qpn,
            starting_psn,
            transport: 0,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            srq: false,
            traffic_class: 0,
            hop_limit: 64,
            ack_timeout: 14,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            private_data: Vec::new(),
        }
    }
}

/// What the passive side answers in its REP.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AcceptParams {
    /// The local QP.
    pub qpn: u32,
    /// The first PSN the local QP expects to receive (the local QP sends
    /// from the REQ's).
    pub starting_psn: u32,
    /// RDMA READs and atomics the local QP accepts at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the local QP issues at once.
    pub initiator_depth: u8,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The local QP uses an SRQ.
    pub srq: bool,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// What the consumer hears.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ops::CmEventRepr", try_from = "ops::CmEventRepr")]
pub enum CmEvent {
    /// A REQ for a service this CM listens on: accept or reject `id`.
    ConnectRequest {
        /// The new connection.
        id: ConnId,
        /// Where the request came from.
        peer: SocketAddr,
        /// The request.
        req: Box<Req>,
    },
    /// The REP for an active connection: move the QP to RTR and RTS,
    /// then call [`Cm::ready_to_use`] (or reject).
    ConnectResponse {
        /// The connection.
        id: ConnId,
        /// The reply.
        rep: Box<Rep>,
    },
    /// The connection is established.
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The peer rejected the connection.
    Rejected {
        /// The connection.
        id: ConnId,
        /// The reject reason ([`rej_reason`]).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The peer did not answer the REQ, the REP or the SIDR_REQ within the
    /// retries, or (passive side) the consumer left a REQ or SIDR_REQ
    /// unanswered past the requester's patience.
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// The connection is disconnected (a DREQ arrived or was answered, or
    /// the peer never answered ours): move the QP to ERR.
    Disconnected {
        /// The connection.
        id: ConnId,
    },
    /// TimeWait ended: the connection is gone.
    TimewaitExit {
        /// The connection.
        id: ConnId,
    },
    /// A SIDR_REQ for a service this CM listens on: answer `id` with
    /// [`Cm::answer_resolve`] or refuse it with [`Cm::reject`].
    ServiceRequest {
        /// The request.
        id: ConnId,
        /// Where it came from.
        peer: SocketAddr,
        /// The SIDR_REQ.
        req: Box<SidrReq>,
    },
    /// The SIDR_REP for a resolution: its status says whether the QP and
    /// Q_Key are valid. The request is gone.
    ServiceReply {
        /// The request.
        id: ConnId,
        /// The SIDR_REP.
        rep: Box<SidrRep>,
    },
}

/// A MAD to send to a peer's QP 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The peer's CM.
    pub to: SocketAddr,
    /// The MAD.
    pub mad: CmMad,
}

/// The CM of one device.
pub struct Cm {
    /// The device's address (its GID).
    local: IpAddr,
    /// The device's CA GUID.
    guid: u64,
    /// Packet lifetime code used in the response timeouts.
    packet_lifetime: u8,
    next_comm_id: u32,
    next_tid: u64,
    listeners: HashSet<u64>,
    /// In ID order, so that timers and searches run in one order: a run
    /// is a function of its inputs.
    conns: BTreeMap<ConnId, Conn>,
    tx: VecDeque<Outgoing>,
    events: VecDeque<CmEvent>,
    /// MADs ignored as another peer's, or REQs refused beyond limits.
    refused: u64,
}

/// A REJ from `local` to `remote` of the message `message_rejected`
/// ([`msg_ref`]) for `reason`, with additional information `ari` (at
/// most 72 bytes) and private data.
fn rej(
    local: ConnId,
    remote: u32,
    message_rejected: u8,
    reason: u16,
    ari: &[u8],
    private_data: [u8; REJ_PRIVATE_LEN],
) -> Rej {
    let mut info = [0u8; REJ_ARI_LEN];
    let n = ari.len().min(REJ_ARI_LEN);
    info[..n].copy_from_slice(&ari[..n]);
    Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected,
        rejected_info_length: n as u8,
        reason,
        ari: info,
        private_data,
    }
}

fn copy_private<const N: usize>(data: &[u8]) -> Result<[u8; N]> {
    let mut out = [0u8; N];
    out.get_mut(..data.len())
        .ok_or_else(|| Error::inval(format!("private data longer than {N} bytes")))?
        .copy_from_slice(data);
    Ok(out)
}

impl Cm {
    /// The CM of a device at `local` with CA GUID `guid`; `seed` spreads
    /// the first communication ID and transaction ID, so that a restarted
    /// CM does not reuse the IDs of its previous life.
    pub fn new(local: IpAddr, guid: u64, seed: u64) -> Self {
        Cm {
            local,
            guid,
            packet_lifetime: DEFAULT_PACKET_LIFETIME,
            next_comm_id: (seed as u32).max(1),
            next_tid: seed.rotate_left(32) | 1,
            listeners: HashSet::new(),
            conns: BTreeMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            refused: 0,
        }
    }

    /// Whether `mad` is for this CM: a REQ for a service it listens on, or
    /// a repeat of a REQ it took, or a message naming one of its
    /// connections (SIDR alike).
    pub fn claims(&self, mad: &CmMad) -> bool {
        let ours = |id: u32| self.conns.contains_key(&id);
        let theirs = |id: u32, guid: Option<u64>| {
            self.conns.values().any(|c| {
                c.role == Role::Passive
                    && c.remote_comm_id == id
                    && guid.is_none_or(|g| g == c.remote_guid)
            })
        };
        match &mad.msg {
            CmMessage::Req(r) => {
                self.listeners.contains(&r.service_id)
                    || theirs(r.local_comm_id, Some(r.local_ca_guid))
            }
            // A withdrawn REQ names only the requester's ID.
            CmMessage::Rej(m) => {
                ours(m.remote_comm_id) || (m.remote_comm_id == 0 && theirs(m.local_comm_id, None))
            }
            CmMessage::Mra(m) => ours(m.remote_comm_id),
            CmMessage::Rep(m) => ours(m.remote_comm_id),
            CmMessage::Rtu(m) => ours(m.remote_comm_id),
            CmMessage::Dreq(m) => ours(m.remote_comm_id),
            CmMessage::Drep(m) => ours(m.remote_comm_id),
            CmMessage::SidrReq(r) => {
                self.listeners.contains(&r.service_id) || self.sidr_duplicate(r.request_id)
            }
            CmMessage::SidrRep(m) => self
                .conns
                .get(&m.request_id)
                .is_some_and(|c| c.state == State::SidrReqSent),
        }
    }

    /// Set the packet lifetime code (5 bits) used in response timeouts.
    pub fn set_packet_lifetime(&mut self, code: u8) {
        self.packet_lifetime = code.min(31);
    }

    /// Take REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<()> {
        if !self.listeners.insert(service_id) {
            return Err(Error::Busy(format!(
                "service {service_id:#x} has a listener"
            )));
        }
        Ok(())
    }

    /// Stop taking REQs for `service_id` (connections already requested
    /// stay).
    pub fn unlisten(&mut self, service_id: u64) -> bool {
        self.listeners.remove(&service_id)
    }

    /// MADs ignored because they named another peer's connection, and
    /// REQs refused beyond [`handle::MAX_HALF_OPEN`].
    pub fn refused(&self) -> u64 {
        self.refused
    }

    fn new_comm_id(&mut self) -> ConnId {
        loop {
            let id = self.next_comm_id;
            self.next_comm_id = self.next_comm_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_tid(&mut self) -> u64 {
        let t = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1);
        t
    }

    /// Time to wait for an answer from a CM that takes up to 2^`code` ×
    /// 4.096 µs.
    fn response_ns(&self, code: u8) -> u64 {
        2 * timeout_nanos(self.packet_lifetime) + timeout_nanos(code)
    }

    /// How long a requester that waits `code` per try, for 1 + `retries`
    /// tries, keeps asking: a request left unanswered longer is gone.
    fn patience_ns(&self, code: u8, retries: u8) -> u64 {
        self.response_ns(code)
            .saturating_mul(u64::from(retries) + 1)
    }

    fn send(&mut self, to: SocketAddr, tid: u64, msg: CmMessage) -> CmMad {
        let mad = CmMad { tid, msg };
        self.tx.push_back(Outgoing {
            to,
            mad: mad.clone(),
        });
        mad
    }

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
            local_gid: Gid::from_ip(self.local).0,
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

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        self.conns
            .get_mut(&id)
            .ok_or_else(|| Error::NotFound(format!("connection {id:#x}")))
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

    /// Queue `ev` for the consumer of its connection, unless the consumer
    /// went away.
    pub(super) fn tell(&mut self, ev: CmEvent) {
        if !self.conns.get(&ev.id()).is_some_and(|c| c.orphaned) {
            self.events.push_back(ev);
        }
    }

    /// Forget connection `id`, telling its consumer `ev` (unless it went
    /// away).
    pub(super) fn end(&mut self, id: ConnId, ev: CmEvent) {
        if let Some(c) = self.conns.remove(&id) {
            if !c.orphaned {
                self.events.push_back(ev);
            }
        }
    }

    /// The MADs to send, oldest first.
    pub fn drain_tx(&mut self) -> impl Iterator<Item = Outgoing> + '_ {
        self.tx.drain(..)
    }

    /// The events for the consumer, oldest first.
    pub fn take_events(&mut self) -> impl Iterator<Item = CmEvent> + '_ {
        self.events.drain(..)
    }

    /// The earliest time (ns) [`Cm::on_timer`] has work.
    pub fn next_deadline(&self) -> Option<u64> {
        self.conns.values().filter_map(Conn::deadline).min()
    }

    /// The connection's state, for tests and statistics.
    pub fn state(&self, id: ConnId) -> Option<&'static str> {
        self.conns.get(&id).map(|c| c.state.name())
    }
}

#[cfg(test)]
mod tests;

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

mod calls;
mod conn;
mod handle;
mod ops;
mod sidr;

pub use ops::{CmOp, CM_WIRE_MAX};
pub use sidr::ResolveParams;

use crate::error::{Error, Result};
use conn::{Conn, Role, State};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use urdma_wire::cm::{CmMad, CmMessage, Rej, REJ_ARI_LEN, REJ_PRIVATE_LEN};

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
    /// Its address of the other family, if it has one (the link-local
    /// IPv6 GID of a device on an IPv4 address).
    other: Option<IpAddr>,
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
            other: None,
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

    /// Give the CM the device's address of the other family (None: it
    /// has none).
    pub fn set_other(&mut self, other: Option<IpAddr>) {
        self.other = other.filter(|o| o.is_ipv4() != self.local.is_ipv4());
    }

    /// The device's address that talks to `peer`: the one of its family.
    fn local_for(&self, peer: IpAddr) -> IpAddr {
        match self.other {
            Some(o) if o.is_ipv4() == peer.is_ipv4() => o,
            _ => self.local,
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
    /// REQs refused beyond `handle::MAX_HALF_OPEN`.
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

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        self.conns
            .get_mut(&id)
            .ok_or_else(|| Error::NotFound(format!("connection {id:#x}")))
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

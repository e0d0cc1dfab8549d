//! The consumer's calls on a CM as one value ([`CmOp`]), which drivers
//! send to the NIC, and the events' form on the way back.

use super::{AcceptParams, Cm, CmEvent, ConnId, ConnectParams, ResolveParams};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use urdma_wire::cm::{CmMad, CmMessage};

/// A call on a device's CM.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CmOp {
    /// Take REQs for a service ([`Cm::listen`]).
    Listen {
        /// The service.
        service_id: u64,
    },
    /// Stop taking them ([`Cm::unlisten`]).
    Unlisten {
        /// The service.
        service_id: u64,
    },
    /// Send a REQ ([`Cm::connect`]); answers the connection's ID.
    Connect(ConnectParams),
    /// Answer a REQ with a REP ([`Cm::accept`]).
    Accept {
        /// The connection.
        id: ConnId,
        /// The REP's values.
        params: AcceptParams,
    },
    /// Reject a REQ or a REP, or refuse a SIDR_REQ ([`Cm::reject`]).
    Reject {
        /// The connection.
        id: ConnId,
        /// Why.
        reason: u16,
        /// Private data.
        private_data: Vec<u8>,
    },
    /// Send the RTU ([`Cm::ready_to_use`]).
    ReadyToUse {
        /// The connection.
        id: ConnId,
        /// Private data.
        private_data: Vec<u8>,
    },
    /// The QP received before the RTU ([`Cm::established`]).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// Send a DREQ ([`Cm::disconnect`]).
    Disconnect {
        /// The connection.
        id: ConnId,
        /// Private data.
        private_data: Vec<u8>,
    },
    /// End what a consumer that went away left ([`Cm::destroy`]).
    Destroy {
        /// The connection.
        id: ConnId,
    },
    /// Send a SIDR_REQ ([`Cm::resolve`]); answers the request's ID.
    Resolve(ResolveParams),
    /// Answer a SIDR_REQ with the serving QP ([`Cm::answer_resolve`]).
    AnswerResolve {
        /// The request.
        id: ConnId,
        /// The serving QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// Private data (at most 136 bytes).
        private_data: Vec<u8>,
    },
}

impl CmOp {
    /// The connection the call is about, if it names one.
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            CmOp::Accept { id, .. }
            | CmOp::Reject { id, .. }
            | CmOp::ReadyToUse { id, .. }
            | CmOp::Established { id }
            | CmOp::Disconnect { id, .. }
            | CmOp::Destroy { id }
            | CmOp::AnswerResolve { id, .. } => Some(*id),
            CmOp::Listen { .. } | CmOp::Unlisten { .. } | CmOp::Connect(_) | CmOp::Resolve(_) => {
                None
            }
        }
    }
}

impl Cm {
    /// Carry out `op` at `now`; a connect or a resolve answers the new
    /// connection's or request's ID.
    pub fn apply(&mut self, now: u64, op: CmOp) -> Result<Option<ConnId>> {
        match op {
            CmOp::Listen { service_id } => self.listen(service_id).map(|()| None),
            CmOp::Unlisten { service_id } => match self.unlisten(service_id) {
                true => Ok(None),
                false => Err(Error::NotFound(format!("listener {service_id:#x}"))),
            },
            CmOp::Connect(p) => self.connect(now, &p).map(Some),
            CmOp::Accept { id, params } => self.accept(now, id, &params).map(|()| None),
            CmOp::Reject {
                id,
                reason,
                private_data,
            } => self.reject(id, reason, &private_data).map(|()| None),
            CmOp::ReadyToUse { id, private_data } => {
                self.ready_to_use(id, &private_data).map(|()| None)
            }
            CmOp::Established { id } => self.established(id).map(|()| None),
            CmOp::Disconnect { id, private_data } => {
                self.disconnect(now, id, &private_data).map(|()| None)
            }
            CmOp::Destroy { id } => match self.destroy(now, id) {
                true => Ok(None),
                false => Err(Error::NotFound(format!("connection {id:#x}"))),
            },
            CmOp::Resolve(p) => self.resolve(now, &p).map(Some),
            CmOp::AnswerResolve {
                id,
                qpn,
                qkey,
                private_data,
            } => self
                .answer_resolve(id, qpn, qkey, &private_data)
                .map(|()| None),
        }
    }
}

impl CmEvent {
    /// The connection the event is about.
    pub fn id(&self) -> ConnId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id }
            | CmEvent::TimewaitExit { id }
            | CmEvent::ServiceRequest { id, .. }
            | CmEvent::ServiceReply { id, .. } => *id,
        }
    }
}

/// A [`CmEvent`] as it travels between processes: REQ and REP as their
/// MADs.
#[derive(Serialize, Deserialize)]
pub(super) struct CmEventRepr {
    kind: u8,
    id: ConnId,
    peer: Option<SocketAddr>,
    reason: u16,
    data: Vec<u8>,
}

impl From<CmEvent> for CmEventRepr {
    fn from(ev: CmEvent) -> Self {
        let mad = |msg| CmMad { tid: 0, msg }.emit().to_vec();
        let plain = |kind, id| CmEventRepr {
            kind,
            id,
            peer: None,
            reason: 0,
            data: Vec::new(),
        };
        match ev {
            CmEvent::ConnectRequest { id, peer, req } => CmEventRepr {
                peer: Some(peer),
                data: mad(CmMessage::Req(*req)),
                ..plain(0, id)
            },
            CmEvent::ConnectResponse { id, rep } => CmEventRepr {
                data: mad(CmMessage::Rep(*rep)),
                ..plain(1, id)
            },
            CmEvent::Established { id } => plain(2, id),
            CmEvent::Rejected {
                id,
                reason,
                private_data,
            } => CmEventRepr {
                reason,
                data: private_data,
                ..plain(3, id)
            },
            CmEvent::Unreachable { id } => plain(4, id),
            CmEvent::Disconnected { id } => plain(5, id),
            CmEvent::TimewaitExit { id } => plain(6, id),
            CmEvent::ServiceRequest { id, peer, req } => CmEventRepr {
                peer: Some(peer),
                data: mad(CmMessage::SidrReq(*req)),
                ..plain(7, id)
            },
            CmEvent::ServiceReply { id, rep } => CmEventRepr {
                data: mad(CmMessage::SidrRep(*rep)),
                ..plain(8, id)
            },
        }
    }
}

impl TryFrom<CmEventRepr> for CmEvent {
    type Error = String;

    fn try_from(r: CmEventRepr) -> std::result::Result<Self, String> {
        let msg = || {
            CmMad::parse(&r.data)
                .map(|m| m.msg)
                .map_err(|e| e.to_string())
        };
        let id = r.id;
        Ok(match r.kind {
            0 => match (msg()?, r.peer) {
                (CmMessage::Req(req), Some(peer)) => CmEvent::ConnectRequest {
                    id,
                    peer,
                    req: Box::new(req),
                },
                _ => return Err("a connect request carries a REQ and a peer".into()),
            },
            1 => match msg()? {
                CmMessage::Rep(rep) => CmEvent::ConnectResponse {
                    id,
                    rep: Box::new(rep),
                },
                _ => return Err("a connect response carries a REP".into()),
            },
            2 => CmEvent::Established { id },
            3 => CmEvent::Rejected {
                id,
                reason: r.reason,
                private_data: r.data,
            },
            4 => CmEvent::Unreachable { id },
            5 => CmEvent::Disconnected { id },
            6 => CmEvent::TimewaitExit { id },
            7 => match (msg()?, r.peer) {
                (CmMessage::SidrReq(req), Some(peer)) => CmEvent::ServiceRequest {
                    id,
                    peer,
                    req: Box::new(req),
                },
                _ => return Err("a service request carries a SIDR_REQ and a peer".into()),
            },
            8 => match msg()? {
                CmMessage::SidrRep(rep) => CmEvent::ServiceReply {
                    id,
                    rep: Box::new(rep),
                },
                _ => return Err("a service reply carries a SIDR_REP".into()),
            },
            k => return Err(format!("unknown CM event kind {k}")),
        })
    }
}

/// The most bytes a [`CmOp`] or [`CmEvent`] takes encoded with
/// the NIC's command encoding, as the drop-in librdmacm hands them to
/// the drop-in libibverbs (which holds the device).
pub const CM_WIRE_MAX: usize = 1024;

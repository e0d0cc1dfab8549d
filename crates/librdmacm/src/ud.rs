//! UD IDs through the NIC's service ID resolution (SIDR), as rdma_cm
//! serves its UDP port space: `rdma_connect` sends a SIDR_REQ with
//! rdma_cm's address header, the listener's consumer hears
//! CONNECT_REQUEST and answers with `rdma_accept` (its QP and the UDP
//! Q_Key) or `rdma_reject`, and the requester hears ESTABLISHED with what
//! it needs to send to that QP: address handle attributes, QP number and
//! Q_Key. A refused request is UNREACHABLE with the SIDR_REP's status; an
//! unanswered one is UNREACHABLE with `-ETIMEDOUT`; an answer with
//! another Q_Key than rdma_cm's is ADDR_ERROR with `-EINVAL`.

use crate::state::{event, set_ud, Locked, Phase};
use crate::sys::*;
use std::net::SocketAddr;
use urdma::cm::{CmOp, ResolveParams, SidrRep, SidrReq, SIDR_REQ_PRIVATE_LEN, SIDR_STATUS_VALID};

/// User private data room after rdma_cm's address header in a SIDR_REQ.
pub const SIDR_USER_LEN: usize = SIDR_REQ_PRIVATE_LEN - crate::conn::CMA_LEN;

/// The hop limit of a resolved route (IPv4's default TTL).
const HOP_LIMIT: u8 = 64;

/// `rdma_connect` of a UD ID: a SIDR_REQ for the peer's service with
/// `private` (address header and user data); the lock is let go before a
/// synchronous ID waits for the answer.
pub fn resolve(
    mut st: Locked,
    id: *mut rdma_cm_id,
    dev: usize,
    dst: SocketAddr,
    private: Vec<u8>,
) -> Result<(), i32> {
    // SAFETY: id is live (looked up by the caller).
    let ps = unsafe { (*id).ps };
    let d = &st.devs[dev];
    let peer = SocketAddr::new(crate::addr::peer_ip(id), d.addr.port());
    let params = ResolveParams {
        private_data: private,
        ..ResolveParams::new(
            peer,
            urdma::cm::CmaHeader::service_id(ps as u16, dst.port()),
        )
    };
    let conn = crate::nic::call(d.ctx, &CmOp::Resolve(params))?.ok_or(libc::EIO)?;
    st.conns.insert((dev, conn), id as usize);
    let s = st.id(id)?;
    s.conn = Some(conn);
    s.phase = Phase::Connecting;
    drop(st);
    crate::id::complete(id)
}

/// `rdma_accept` of a UD ID: the SIDR_REP naming QP `qpn` and the UDP
/// Q_Key (rdma_cm's for IP port spaces), with `private` data.
pub fn accept(st: &mut Locked, id: *mut rdma_cm_id, qpn: u32, private: Vec<u8>) -> Result<(), i32> {
    let s = st.id(id)?;
    let (Some(dev), Some(conn)) = (s.dev, s.conn) else {
        return Err(libc::EINVAL);
    };
    if s.phase != Phase::ReqReceived {
        return Err(libc::EINVAL);
    }
    let op = CmOp::AnswerResolve {
        id: conn,
        qpn,
        qkey: RDMA_UDP_QKEY,
        private_data: private,
    };
    crate::nic::call(st.devs[dev].ctx, &op)?;
    st.conns.remove(&(dev, conn));
    let s = st.id(id)?;
    s.conn = None;
    s.phase = Phase::Resolved;
    Ok(())
}

/// A SIDR_REQ for a listener: a new ID and CONNECT_REQUEST carrying the
/// user's private data.
pub fn on_request(st: &mut Locked, dev: usize, conn: u32, peer: SocketAddr, req: &SidrReq) {
    let Some((child, lp, user)) = crate::conn::request_id(
        st,
        dev,
        conn,
        peer,
        (req.service_id, IBV_QPT_UD),
        &req.private_data,
    ) else {
        return;
    };
    let mut b = event(child as usize, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    b.ev.listen_id = lp;
    set_ud(&mut b, user, |_| {});
    st.push(lp as usize, b);
}

/// The SIDR_REP of ID `id` (whose connection is already forgotten):
/// ESTABLISHED with the serving QP, or UNREACHABLE with the status.
pub fn on_reply(st: &mut Locked, id: usize, rep: &SidrRep) {
    let Some(s) = st.ids.get_mut(&id) else {
        return;
    };
    if rep.status != SIDR_STATUS_VALID {
        let mut b = event(id, RDMA_CM_EVENT_UNREACHABLE, i32::from(rep.status));
        set_ud(&mut b, &rep.private_data, |_| {});
        return st.push(id, b);
    }
    s.phase = Phase::Resolved;
    if rep.qkey != RDMA_UDP_QKEY {
        // rdma_cm's UDP port space has one Q_Key.
        return st.push(id, event(id, RDMA_CM_EVENT_ADDR_ERROR, -libc::EINVAL));
    }
    if s.dst.is_none() {
        return;
    }
    let (tos, sgid_index) = (s.tos, s.sgid_index);
    // The address the SIDR_REQ went to (the device's own for loopback).
    let peer = crate::addr::peer_ip(id as *mut rdma_cm_id);
    let mut b = event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
    set_ud(&mut b, &rep.private_data, |u| {
        u.qp_num = rep.qpn;
        u.qkey = rep.qkey;
        let ah = &mut u.ah_attr;
        ah.is_global = 1;
        ah.port_num = 1;
        ah.grh.dgid = crate::addr::gid_of(peer);
        ah.grh.sgid_index = sgid_index;
        ah.grh.hop_limit = HOP_LIMIT;
        ah.grh.traffic_class = tos;
    });
    st.push(id, b);
}

//! The NIC CM's events turned into rdma_cm events: a request makes a
//! child ID, a reply moves the QP to RTR and RTS, and the rest end or
//! fail a connection (with the QP moved to ERR where librdmacm moves it).

use super::{random_psn, CMA_LEN};
use crate::state::{event, set_conn, Locked, Phase, Remote};
use crate::sys::*;
use std::net::SocketAddr;
use urdma::cm::{rej_reason, CmEvent, CmOp, CmaHeader, Rep, Req};

/// Hand a CM event of device `dev` to its ID.
pub fn on_event(st: &mut Locked, dev: usize, ev: CmEvent) {
    let conn = ev.id();
    match ev {
        CmEvent::ConnectRequest { peer, req, .. } => return on_request(st, dev, conn, peer, &req),
        CmEvent::ServiceRequest { peer, req, .. } => {
            return crate::ud::on_request(st, dev, conn, peer, &req)
        }
        _ => {}
    }
    let Some(&id) = st.conns.get(&(dev, conn)) else {
        tracing::debug!(?ev, "librdmacm: an event for no ID");
        return;
    };
    let idp = id as *mut rdma_cm_id;
    let ended = |st: &mut Locked| {
        st.conns.remove(&(dev, conn));
        if let Some(s) = st.ids.get_mut(&id) {
            s.conn = None;
            s.phase = Phase::Ended;
        }
    };
    match ev {
        CmEvent::ConnectRequest { .. } | CmEvent::ServiceRequest { .. } => {}
        CmEvent::ServiceReply { rep, .. } => {
            ended(st);
            crate::ud::on_reply(st, id, &rep);
        }
        CmEvent::ConnectResponse { rep, .. } => on_reply(st, dev, idp, conn, &rep),
        CmEvent::Established { .. } => {
            // The active side reported it with the REP (or its consumer
            // sent the RTU itself); the passive side hears it here.
            let Some(s) = st.ids.get_mut(&id) else {
                return;
            };
            if matches!(s.phase, Phase::Connected | Phase::RepReceived) {
                return;
            }
            s.phase = Phase::Connected;
            st.push(id, event(id, RDMA_CM_EVENT_ESTABLISHED, 0));
        }
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            crate::qp::to_error(idp);
            ended(st);
            let mut b = event(id, RDMA_CM_EVENT_REJECTED, i32::from(reason));
            set_conn(&mut b, &private_data, |_| {});
            st.push(id, b);
        }
        CmEvent::Unreachable { .. } => {
            // A UD QP is connectionless: it stays usable, as rdma_cm
            // leaves it.
            // SAFETY: id is live (in the table).
            if unsafe { (*idp).qp_type } != IBV_QPT_UD {
                crate::qp::to_error(idp);
            }
            ended(st);
            st.push(id, event(id, RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT));
        }
        CmEvent::Disconnected { .. } => {
            crate::qp::to_error(idp);
            if let Some(s) = st.ids.get_mut(&id) {
                s.phase = Phase::Ended;
            }
            st.push(id, event(id, RDMA_CM_EVENT_DISCONNECTED, 0));
        }
        CmEvent::TimewaitExit { .. } => {
            ended(st);
            st.push(id, event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0));
        }
    }
}

/// A new ID for request `conn` of device `dev` for `service_id` from
/// `peer` for a QP of type `qp_type`, on its listener's channel (its own
/// channel when the listener is synchronous), in phase `ReqReceived`,
/// with the addresses that rdma_cm's header at the start of `private`
/// names. Answers the ID, the listener and the user's part of `private`;
/// refuses the request (a REJ, or a SIDR_REP with status reject) when
/// there is no listener, the listener's IDs are of another QP type, or
/// there is no memory.
pub(crate) fn request_id<'p>(
    st: &mut Locked,
    dev: usize,
    conn: u32,
    peer: SocketAddr,
    (service_id, want): (u64, u32),
    private: &'p [u8],
) -> Option<(*mut rdma_cm_id, *mut rdma_cm_id, &'p [u8])> {
    let ctx = st.devs[dev].ctx;
    let refuse = |why: &str| {
        tracing::debug!(conn, why, "librdmacm: a connection request refused");
        let op = CmOp::Reject {
            id: conn,
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: Vec::new(),
        };
        let _ = crate::nic::call(ctx, &op);
        None
    };
    let Some(&listen) = st.listeners.get(&(dev, service_id)) else {
        return refuse("no listener");
    };
    let lp = listen as *mut rdma_cm_id;
    // SAFETY: listeners in the table are live IDs.
    let (ps, qp_type, context, channel) =
        unsafe { ((*lp).ps, (*lp).qp_type, (*lp).context, (*lp).channel) };
    if qp_type != want {
        return refuse("the listener's IDs are of another QP type");
    }
    let sync = st.ids.get(&listen).is_some_and(|s| s.sync);
    let ch = match sync {
        true => std::ptr::null_mut(),
        false => channel,
    };
    let Ok(child) = crate::id::create_id_in(st, ch, context, ps, qp_type) else {
        return refuse("no memory");
    };
    let hdr = CmaHeader::parse(private).ok();
    let local_ip = st.devs[dev].addr_for(peer.ip());
    let port = (service_id & 0xffff) as u16;
    let src = SocketAddr::new(hdr.map(|h| h.dst).unwrap_or(local_ip), port);
    let dst = match hdr {
        Some(h) => SocketAddr::new(h.src, h.src_port),
        None => SocketAddr::new(peer.ip(), 0),
    };
    let addressed = crate::addr::set_src(st, child, src, Some(dev))
        .and_then(|()| crate::addr::set_dst(st, child, dst, peer.ip()));
    if addressed.is_err() {
        crate::id::forget(st, child as usize);
        return refuse("no address");
    }
    if let Some(s) = st.ids.get_mut(&(child as usize)) {
        s.conn = Some(conn);
        s.phase = Phase::ReqReceived;
    }
    st.conns.insert((dev, conn), child as usize);
    let user = match hdr {
        Some(_) => &private[CMA_LEN..],
        None => private,
    };
    Some((child, lp, user))
}

/// A REQ for a listener: a new ID and CONNECT_REQUEST.
fn on_request(st: &mut Locked, dev: usize, conn: u32, peer: SocketAddr, req: &Req) {
    let qp_type = match req.transport {
        1 => IBV_QPT_UC,
        _ => IBV_QPT_RC,
    };
    let Some((child, lp, user)) = request_id(
        st,
        dev,
        conn,
        peer,
        (req.service_id, qp_type),
        &req.private_data,
    ) else {
        return;
    };
    let d = &st.devs[dev];
    let mtu = u32::from(req.path_mtu).clamp(1, d.mtu.max(1));
    // What the requester issues and accepts, within this device's limits.
    let (responder, initiator) = (
        req.initiator_depth.min(d.max_responder),
        req.responder_resources.min(d.max_initiator),
    );
    if let Some(s) = st.ids.get_mut(&(child as usize)) {
        // Chosen now: a consumer that moves its own QP asks for its RTR
        // attributes (rdma_init_qp_attr) before it accepts.
        s.psn = random_psn();
        s.remote = Some(Remote {
            qpn: req.local_qpn,
            send_psn: req.starting_psn,
            mtu,
            responder,
            initiator,
            retry: req.retry_count,
            rnr_retry: req.rnr_retry_count,
        });
    }
    let mut b = event(child as usize, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    b.ev.listen_id = lp;
    set_conn(&mut b, user, |c| {
        c.responder_resources = req.initiator_depth;
        c.initiator_depth = req.responder_resources;
        c.flow_control = u8::from(req.flow_control);
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.srq = u8::from(req.srq);
        c.qp_num = req.local_qpn;
    });
    st.push(lp as usize, b);
}

/// The REP of an active connection: with a QP, RTR, RTS and the RTU, then
/// ESTABLISHED (as librdmacm does); without, CONNECT_RESPONSE.
fn on_reply(st: &mut Locked, dev: usize, id: *mut rdma_cm_id, conn: u32, rep: &Rep) {
    let idu = id as usize;
    let Some(s) = st.ids.get_mut(&idu) else {
        return;
    };
    if let Some(r) = s.remote.as_mut() {
        r.qpn = rep.local_qpn;
        r.send_psn = rep.starting_psn;
        // Issue at most what the peer accepts; accept what was offered.
        r.initiator = r.initiator.min(rep.responder_resources);
        r.rnr_retry = rep.rnr_retry_count;
    }
    let fill = |c: &mut rdma_conn_param| {
        c.responder_resources = rep.initiator_depth;
        c.initiator_depth = rep.responder_resources;
        c.flow_control = u8::from(rep.flow_control);
        c.rnr_retry_count = rep.rnr_retry_count;
        c.srq = u8::from(rep.srq);
        c.qp_num = rep.local_qpn;
    };
    // SAFETY: id is live (in the table).
    if unsafe { (*id).qp.is_null() } {
        s.phase = Phase::RepReceived;
        let mut b = event(idu, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        set_conn(&mut b, &rep.private_data, fill);
        return st.push(idu, b);
    }
    let ctx = st.devs[dev].ctx;
    let moved = crate::qp::modify(st, id, IBV_QPS_RTR)
        .and_then(|()| crate::qp::modify(st, id, IBV_QPS_RTS));
    let result = moved.and_then(|()| {
        let op = CmOp::ReadyToUse {
            id: conn,
            private_data: Vec::new(),
        };
        crate::nic::call(ctx, &op).map(|_| ())
    });
    match result {
        Ok(()) => {
            if let Some(s) = st.ids.get_mut(&idu) {
                s.phase = Phase::Connected;
            }
            let mut b = event(idu, RDMA_CM_EVENT_ESTABLISHED, 0);
            set_conn(&mut b, &rep.private_data, fill);
            st.push(idu, b);
        }
        Err(e) => {
            crate::qp::to_error(id);
            let op = CmOp::Reject {
                id: conn,
                reason: rej_reason::CONSUMER_DEFINED,
                private_data: Vec::new(),
            };
            let _ = crate::nic::call(ctx, &op);
            st.conns.remove(&(dev, conn));
            if let Some(s) = st.ids.get_mut(&idu) {
                s.conn = None;
                s.phase = Phase::Ended;
            }
            st.push(idu, event(idu, RDMA_CM_EVENT_CONNECT_ERROR, -e));
        }
    }
}

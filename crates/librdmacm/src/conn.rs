//! Connections: listen, connect, accept, reject, disconnect through the
//! NIC's CM, and the CM's events turned into rdma_cm events (with the QP
//! moved to RTR and RTS, or to ERR, where librdmacm moves it).

use crate::state::{event, lock, set_conn, Locked, Phase, Remote};
use crate::sys::*;
use std::net::{Ipv4Addr, SocketAddr};
use urdma::cm::{
    rej_reason, AcceptParams, CmEvent, CmOp, CmaHeader, ConnectParams, Rep, Req, REP_PRIVATE_LEN,
};

/// rdma_cm's address header at the start of a REQ's private data.
pub(crate) const CMA_LEN: usize = 36;
/// User private data room after the address header in a REQ.
const REQ_USER_LEN: usize = urdma::cm::REQ_PRIVATE_LEN - CMA_LEN;
/// REJ private data room.
const REJ_PRIVATE_LEN: usize = 148;

/// A random 24-bit PSN.
fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom fills the 4 bytes of b.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b) & 0xff_ffff
}

/// The private data of `param` (at most `max` bytes, else `EINVAL`).
fn private_data(param: *const rdma_conn_param, max: usize) -> Result<Vec<u8>, i32> {
    if param.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: a non-null param is readable (the caller's contract), and
    // its private data is private_data_len readable bytes.
    unsafe {
        let p = &*param;
        let len = usize::from(p.private_data_len);
        if len > max {
            return Err(libc::EINVAL);
        }
        if len == 0 || p.private_data.is_null() {
            return Ok(Vec::new());
        }
        Ok(std::slice::from_raw_parts(p.private_data.cast::<u8>(), len).to_vec())
    }
}

/// The QP number and SRQ use of `id`: its QP's, else the parameters'.
fn qp_of(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(u32, bool), i32> {
    // SAFETY: id is live; param is null or readable.
    unsafe {
        let qp = (*id).qp;
        if !qp.is_null() {
            return Ok(((*qp).qp_num, !(*qp).srq.is_null()));
        }
        if param.is_null() {
            return Err(libc::EINVAL);
        }
        Ok(((*param).qp_num & 0xff_ffff, (*param).srq != 0))
    }
}

/// `rdma_listen`: take REQs for the ID's port on its device, or on every
/// device when it is bound to the wildcard.
pub fn listen(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut st = lock();
    crate::nic::open_devices(&mut st);
    let s = st.id(id)?;
    if !s.listens.is_empty() {
        return Ok(());
    }
    if s.conn.is_some() {
        return Err(libc::EINVAL);
    }
    if s.src.is_none() {
        // Not bound: the wildcard address and a free port, as the
        // kernel's rdma_cm binds it.
        crate::addr::bind(
            &mut st,
            id,
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        )?;
    }
    let src = st.id(id)?.src.ok_or(libc::EINVAL)?;
    let s = st.id(id)?;
    let devs: Vec<usize> = match s.dev {
        Some(d) => vec![d],
        None => (0..st.devs.len()).collect(),
    };
    if devs.is_empty() {
        return Err(libc::ENODEV);
    }
    // SAFETY: id is live.
    let ps = unsafe { (*id).ps };
    let service_id = CmaHeader::service_id(ps as u16, src.port());
    let mut done: Vec<(usize, u64)> = Vec::new();
    for d in devs {
        let ctx = st.devs[d].ctx;
        if let Err(e) = crate::nic::call(ctx, &CmOp::Listen { service_id }) {
            for (d, _) in done {
                let ctx = st.devs[d].ctx;
                let _ = crate::nic::call(ctx, &CmOp::Unlisten { service_id });
                st.listeners.remove(&(d, service_id));
            }
            return Err(if e == libc::EBUSY {
                libc::EADDRINUSE
            } else {
                e
            });
        }
        st.listeners.insert((d, service_id), id as usize);
        done.push((d, service_id));
    }
    st.id(id)?.listens = done;
    Ok(())
}

/// rdma_cm's address header for an ID bound to `src` and resolved to
/// `dst`, followed by `user` private data.
pub(crate) fn cma_private(src: SocketAddr, dst: SocketAddr, user: &[u8]) -> Result<Vec<u8>, i32> {
    let mut data = vec![0u8; CMA_LEN];
    CmaHeader {
        src_port: src.port(),
        src: src.ip(),
        dst: dst.ip(),
    }
    .emit(&mut data)
    .map_err(|_| libc::EINVAL)?;
    data.extend_from_slice(user);
    Ok(data)
}

/// `rdma_connect`: a REQ carrying rdma_cm's address header for the
/// resolved peer (a SIDR_REQ for a UD ID).
pub fn connect(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(), i32> {
    {
        let mut st = lock();
        crate::id::release_held(&mut st, id);
        let s = st.id(id)?;
        let (Some(dev), Some(src), Some(dst)) = (s.dev, s.src, s.dst) else {
            return Err(libc::EINVAL);
        };
        if s.conn.is_some() {
            return Err(libc::EISCONN);
        }
        if s.phase != Phase::Idle {
            return Err(libc::EINVAL);
        }
        let (tos, ack_timeout) = (s.tos, s.ack_timeout);
        // SAFETY: id is live.
        let (ps, qp_type) = unsafe { ((*id).ps, (*id).qp_type) };
        let transport = match qp_type {
            IBV_QPT_RC => 0,
            IBV_QPT_UC => 1,
            IBV_QPT_UD => {
                let user = private_data(param, crate::ud::SIDR_USER_LEN)?;
                let data = cma_private(src, dst, &user)?;
                return crate::ud::resolve(st, id, dev, dst, data);
            }
            _ => return Err(libc::EINVAL),
        };
        let (qpn, srq) = qp_of(id, param)?;
        let user = private_data(param, REQ_USER_LEN)?;
        let d = &st.devs[dev];
        let (responder, initiator, retry, rnr) = match param.is_null() {
            true => (d.max_responder, d.max_initiator, 7, 7),
            // SAFETY: a non-null param is readable.
            false => unsafe {
                let p = &*param;
                (
                    p.responder_resources.min(d.max_responder),
                    p.initiator_depth.min(d.max_initiator),
                    p.retry_count.min(7),
                    p.rnr_retry_count.min(7),
                )
            },
        };
        let data = cma_private(src, dst, &user)?;
        let psn = random_psn();
        let mtu = d.mtu;
        let peer = SocketAddr::new(dst.ip(), d.addr.port());
        let ctx = d.ctx;
        let params = ConnectParams {
            transport,
            responder_resources: responder,
            initiator_depth: initiator,
            retry_count: retry,
            rnr_retry_count: rnr,
            path_mtu: mtu as u8,
            srq,
            traffic_class: tos,
            ack_timeout: ack_timeout.unwrap_or(14),
            private_data: data,
            ..ConnectParams::rc(peer, CmaHeader::service_id(ps as u16, dst.port()), qpn, psn)
        };
        let conn = crate::nic::call(ctx, &CmOp::Connect(params))?.ok_or(libc::EIO)?;
        st.conns.insert((dev, conn), id as usize);
        let s = st.id(id)?;
        s.conn = Some(conn);
        s.phase = Phase::Connecting;
        s.psn = psn;
        s.remote = Some(Remote {
            qpn: 0,
            send_psn: 0,
            mtu,
            responder,
            initiator,
            retry,
            rnr_retry: rnr,
        });
    }
    crate::id::complete(id)
}

/// `rdma_accept`: move the QP to RTR and RTS towards the requester, then
/// the REP; established when the RTU comes. A UD ID answers its SIDR_REQ.
pub fn accept(id: *mut rdma_cm_id, param: *const rdma_conn_param) -> Result<(), i32> {
    {
        let mut st = lock();
        crate::id::release_held(&mut st, id);
        // SAFETY: id is live once looked up.
        if st.id(id).is_ok() && unsafe { (*id).qp_type } == IBV_QPT_UD {
            let (qpn, _) = qp_of(id, param)?;
            let data = private_data(param, urdma::cm::SIDR_REP_PRIVATE_LEN)?;
            return crate::ud::accept(&mut st, id, qpn, data);
        }
        let s = st.id(id)?;
        let (Some(dev), Some(conn), Some(mut r)) = (s.dev, s.conn, s.remote) else {
            return Err(libc::EINVAL);
        };
        if s.phase != Phase::ReqReceived {
            return Err(libc::EINVAL);
        }
        let (qpn, srq) = qp_of(id, param)?;
        let data = private_data(param, REP_PRIVATE_LEN)?;
        let d = &st.devs[dev];
        // r.responder and r.initiator hold what the REQ asked: this side
        // accepts at most the requester's depth, and issues at most what
        // the requester accepts.
        let rnr = match param.is_null() {
            true => {
                r.responder = r.responder.min(d.max_responder);
                r.initiator = r.initiator.min(d.max_initiator);
                7
            }
            // SAFETY: a non-null param is readable.
            false => unsafe {
                let p = &*param;
                r.responder = p.responder_resources.min(d.max_responder);
                r.initiator = p.initiator_depth.min(d.max_initiator).min(r.initiator);
                p.rnr_retry_count.min(7)
            },
        };
        let ctx = d.ctx;
        let s = st.id(id)?;
        let psn = s.psn;
        s.remote = Some(r);
        crate::qp::modify(&mut st, id, IBV_QPS_RTR)?;
        crate::qp::modify(&mut st, id, IBV_QPS_RTS)?;
        let params = AcceptParams {
            qpn,
            starting_psn: psn,
            responder_resources: r.responder,
            initiator_depth: r.initiator,
            rnr_retry_count: rnr,
            srq,
            private_data: data,
        };
        if let Err(e) = crate::nic::call(ctx, &CmOp::Accept { id: conn, params }) {
            crate::qp::to_error(id);
            return Err(e);
        }
        st.id(id)?.phase = Phase::Accepting;
    }
    crate::id::complete(id)
}

/// `rdma_reject`: a REJ (consumer reason 28) with the private data.
pub fn reject(id: *mut rdma_cm_id, data: *const u8, len: u8) -> Result<(), i32> {
    let mut st = lock();
    crate::id::release_held(&mut st, id);
    let s = st.id(id)?;
    let (Some(dev), Some(conn)) = (s.dev, s.conn) else {
        return Err(libc::EINVAL);
    };
    if !matches!(s.phase, Phase::ReqReceived | Phase::RepReceived) {
        return Err(libc::EINVAL);
    }
    let len = usize::from(len);
    if len > REJ_PRIVATE_LEN || (len > 0 && data.is_null()) {
        return Err(libc::EINVAL);
    }
    let private_data = match len {
        0 => Vec::new(),
        // SAFETY: data is len readable bytes (the caller's contract).
        _ => unsafe { std::slice::from_raw_parts(data, len) }.to_vec(),
    };
    let ctx = st.devs[dev].ctx;
    let op = CmOp::Reject {
        id: conn,
        reason: rej_reason::CONSUMER_DEFINED,
        private_data,
    };
    crate::nic::call(ctx, &op)?;
    st.conns.remove(&(dev, conn));
    let s = st.id(id)?;
    s.conn = None;
    s.phase = Phase::Ended;
    Ok(())
}

/// `rdma_establish`: after a CONNECT_RESPONSE on an ID without a QP (the
/// consumer moved its own), send the RTU.
pub fn establish(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut st = lock();
    // SAFETY: id is live once looked up below.
    let s = st.id(id)?;
    if s.phase != Phase::RepReceived || unsafe { !(*id).qp.is_null() } {
        return Err(libc::EINVAL);
    }
    let (Some(dev), Some(conn)) = (s.dev, s.conn) else {
        return Err(libc::EINVAL);
    };
    let ctx = st.devs[dev].ctx;
    let op = CmOp::ReadyToUse {
        id: conn,
        private_data: Vec::new(),
    };
    crate::nic::call(ctx, &op)?;
    st.id(id)?.phase = Phase::Connected;
    Ok(())
}

/// `rdma_notify`: the QP received before the RTU (communication
/// established).
pub fn notify(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut st = lock();
    let s = st.id(id)?;
    let (Some(dev), Some(conn)) = (s.dev, s.conn) else {
        return Err(libc::EINVAL);
    };
    if s.phase != Phase::Accepting {
        return Ok(());
    }
    let ctx = st.devs[dev].ctx;
    crate::nic::call(ctx, &CmOp::Established { id: conn })?;
    Ok(())
}

/// `rdma_disconnect`: the QP to ERR, then a DREQ; DISCONNECTED comes
/// with the DREP (or at once if the peer disconnected first).
pub fn disconnect(id: *mut rdma_cm_id) -> Result<(), i32> {
    let wait = {
        let mut st = lock();
        crate::id::release_held(&mut st, id);
        let s = st.id(id)?;
        let (phase, sync) = (s.phase, s.sync);
        let (Some(dev), Some(conn)) = (s.dev, s.conn) else {
            // Ended (rejected, unreachable, or gone through TimeWait) or
            // a UD ID: nothing to send, as librdmacm answers then.
            if !matches!(phase, Phase::Ended | Phase::Resolved) {
                return Err(libc::EINVAL);
            }
            crate::qp::to_error(id);
            let chan = s.chan;
            return match sync && st.chans.get(&chan).is_some_and(|c| !c.queue.is_empty()) {
                true => {
                    drop(st);
                    crate::id::complete(id)
                }
                false => Ok(()),
            };
        };
        crate::qp::to_error(id);
        match phase {
            Phase::Connected | Phase::Accepting => {
                let ctx = st.devs[dev].ctx;
                let op = CmOp::Disconnect {
                    id: conn,
                    private_data: Vec::new(),
                };
                // Refused when the peer's DREQ crossed ours (its event is
                // on its way) or before the RTU: nothing to wait for.
                crate::nic::call(ctx, &op).is_ok() && sync
            }
            Phase::Ended => {
                // Already disconnected: a synchronous ID reads the event
                // if it has not.
                let chan = st.id(id)?.chan;
                sync && st.chans.get(&chan).is_some_and(|c| !c.queue.is_empty())
            }
            _ => return Err(libc::EINVAL),
        }
    };
    match wait {
        true => crate::id::complete(id),
        false => Ok(()),
    }
}

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
    let local_ip = st.devs[dev].addr.ip();
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

//! Connections: listen, connect, accept, reject, disconnect through the
//! NIC's CM; the CM's events turned into rdma_cm events are in `events`.

use crate::state::{lock, Phase, Remote};
use crate::sys::*;
use std::net::{Ipv4Addr, SocketAddr};
use urdma::cm::{rej_reason, AcceptParams, CmOp, CmaHeader, ConnectParams, REP_PRIVATE_LEN};

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
        let peer = SocketAddr::new(crate::addr::peer_ip(id), d.addr.port());
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

mod events;

pub use events::on_event;
pub(crate) use events::request_id;

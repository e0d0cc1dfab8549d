//! The endpoint calls (`rdma_create_ep`, `rdma_get_request`,
//! `rdma_destroy_ep`): synchronous IDs made and connected in one call, as
//! rdma-core's `rdma_server`/`rdma_client` use them.

use crate::state::lock;
use crate::sys::*;
use std::ffi::c_void;

/// `rdma_create_ep`: a synchronous ID from `res`; passive: bound (its
/// requests get a QP from `attr`); active: address and route resolved,
/// and a QP made from `attr`.
pub fn create_ep(
    res: *const rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<*mut rdma_cm_id, i32> {
    if res.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: res is a readable rdma_addrinfo (the caller's contract).
    let r = unsafe { &*res };
    let id = crate::id::create_id(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        r.ai_port_space as u32,
        r.ai_qp_type as u32,
    )?;
    let made = setup(id, r, pd, attr);
    if let Err(e) = made {
        let _ = destroy_ep(id);
        return Err(e);
    }
    Ok(id)
}

fn setup(
    id: *mut rdma_cm_id,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), i32> {
    if r.ai_flags as u32 & RAI_PASSIVE != 0 {
        let src = crate::addr::from_c(r.ai_src_addr as *const c_void).ok_or(libc::EINVAL)?;
        let mut st = lock();
        crate::addr::bind(&mut st, id, src)?;
        if !attr.is_null() {
            // SAFETY: attr is readable (the caller's contract).
            let mut a = unsafe { *attr };
            // The endpoint's QP is of the endpoint's type.
            a.qp_type = r.ai_qp_type as u32;
            st.id(id)?.ep_qp = Some(crate::state::EpQp {
                pd: pd as usize,
                attr: a,
            });
        }
        if !pd.is_null() {
            // SAFETY: id is live.
            unsafe { (*id).pd = pd };
        }
        return Ok(());
    }
    crate::addr::resolve_addr(
        id,
        r.ai_src_addr as *const c_void,
        r.ai_dst_addr as *const c_void,
    )?;
    crate::id::complete(id)?;
    crate::addr::resolve_route(id)?;
    crate::id::complete(id)?;
    if !attr.is_null() {
        // SAFETY: attr is writable (the caller's contract); the
        // endpoint's QP is of the endpoint's type.
        unsafe { (*attr).qp_type = r.ai_qp_type as u32 };
        let mut st = lock();
        crate::qp::create(&mut st, id, pd, attr)?;
    }
    Ok(())
}

/// `rdma_destroy_ep`: the QP, the SRQ made by `rdma_create_srq`, the ID.
pub fn destroy_ep(id: *mut rdma_cm_id) -> Result<(), i32> {
    let (taken, srq) = {
        let mut st = lock();
        let own_srq = std::mem::take(&mut st.id(id)?.own_srq);
        let taken = crate::qp::take(&mut st, id);
        // SAFETY: id is live (in the table).
        let srq = match own_srq {
            true => unsafe { std::mem::replace(&mut (*id).srq, std::ptr::null_mut()) },
            false => std::ptr::null_mut(),
        };
        (taken, srq)
    };
    // The QP first: an SRQ in use is not destroyed.
    taken.destroy();
    if !srq.is_null() {
        // SAFETY: the SRQ rdma_create_srq made, taken off the ID.
        unsafe { ibv_destroy_srq(srq) };
    }
    crate::id::destroy_id(id)
}

/// `rdma_get_request`: the next connection request of a synchronous
/// listener, as a new ID with a QP made from the listener's endpoint
/// attributes; the request event stays with the new ID until its next
/// call.
pub fn get_request(listen: *mut rdma_cm_id) -> Result<*mut rdma_cm_id, i32> {
    let ch = {
        let mut st = lock();
        let s = st.id(listen)?;
        if !s.sync || s.listens.is_empty() {
            return Err(libc::EINVAL);
        }
        // SAFETY: listen is live.
        unsafe { (*listen).channel }
    };
    loop {
        let ev = crate::id::get_event(ch)?;
        // SAFETY: ev is a live event just taken.
        let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        if status != 0 || kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            let _ = crate::id::ack_event(ev);
            if status != 0 {
                return Err(status.abs());
            }
            continue;
        }
        let mut st = lock();
        let tmpl = st.id(listen)?.ep_qp;
        if let Some(crate::state::EpQp { pd, attr: mut a }) = tmpl {
            let pd = match pd {
                0 => unsafe { (*listen).pd },
                p => p as *mut ibv_pd,
            };
            if let Err(e) = crate::qp::create(&mut st, child, pd, &mut a) {
                drop(st);
                let _ = crate::conn::reject(child, std::ptr::null(), 0);
                let _ = crate::id::ack_event(ev);
                let _ = crate::id::destroy_id(child);
                return Err(e);
            }
        }
        // SAFETY: child is the live ID of the request.
        unsafe { (*child).event = ev };
        return Ok(child);
    }
}

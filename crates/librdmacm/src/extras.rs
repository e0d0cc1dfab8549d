//! C entry points beyond connection setup: address info, endpoints
//! (`rdma_create_ep`, `rdma_get_request`), SRQs on an ID, the device
//! list and ECE.

use crate::sys::*;
use crate::{addrinfo, ep, guard, nic, qp, ret, state};
use std::ffi::c_char;
use std::os::raw::c_int;

// A `.symver` must sit in the object that defines its symbol.
versions! {
    "RDMACM_1.0": rdma_getaddrinfo, rdma_freeaddrinfo, rdma_create_ep, rdma_destroy_ep,
        rdma_get_request, rdma_create_srq, rdma_create_srq_ex, rdma_destroy_srq,
        rdma_get_devices, rdma_free_devices;
    "RDMACM_1.3": rdma_get_remote_ece, rdma_set_local_ece;
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard(-1, || {
        if res.is_null() {
            return ret(Err(libc::EINVAL));
        }
        match addrinfo::getaddrinfo(node, service, hints) {
            Ok(r) => {
                // SAFETY: res is writable (checked non-null).
                unsafe { *res = r };
                0
            }
            Err(addrinfo::Failure::Errno(e)) => ret(Err(e)),
            // The C library's own code, as rdma-core returns it.
            Err(addrinfo::Failure::Gai(code)) => code,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || addrinfo::freeaddrinfo(res))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        if out.is_null() {
            return ret(Err(libc::EINVAL));
        }
        ret(ep::create_ep(res, pd, attr).map(|p| {
            // SAFETY: out is writable (checked non-null).
            unsafe { *out = p }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        let _ = ep::destroy_ep(id);
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    guard(-1, || {
        if out.is_null() {
            return ret(Err(libc::EINVAL));
        }
        ret(ep::get_request(listen).map(|p| {
            // SAFETY: out is writable (checked non-null).
            unsafe { *out = p }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard(-1, || ret(qp::create_srq(&mut state::lock(), id, pd, attr)))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard(-1, || {
        if attr.is_null() {
            return ret(Err(libc::EINVAL));
        }
        // SAFETY: attr is readable (the caller's contract).
        let a = unsafe { &mut *attr };
        // Only the basic SRQ: XRC and tag matching SRQs are not offered.
        if a.comp_mask & !IBV_SRQ_INIT_ATTR_PD != 0 || a.srq_type != IBV_SRQT_BASIC {
            return ret(Err(libc::EOPNOTSUPP));
        }
        let mut plain = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        let pd = match a.comp_mask & IBV_SRQ_INIT_ATTR_PD {
            0 => std::ptr::null_mut(),
            _ => a.pd,
        };
        let r = qp::create_srq(&mut state::lock(), id, pd, &mut plain);
        a.attr = plain.attr;
        ret(r)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    guard((), || {
        let mut st = state::lock();
        if st.id(id).is_ok() {
            qp::destroy_srq(&mut st, id);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        let mut st = state::lock();
        nic::open_devices(&mut st);
        let mut list: Vec<*mut ibv_context> =
            st.devs.iter().map(|d| d.ctx as *mut ibv_context).collect();
        if !num.is_null() {
            // SAFETY: num is writable (checked non-null).
            unsafe { *num = list.len() as c_int };
        }
        list.push(std::ptr::null_mut());
        let p = Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_context;
        let len = st.devs.len() + 1;
        st.device_lists.insert(p as usize, len);
        p
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    guard((), || {
        let mut st = state::lock();
        if let Some(len) = st.device_lists.remove(&(list as usize)) {
            // SAFETY: list is the boxed slice of len pointers made above.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, len)) });
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard(-1, || {
        if ece.is_null() {
            return ret(Err(libc::EINVAL));
        }
        let mut st = state::lock();
        // No enhanced connection establishment options are exchanged.
        ret(st.id(id).map(|_| {
            // SAFETY: ece is writable (checked non-null).
            unsafe { std::ptr::write_bytes(ece, 0, 1) }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard(-1, || {
        if ece.is_null() {
            return ret(Err(libc::EINVAL));
        }
        let mut st = state::lock();
        ret(st.id(id).map(|_| ()).and(Err(libc::EOPNOTSUPP)))
    })
}

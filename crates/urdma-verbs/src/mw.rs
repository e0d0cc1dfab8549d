//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw`
//! (type 1), reached through `ibv_context::ops`; the binds of type 2
//! windows are work requests (`IBV_WR_BIND_MW`, `ibv_wr_bind_mw`), built
//! by [`bind_request`].

use crate::device::DevShared;
use crate::handles::{self, Kind};
use crate::pd::{Mr, Pd};
use crate::qp::Qp;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_ptr, VResult};
use std::os::raw::c_int;
use std::sync::Arc;
use urdma::engine::command::{AllocMw, DeallocMw};
use urdma::engine::mw::{BindMw, MwType};
use urdma::engine::{SendData, SendOp, SendRequest};
use urdma::QpType;

/// A memory window.
#[repr(C)]
pub struct Mw {
    /// The C view; must stay the first field.
    pub ibv: ibv_mw,
    /// The device.
    pub dev: Arc<DevShared>,
}

impl Mw {
    /// Look up a live window.
    pub fn from_ptr<'a>(p: *const ibv_mw) -> VResult<&'a Mw> {
        if !handles::is_live(p, Kind::Mw) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered windows are live boxed Mws; ibv is the first
        // field.
        Ok(unsafe { &*(p as *const Mw) })
    }
}

/// The next R_Key of a window: the same upper 24 bits, the low 8 bits
/// one more (libibverbs' `ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// Access bits a bind may carry: remote rights (and local write, which a
/// window cannot grant and is ignored).
const BIND_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

fn alloc(pd: *mut ibv_pd, kind: ibv_mw_type) -> VResult<*mut ibv_mw> {
    let p = Pd::from_ptr(pd)?;
    let kind = match kind {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return Err(libc::EINVAL),
    };
    let rkey = p
        .dev
        .device
        .call(AllocMw { pd: p.pdn, kind })
        .map_err(|e| e.errno())?;
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_mw = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.pd = pd;
    ibv.rkey = rkey;
    ibv.handle = rkey >> 8;
    ibv.type_ = match kind {
        MwType::Type1 => IBV_MW_TYPE_1,
        MwType::Type2 => IBV_MW_TYPE_2,
    };
    let m = Box::into_raw(Box::new(Mw {
        ibv,
        dev: p.dev.clone(),
    })) as *mut ibv_mw;
    handles::register(m, Kind::Mw);
    crate::pd::hold(pd);
    Ok(m)
}

/// `ibv_context_ops::alloc_mw`: EINVAL for a kind other than 1 and 2.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, kind: ibv_mw_type) -> *mut ibv_mw {
    guard(std::ptr::null_mut(), || ret_ptr(alloc(pd, kind)))
}

/// `ibv_context_ops::dealloc_mw`: a bound window is taken back at once.
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let m = Mw::from_ptr(mw)?;
            let rkey = m.ibv.rkey;
            m.dev
                .device
                .call(DeallocMw { rkey })
                .map_err(|e| e.errno())?;
            crate::pd::release(m.ibv.pd);
            handles::unregister(mw, Kind::Mw);
            // SAFETY: mw was a registered boxed Mw, now unregistered.
            drop(unsafe { Box::from_raw(mw as *mut Mw) });
            Ok(())
        })())
    })
}

/// The bind of window `mw` to what `info` names, giving it `new_rkey`,
/// for QP `q`: EINVAL for a UD QP, a window or region that is not live,
/// a region of another PD than the window's, or rights a window cannot
/// carry.
pub fn bind_request(
    q: &Qp,
    mw: *mut ibv_mw,
    new_rkey: u32,
    info: &ibv_mw_bind_info,
) -> VResult<BindMw> {
    ensure(q.qp_type != QpType::Ud, libc::EINVAL)?;
    let m = Mw::from_ptr(mw)?;
    ensure(info.mw_access_flags & !BIND_ACCESS == 0, libc::EINVAL)?;
    let lkey = match info.mr.is_null() {
        // An unbind names no region.
        true => {
            ensure(info.length == 0, libc::EINVAL)?;
            0
        }
        false => {
            let mr = Mr::from_ptr(info.mr)?;
            // One protection domain (a parent domain stands for its PD).
            let pdn = |pd| Pd::from_ptr(pd).map(|p| p.pdn);
            ensure(pdn(mr.ibv.pd)? == pdn(m.ibv.pd)?, libc::EINVAL)?;
            mr.ibv.lkey
        }
    };
    Ok(BindMw {
        mw_rkey: m.ibv.rkey,
        new_rkey,
        lkey,
        addr: info.addr,
        len: info.length,
        access: info.mw_access_flags & !IBV_ACCESS_LOCAL_WRITE,
    })
}

/// `ibv_context_ops::bind_mw` (`ibv_bind_mw`, type 1 windows): a bind
/// work request on `qp`; on success the window's R_Key is the new one.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Qp::from_ptr(qp)?;
            ensure(!bind.is_null(), libc::EINVAL)?;
            // SAFETY: bind is the caller's readable struct (checked
            // non-NULL).
            let b = unsafe { &*bind };
            let m = Mw::from_ptr(mw)?;
            ensure(m.ibv.type_ == IBV_MW_TYPE_1, libc::EINVAL)?;
            let new_rkey = inc_rkey(m.ibv.rkey);
            let req = bind_request(q, mw, new_rkey, &b.bind_info)?;
            let wr = SendRequest {
                wr_id: b.wr_id,
                op: SendOp::BindMw(req),
                data: SendData::Sges(Vec::new()),
                remote_va: 0,
                rkey: 0,
                signaled: b.send_flags & IBV_SEND_SIGNALED != 0,
                solicited: false,
                ud: None,
                fence: b.send_flags & IBV_SEND_FENCE != 0,
            };
            q.dev
                .device
                .link()
                .post_sends(q.qpn, vec![wr])
                .map_err(|(_, e)| e.errno())?;
            set_rkey(mw, new_rkey);
            Ok(())
        })())
    })
}

/// Record the R_Key a posted bind gives window `mw` (`ibv_mw::rkey`).
fn set_rkey(mw: *mut ibv_mw, rkey: u32) {
    if Mw::from_ptr(mw).is_ok() {
        // SAFETY: mw is a live window (checked); rkey is the plain field
        // programs read, written with no reference to the Mw alive.
        unsafe { std::ptr::addr_of_mut!((*mw).rkey).write(rkey) };
    }
}

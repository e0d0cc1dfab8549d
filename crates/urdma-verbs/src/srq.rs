//! Shared receive queues.

use crate::context::Context;
use crate::device::{DevShared, MAX_SRQ};
use crate::events::Target;
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_ptr, EventAcks, VResult};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use urdma::engine::command::{DestroySrq, ModifySrq, QuerySrq};
use urdma::engine::SrqAttr;

/// A shared receive queue.
#[repr(C)]
pub struct Srq {
    /// The C view; must stay the first field.
    pub ibv: ibv_srq,
    /// The device.
    pub dev: Arc<DevShared>,
    /// Engine SRQ number.
    pub srqn: u32,
    /// Asynchronous events handed out and acknowledged.
    pub acks: EventAcks,
}

// SAFETY: raw pointers in the C view are handles used as identities.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
    /// Look up a live SRQ.
    pub fn from_ptr<'a>(p: *const ibv_srq) -> VResult<&'a Srq> {
        if !handles::is_live(p, Kind::Srq) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered SRQs are live boxed Srqs; ibv is the first field.
        Ok(unsafe { &*(p as *const Srq) })
    }

    /// One asynchronous event acknowledged.
    pub fn ack_event(&self) {
        let n = self.acks.acked(1);
        let p = &self.ibv as *const ibv_srq as *mut ibv_srq;
        // SAFETY: the SRQ is live; events_completed is a plain field.
        unsafe { (*p).events_completed = n as u32 };
    }
}

fn create(
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    attr: &mut ibv_srq_attr,
) -> VResult<*mut ibv_srq> {
    let p = Pd::from_ptr(pd)?;
    let ctx = Context::from_ptr(p.ibv.context)?;
    let dev = &p.dev;
    ensure(attr.max_wr > 0, libc::EINVAL)?;
    if dev.srqs.fetch_add(1, Ordering::AcqRel) >= MAX_SRQ {
        dev.srqs.fetch_sub(1, Ordering::AcqRel);
        return Err(libc::ENOMEM);
    }
    let (pdn, a) = (
        p.pdn,
        SrqAttr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: 0,
        },
    );
    let made = dev.device.create_srq(pdn, a);
    let (srqn, got) = match made {
        Ok(v) => v,
        Err(e) => {
            dev.srqs.fetch_sub(1, Ordering::AcqRel);
            return Err(e.errno());
        }
    };
    attr.max_wr = got.max_wr;
    attr.max_sge = got.max_sge;
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_srq = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.srq_context = srq_context;
    ibv.pd = pd;
    ibv.handle = srqn;
    let s = Box::into_raw(Box::new(Srq {
        ibv,
        dev: dev.clone(),
        srqn,
        acks: EventAcks::default(),
    }));
    // SAFETY: s is the Box just leaked; mutex/cond initialised once at
    // stable addresses before publication.
    unsafe {
        libc::pthread_mutex_init(
            std::ptr::addr_of_mut!((*s).ibv.mutex).cast(),
            std::ptr::null(),
        );
        libc::pthread_cond_init(
            std::ptr::addr_of_mut!((*s).ibv.cond).cast(),
            std::ptr::null(),
        );
    }
    p.children.fetch_add(1, Ordering::AcqRel);
    let ptr = s as *mut ibv_srq;
    dev.routes
        .add(Target::Srq, srqn, ctx.events.clone(), ptr as usize);
    handles::register(ptr, Kind::Srq);
    Ok(ptr)
}

/// `ibv_create_srq`; the sizes granted are written back to `attr`.
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            ensure(!init.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &mut *init };
            create(pd, a.srq_context, &mut a.attr)
        })())
    })
}

/// `verbs_context::create_srq_ex`: basic SRQs only.
pub unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    init: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            Context::from_ptr(context)?;
            ensure(!init.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &mut *init };
            ensure(a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0, libc::EINVAL)?;
            let known = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
            ensure(a.comp_mask & !known == 0, libc::EOPNOTSUPP)?;
            if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
                ensure(a.srq_type == IBV_SRQT_BASIC, libc::EOPNOTSUPP)?;
            }
            ensure(Pd::from_ptr(a.pd)?.ibv.context == context, libc::EINVAL)?;
            create(a.pd, a.srq_context, &mut a.attr)
        })())
    })
}

/// `ibv_modify_srq`: the limit can be armed; the engine cannot resize.
pub unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let s = Srq::from_ptr(srq)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            let known = (IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) as c_int;
            ensure(mask & !known == 0, libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &*attr };
            let max_wr = (mask & IBV_SRQ_MAX_WR as c_int != 0).then_some(a.max_wr);
            let limit = (mask & IBV_SRQ_LIMIT as c_int != 0).then_some(a.srq_limit);
            let srqn = s.srqn;
            s.dev
                .device
                .call(ModifySrq {
                    srqn,
                    max_wr,
                    limit,
                })
                .map_err(|e| e.errno())
        })())
    })
}

/// `ibv_query_srq`
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let s = Srq::from_ptr(srq)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            let srqn = s.srqn;
            let q = s
                .dev
                .device
                .call(QuerySrq { srqn })
                .map_err(|e| e.errno())?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            unsafe {
                *attr = ibv_srq_attr {
                    max_wr: q.max_wr,
                    max_sge: q.max_sge,
                    srq_limit: q.srq_limit,
                }
            };
            Ok(())
        })())
    })
}

/// `ibv_destroy_srq`: EBUSY while QPs use it.
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let s = Srq::from_ptr(srq)?;
            let srqn = s.srqn;
            s.dev
                .device
                .call(DestroySrq { srqn })
                .map_err(|e| e.errno())?;
            s.acks.wait_all_acked();
            s.dev.routes.remove(Target::Srq, srqn);
            s.dev.srqs.fetch_sub(1, Ordering::AcqRel);
            if let Ok(p) = Pd::from_ptr(s.ibv.pd) {
                p.children.fetch_sub(1, Ordering::AcqRel);
            }
            handles::unregister(srq, Kind::Srq);
            let b = srq as *mut Srq;
            // SAFETY: b was a registered boxed Srq, now unregistered.
            unsafe {
                libc::pthread_mutex_destroy(std::ptr::addr_of_mut!((*b).ibv.mutex).cast());
                libc::pthread_cond_destroy(std::ptr::addr_of_mut!((*b).ibv.cond).cast());
                drop(Box::from_raw(b));
            }
            Ok(())
        })())
    })
}

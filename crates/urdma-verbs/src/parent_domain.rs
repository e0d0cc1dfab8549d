//! Parent domains (`ibv_alloc_parent_domain`): a PD handle that stands for
//! a protection domain, with the program's allocators and context for the
//! provider's buffers. Objects made in a parent domain are in its
//! protection domain. urdma's queues live in memory the NIC shares with
//! the program, so the allocators are accepted and never called; thread
//! domains are not offered.

use crate::context::Context;
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::sys::*;
use crate::util::{ensure, guard, ret_ptr, VResult};
use std::sync::atomic::{AtomicU32, Ordering};

/// Attribute bits a parent domain takes.
const KNOWN: u32 = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;

fn alloc(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> VResult<*mut ibv_pd> {
    let c = Context::from_ptr(context)?;
    ensure(!attr.is_null(), libc::EINVAL)?;
    // SAFETY: a non-NULL pointer to the caller's attributes.
    let a = unsafe { &*attr };
    ensure(a.comp_mask & !KNOWN == 0, libc::EINVAL)?;
    ensure(a.td.is_null(), libc::EOPNOTSUPP)?;
    let base = Pd::from_ptr(a.pd)?;
    ensure(
        base.ibv.context == context && base.base.is_null(),
        libc::EINVAL,
    )?;
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_pd = unsafe { std::mem::zeroed() };
    ibv.context = context;
    ibv.handle = base.pdn;
    let p = Box::into_raw(Box::new(Pd {
        ibv,
        dev: c.dev.clone(),
        pdn: base.pdn,
        children: AtomicU32::new(0),
        base: a.pd,
    })) as *mut ibv_pd;
    base.children.fetch_add(1, Ordering::AcqRel);
    handles::register(p, Kind::Pd);
    Ok(p)
}

/// `verbs_context::alloc_parent_domain`: EOPNOTSUPP with a thread domain,
/// EINVAL for a PD of another context or a parent domain as the PD.
pub unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || ret_ptr(alloc(context, attr)))
}

/// Free parent domain `pd` (nothing left in it): its protection domain
/// stays.
pub fn dealloc(pd: *mut ibv_pd) -> VResult<()> {
    let p = Pd::from_ptr(pd)?;
    ensure(!p.base.is_null() && !p.in_use(), libc::EBUSY)?;
    if let Ok(base) = Pd::from_ptr(p.base) {
        base.children.fetch_sub(1, Ordering::AcqRel);
    }
    handles::unregister(pd, Kind::Pd);
    // SAFETY: pd was a registered boxed Pd, now unregistered.
    drop(unsafe { Box::from_raw(pd as *mut Pd) });
    Ok(())
}

//! Protection domains and memory regions. C memory is registered in
//! place (`MemRegion::from_raw`), visible to peers at the IOVA the caller
//! chose.

use crate::context::Context;
use crate::device::DevShared;
use crate::handles::{self, Kind};
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_ptr, set_errno, VResult};
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use urdma::engine::command::{AllocPd, DeallocPd, DeregMr, RegMr};
use urdma::mem::MemRegion;
use urdma::mr::MrEntry;
use urdma::AccessFlags;

/// A protection domain.
#[repr(C)]
pub struct Pd {
    /// The C view; must stay the first field.
    pub ibv: ibv_pd,
    /// The device.
    pub dev: Arc<DevShared>,
    /// Engine PD number.
    pub pdn: u32,
    /// SRQs, address handles and parent domains made in it (the engine
    /// counts MRs and QPs).
    pub children: AtomicU32,
    /// For a parent domain, the protection domain it stands for (whose
    /// engine PD it shares); NULL for a protection domain.
    pub base: *mut ibv_pd,
}

impl Pd {
    /// Look up a live PD.
    pub fn from_ptr<'a>(p: *const ibv_pd) -> VResult<&'a Pd> {
        if !handles::is_live(p, Kind::Pd) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered PDs are live boxed Pds; ibv is the first field.
        Ok(unsafe { &*(p as *const Pd) })
    }

    /// True while MRs, QPs, SRQs or AHs remain in the PD.
    pub fn in_use(&self) -> bool {
        self.children.load(Ordering::Acquire) != 0
    }
}

/// An MR, QP or MW was made in `pd`: a parent domain counts it (the
/// engine counts them in the protection domain, which a parent domain
/// shares), so that it is not freed under them.
pub fn hold(pd: *mut ibv_pd) {
    if let Ok(p) = Pd::from_ptr(pd) {
        if !p.base.is_null() {
            p.children.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// An MR, QP or MW made in `pd` is gone (see [`hold`]).
pub fn release(pd: *mut ibv_pd) {
    if let Ok(p) = Pd::from_ptr(pd) {
        if !p.base.is_null() {
            p.children.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn alloc(context: *mut ibv_context) -> VResult<*mut ibv_pd> {
    let c = Context::from_ptr(context)?;
    let pdn = c.dev.device.call(AllocPd {}).map_err(|e| e.errno())?;
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_pd = unsafe { std::mem::zeroed() };
    ibv.context = context;
    ibv.handle = pdn;
    let p = Box::into_raw(Box::new(Pd {
        ibv,
        dev: c.dev.clone(),
        pdn,
        children: AtomicU32::new(0),
        base: std::ptr::null_mut(),
    })) as *mut ibv_pd;
    handles::register(p, Kind::Pd);
    Ok(p)
}

/// `ibv_alloc_pd`
pub unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || ret_ptr(alloc(context)))
}

/// `ibv_dealloc_pd`: EBUSY while MRs, QPs, SRQs or AHs remain in it.
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let p = Pd::from_ptr(pd)?;
            ensure(!p.in_use(), libc::EBUSY)?;
            if !p.base.is_null() {
                return crate::parent_domain::dealloc(pd);
            }
            let pdn = p.pdn;
            p.dev
                .device
                .call(DeallocPd { pd: pdn })
                .map_err(|e| e.errno())?;
            handles::unregister(pd, Kind::Pd);
            // SAFETY: pd was a registered boxed Pd, now unregistered.
            drop(unsafe { Box::from_raw(pd as *mut Pd) });
            Ok(())
        })())
    })
}

/// A registered memory region.
#[repr(C)]
pub struct Mr {
    /// The C view; must stay the first field.
    pub ibv: ibv_mr,
    /// The region's type (0: an ordinary MR) and access flags, laid out
    /// right after `ibv` as libibverbs' provider-side `struct verbs_mr`
    /// has them (its `ibv_dereg_mr` reads them).
    pub mr_type: c_int,
    /// The access flags the region was registered with.
    pub access: c_int,
    /// The device.
    pub dev: Arc<DevShared>,
    /// The engine's region.
    pub entry: Arc<MrEntry>,
}

impl Mr {
    /// Look up a live MR.
    pub fn from_ptr<'a>(p: *const ibv_mr) -> VResult<&'a Mr> {
        if !handles::is_live(p, Kind::Mr) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered MRs are live boxed Mrs; ibv is the first field.
        Ok(unsafe { &*(p as *const Mr) })
    }
}

/// Access bits with a meaning for urdma. MW_BIND (no memory windows
/// exist) and HUGETLB (a hint) are accepted and have no effect.
const ACCESS_KNOWN: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB;

/// The optional access range (IBV_ACCESS_RELAXED_ORDERING and its
/// successors): a device may ignore these bits.
const ACCESS_OPTIONAL: u32 = IB_UVERBS_ACCESS_OPTIONAL_RANGE;

/// The urdma access flags of a verbs access mask.
pub fn access_flags(access: u32) -> VResult<AccessFlags> {
    let access = access & !ACCESS_OPTIONAL;
    ensure(access & !ACCESS_KNOWN == 0, libc::EINVAL)?;
    ensure(access & IBV_ACCESS_ON_DEMAND == 0, libc::EOPNOTSUPP)?;
    ensure(access & IBV_ACCESS_ZERO_BASED == 0, libc::EOPNOTSUPP)?;
    Ok(AccessFlags::from_bits_truncate(access))
}

/// EFAULT unless every page of `[addr, addr+len)` is mapped.
fn check_mapped(addr: usize, len: usize) -> VResult<()> {
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    let mut p = addr & !(page - 1);
    let mut vec = vec![0u8; 4096];
    while p < end {
        let chunk = (end - p).div_ceil(page).min(vec.len());
        // SAFETY: mincore only reports on the range; vec has room for one
        // byte per page of the chunk.
        let r = unsafe { libc::mincore(p as *mut c_void, chunk * page, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(libc::EFAULT);
        }
        p += chunk * page;
    }
    Ok(())
}

/// Register `length` bytes at `addr` in `pd`, visible at `iova` (with
/// `rekey`: in place of the MR of that key, under it): the C view of the
/// region and the engine's.
fn register(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
    rekey: Option<u32>,
) -> VResult<(ibv_mr, Arc<MrEntry>, Arc<DevShared>)> {
    let p = Pd::from_ptr(pd)?;
    let flags = access_flags(access)?;
    ensure(length > 0, libc::EINVAL)?;
    ensure(!addr.is_null(), libc::EFAULT)?;
    check_mapped(addr as usize, length)?;
    // SAFETY: the verbs contract: registered memory stays valid until
    // ibv_dereg_mr, which invalidates the region before returning.
    let mem = unsafe { MemRegion::from_raw(addr.cast(), length) }.ok_or(libc::EFAULT)?;
    let pdn = p.pdn;
    let entry = p
        .dev
        .device
        .call(RegMr {
            pd: pdn,
            access: flags,
            iova,
            mem: Box::new(mem),
            rekey,
        })
        .map_err(|e| e.errno())?;
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_mr = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.pd = pd;
    ibv.addr = addr;
    ibv.length = length;
    ibv.handle = entry.lkey;
    ibv.lkey = entry.lkey;
    ibv.rkey = entry.rkey;
    Ok((ibv, entry, p.dev.clone()))
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> VResult<*mut ibv_mr> {
    let (ibv, entry, dev) = register(pd, addr, length, iova, access, None)?;
    let m = Box::into_raw(Box::new(Mr {
        ibv,
        mr_type: 0,
        access: access as c_int,
        dev,
        entry,
    })) as *mut ibv_mr;
    handles::register(m, Kind::Mr);
    hold(pd);
    Ok(m)
}

/// `ibv_rereg_mr`: the region takes a new translation (`addr`, `length`,
/// visible at `addr`), PD or access, as `flags` says, keeping what they do
/// not name and its keys. The old region is out of reach once the new one
/// is in place; on failure the MR is as it was. Returns 0, an errno (as a
/// provider does: EINVAL for a PD of another device or bad access, EFAULT
/// for memory not mapped), or, for unknown flags or none, as libibverbs
/// itself: `IBV_REREG_MR_ERR_INPUT` with errno EINVAL.
pub unsafe extern "C" fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    const TRANSLATION: c_int = IBV_REREG_MR_CHANGE_TRANSLATION as c_int;
    const CHANGE_PD: c_int = IBV_REREG_MR_CHANGE_PD as c_int;
    const CHANGE_ACCESS: c_int = IBV_REREG_MR_CHANGE_ACCESS as c_int;
    guard(libc::EIO, || {
        let r = (|| -> VResult<c_int> {
            let m = Mr::from_ptr(mr)?;
            let known = TRANSLATION | CHANGE_PD | CHANGE_ACCESS;
            if flags == 0 || flags & !known != 0 {
                // As libibverbs checks them: an input error, with errno.
                set_errno(libc::EINVAL);
                return Ok(IBV_REREG_MR_ERR_INPUT);
            }
            let new_pd = if flags & CHANGE_PD != 0 { pd } else { m.ibv.pd };
            ensure(
                Pd::from_ptr(new_pd)?.ibv.context == m.ibv.context,
                libc::EINVAL,
            )?;
            let (new_addr, new_len, iova) = if flags & TRANSLATION != 0 {
                (addr, length, addr as u64)
            } else {
                (m.ibv.addr, m.ibv.length, m.entry.iova)
            };
            let new_access = if flags & CHANGE_ACCESS != 0 {
                access
            } else {
                m.access
            };
            let old = m.entry.lkey;
            let (ibv, entry, _) = register(
                new_pd,
                new_addr,
                new_len,
                iova,
                new_access as u32,
                Some(old),
            )?;
            // SAFETY: mr is a live boxed Mr (checked above); the verbs
            // contract gives ibv_rereg_mr the MR to itself while it runs.
            let m = unsafe { &mut *(mr as *mut Mr) };
            if m.ibv.pd != ibv.pd {
                release(m.ibv.pd);
                hold(ibv.pd);
            }
            m.ibv.pd = ibv.pd;
            m.ibv.addr = ibv.addr;
            m.ibv.length = ibv.length;
            m.ibv.lkey = ibv.lkey;
            m.ibv.rkey = ibv.rkey;
            m.access = new_access;
            m.entry = entry;
            Ok(0)
        })();
        r.unwrap_or_else(|e| {
            set_errno(e);
            e
        })
    })
}

/// `ibv_reg_mr`: register `length` bytes at `addr`, visible at IOVA `addr`.
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        ret_ptr(reg(pd, addr, length, addr as u64, access as u32))
    })
}

/// `ibv_reg_mr_iova`
pub unsafe extern "C" fn reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        ret_ptr(reg(pd, addr, length, iova, access as u32))
    })
}

/// `ibv_reg_mr_iova2`
pub unsafe extern "C" fn reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        ret_ptr(reg(pd, addr, length, iova, access))
    })
}

/// `ibv_dereg_mr`: after it returns urdma no longer touches the memory
/// (work still in flight on it completes in error).
pub unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let m = Mr::from_ptr(mr)?;
            let key = m.entry.lkey;
            let entry = m.dev.device.call(DeregMr { key }).map_err(|e| e.errno())?;
            entry.mem.invalidate();
            release(m.ibv.pd);
            handles::unregister(mr, Kind::Mr);
            // SAFETY: mr was a registered boxed Mr, now unregistered.
            drop(unsafe { Box::from_raw(mr as *mut Mr) });
            Ok(())
        })())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_masks() {
        assert!(access_flags(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE).is_ok());
        assert!(access_flags(IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_LOCAL_WRITE).is_ok());
        assert_eq!(access_flags(IBV_ACCESS_ON_DEMAND), Err(libc::EOPNOTSUPP));
        assert_eq!(access_flags(1 << 12), Err(libc::EINVAL));
    }

    #[test]
    fn mapped_ranges() {
        let v = vec![0u8; 10000];
        assert!(check_mapped(v.as_ptr() as usize, v.len()).is_ok());
        assert_eq!(check_mapped(8, 16), Err(libc::EFAULT));
    }
}

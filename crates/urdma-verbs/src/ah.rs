//! Address handles, and building one from a received UD completion.

use crate::context::Context;
use crate::device::{DevShared, MAX_AH};
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::qp::av_from;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_minus1, ret_ptr, VResult};
use std::net::SocketAddr;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use urdma::{AddressVector, Gid};
use urdma_wire::{GrhRepr, GRH_LEN};

/// An address handle: where UD sends go.
#[repr(C)]
pub struct Ah {
    /// The C view; must stay the first field.
    pub ibv: ibv_ah,
    /// The device.
    pub dev: Arc<DevShared>,
    /// The address vector.
    pub av: AddressVector,
    /// Peer device address and UDP port.
    pub dest: SocketAddr,
}

// SAFETY: raw pointers in the C view are handles used as identities.
unsafe impl Send for Ah {}
// SAFETY: as above.
unsafe impl Sync for Ah {}

impl Ah {
    /// Look up a live AH.
    pub fn from_ptr<'a>(p: *const ibv_ah) -> VResult<&'a Ah> {
        if !handles::is_live(p, Kind::Ah) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered AHs are live boxed Ahs; ibv is the first field.
        Ok(unsafe { &*(p as *const Ah) })
    }
}

fn create(pd: *mut ibv_pd, attr: *const ibv_ah_attr) -> VResult<*mut ibv_ah> {
    let p = Pd::from_ptr(pd)?;
    ensure(!attr.is_null(), libc::EINVAL)?;
    // SAFETY: non-NULL pointer to the caller's attributes.
    let av = av_from(unsafe { &*attr }, &p.dev)?;
    if p.dev.ahs.fetch_add(1, Ordering::AcqRel) >= MAX_AH {
        p.dev.ahs.fetch_sub(1, Ordering::AcqRel);
        return Err(libc::ENOMEM);
    }
    p.children.fetch_add(1, Ordering::AcqRel);
    // SAFETY: plain C data; zero is valid.
    let mut ibv: ibv_ah = unsafe { std::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.pd = pd;
    let dest = SocketAddr::new(av.dgid.to_ip(), av.udp_port);
    let a = Box::into_raw(Box::new(Ah {
        ibv,
        dev: p.dev.clone(),
        av,
        dest,
    }));
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    // SAFETY: a is the Box just leaked, not yet shared.
    unsafe { (*a).ibv.handle = NEXT.fetch_add(1, Ordering::Relaxed) };
    let ptr = a as *mut ibv_ah;
    handles::register(ptr, Kind::Ah);
    Ok(ptr)
}

/// `ibv_create_ah` (RoCE: `is_global` and a GRH are required).
pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || ret_ptr(create(pd, attr)))
}

/// `ibv_destroy_ah`
pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let a = Ah::from_ptr(ah)?;
            // Whoever unregisters it frees it: a second destroy fails here.
            ensure(handles::unregister(ah, Kind::Ah), libc::EINVAL)?;
            a.dev.ahs.fetch_sub(1, Ordering::AcqRel);
            if let Ok(p) = Pd::from_ptr(a.ibv.pd) {
                p.children.fetch_sub(1, Ordering::AcqRel);
            }
            // SAFETY: ah was a registered boxed Ah, now unregistered.
            drop(unsafe { Box::from_raw(ah as *mut Ah) });
            Ok(())
        })())
    })
}

/// The IP header in a received GRH area (RoCE v2 over IPv4 puts the IPv4
/// header in its last 20 bytes, over IPv6 the IPv6 header fills it).
/// Anything else is not supported; a multicast destination cannot be
/// answered.
fn read_grh(g: &[u8; GRH_LEN]) -> VResult<GrhRepr> {
    let h = GrhRepr::parse(g).map_err(|_| libc::EPROTONOSUPPORT)?;
    ensure(!h.dst.is_multicast(), libc::EINVAL)?;
    Ok(h)
}

fn init_from_wc(
    c: &Context,
    port_num: u8,
    wc: &ibv_wc,
    grh: *const ibv_grh,
) -> VResult<ibv_ah_attr> {
    ensure(port_num == 1, libc::EINVAL)?;
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port_num;
    if wc.wc_flags & IBV_WC_GRH == 0 {
        return Ok(a);
    }
    ensure(!grh.is_null(), libc::EINVAL)?;
    // SAFETY: a GRH area is 40 readable bytes at the start of the
    // receive buffer (verbs contract for UD receives).
    let g: [u8; GRH_LEN] = unsafe { std::ptr::read_unaligned(grh.cast::<[u8; GRH_LEN]>()) };
    let h = read_grh(&g)?;
    a.is_global = 1;
    a.grh.flow_label = h.flow_label;
    a.grh.hop_limit = h.hop_limit;
    a.grh.traffic_class = h.traffic_class;
    let (src, dst) = (h.src, h.dst);
    // The local GID the packet was sent to gives the source GID index.
    let dgid = Gid::from_ip(dst);
    let index = (0..c.dev.gids.len() as usize)
        .find(|&i| c.dev.gid(i) == Some(dgid))
        .ok_or(libc::ENOENT)?;
    a.grh.sgid_index = index as u8;
    a.grh.dgid.raw = Gid::from_ip(src).0;
    Ok(a)
}

/// `ibv_init_ah_from_wc`: 0, or -1 with errno.
pub unsafe extern "C" fn init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        ret_minus1((|| {
            let c = Context::from_ptr(context)?;
            ensure(!wc.is_null() && !ah_attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's completion.
            let a = init_from_wc(c, port_num, unsafe { &*wc }, grh)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            unsafe { *ah_attr = a };
            Ok(())
        })())
    })
}

/// `ibv_create_ah_from_wc`
pub unsafe extern "C" fn create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            let p = Pd::from_ptr(pd)?;
            let c = Context::from_ptr(p.ibv.context)?;
            ensure(!wc.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's completion.
            let a = init_from_wc(c, port_num, unsafe { &*wc }, grh)?;
            create(pd, &a)
        })())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn grh_versions() {
        let mut g = [0u8; 40];
        g[0] = 0x60;
        // IPv6, but not UDP.
        assert_eq!(read_grh(&g).err(), Some(libc::EPROTONOSUPPORT));
        g[6] = 17;
        assert!(matches!(read_grh(&g).map(|h| h.src), Ok(IpAddr::V6(_))));
        g[24] = 0xff;
        assert_eq!(read_grh(&g).err(), Some(libc::EINVAL));
        let mut g4 = [0u8; 40];
        let h = &mut g4[20..];
        h[0] = 0x45;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&[127, 0, 0, 1]);
        h[16..20].copy_from_slice(&[127, 0, 0, 2]);
        let header: [u8; 20] = (&*h).try_into().unwrap();
        h[10..12].copy_from_slice(&(!urdma_wire::ipv4_header_sum(&header)).to_be_bytes());
        let v4 = read_grh(&g4);
        assert_eq!(
            v4.map(|h| (h.src, h.dst, h.hop_limit)),
            Ok(([127, 0, 0, 1].into(), [127, 0, 0, 2].into(), 64))
        );
        g4[21] ^= 1;
        assert_eq!(read_grh(&g4).err(), Some(libc::EPROTONOSUPPORT));
        assert_eq!(read_grh(&[0u8; 40]).err(), Some(libc::EPROTONOSUPPORT));
    }
}

//! Address handles, and building one from a received UD completion.

use crate::context::Context;
use crate::device::{DevShared, MAX_AH};
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::qp::av_from;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_minus1, ret_ptr, VResult};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use urdma::{AddressVector, Gid};

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

/// The IP version of a received GRH area: RoCE v2 over IPv4 puts the
/// IPv4 header in its last 20 bytes (with a valid checksum), over IPv6
/// the IPv6 header fills it.
fn grh_version(g: &[u8; 40]) -> Option<u8> {
    let mut ip4 = [0u8; 20];
    ip4.copy_from_slice(&g[20..40]);
    let v4 = ip4[0] == 0x45 && urdma_wire::ipv4_header_sum(&ip4) == 0xffff;
    match g[0] >> 4 {
        6 if !v4 => Some(6),
        _ if v4 => Some(4),
        _ => None,
    }
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
    let g: [u8; 40] = unsafe { std::ptr::read_unaligned(grh.cast::<[u8; 40]>()) };
    let vtf = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
    a.is_global = 1;
    a.grh.flow_label = vtf & 0xf_ffff;
    let (src, dst) = match grh_version(&g).ok_or(libc::EPROTONOSUPPORT)? {
        4 => {
            let h = &g[20..40];
            a.grh.hop_limit = h[8];
            a.grh.traffic_class = h[1];
            let s = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let d = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            ensure(!d.is_multicast(), libc::EINVAL)?;
            (IpAddr::V4(s), IpAddr::V4(d))
        }
        _ => {
            ensure(g[6] == libc::IPPROTO_UDP as u8, libc::EPROTONOSUPPORT)?;
            ensure(g[24] != 0xff, libc::EINVAL)?;
            a.grh.hop_limit = g[7];
            a.grh.traffic_class = ((vtf >> 20) & 0xff) as u8;
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&g[8..24]);
            d.copy_from_slice(&g[24..40]);
            (Gid(s).to_ip(), Gid(d).to_ip())
        }
    };
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

    #[test]
    fn grh_versions() {
        let mut g = [0u8; 40];
        g[0] = 0x60;
        assert_eq!(grh_version(&g), Some(6));
        let mut g4 = [0u8; 40];
        let h = &mut g4[20..];
        h[0] = 0x45;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&[127, 0, 0, 1]);
        h[16..20].copy_from_slice(&[127, 0, 0, 2]);
        let header: [u8; 20] = (&*h).try_into().unwrap();
        h[10..12].copy_from_slice(&(!urdma_wire::ipv4_header_sum(&header)).to_be_bytes());
        assert_eq!(grh_version(&g4), Some(4));
        assert_eq!(grh_version(&[0u8; 40]), None);
    }
}

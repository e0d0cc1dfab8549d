//! Addresses: binding, address and route resolution (RoCE has no SA: a
//! route is the device that holds the source address and a path record
//! filled locally). `rdma_getaddrinfo` is in `addrinfo`.

use crate::state::{event, lock, Locked, State};
use crate::sys::*;
use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::raw::c_int;

/// A C socket address (`AF_INET` or `AF_INET6`) at `p`, if it is one.
pub fn from_c(p: *const c_void) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller passes a socket address; sa_family comes first in
    // every form, and the form it names is read whole.
    unsafe {
        match c_int::from((*(p as *const libc::sockaddr)).sa_family) {
            libc::AF_INET => {
                let s = &*(p as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Some(SocketAddr::new(ip.into(), u16::from_be(s.sin_port)))
            }
            libc::AF_INET6 => {
                let s = &*(p as *const libc::sockaddr_in6);
                let ip = std::net::Ipv6Addr::from(s.sin6_addr.s6_addr);
                Some(SocketAddr::new(ip.into(), u16::from_be(s.sin6_port)))
            }
            _ => None,
        }
    }
}

/// Write `a` at `p` (room for a `sockaddr_storage`).
pub fn to_c(a: SocketAddr, p: *mut c_void) {
    let p = p as *mut libc::sockaddr_storage;
    // SAFETY: the caller passes room for a sockaddr_storage, which is
    // plain data.
    unsafe {
        std::ptr::write_bytes(p, 0, 1);
        match a {
            SocketAddr::V4(a) => {
                let s = &mut *(p as *mut libc::sockaddr_in);
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = a.port().to_be();
                s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            }
            SocketAddr::V6(a) => {
                let s = &mut *(p as *mut libc::sockaddr_in6);
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = a.port().to_be();
                s.sin6_addr.s6_addr = a.ip().octets();
            }
        }
    }
}

/// The GID of an IP address (IPv4-mapped for IPv4), as RoCEv2 has it.
pub fn gid_of(ip: IpAddr) -> ibv_gid {
    let raw = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    ibv_gid { raw }
}

/// Take a free port of port space `ps` (`want` if not 0).
fn take_port(st: &mut Locked, ps: u32, want: u16) -> Result<u16, i32> {
    if want != 0 {
        return match st.ports.insert((ps, want)) {
            true => Ok(want),
            false => Err(libc::EADDRINUSE),
        };
    }
    let mut seed = [0u8; 2];
    // SAFETY: getrandom fills the 2 bytes of seed.
    unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 2, 0) };
    let span = 61000 - 32768;
    let start = u16::from_ne_bytes(seed) as u32 % span;
    for i in 0..span {
        let port = (32768 + (start + i) % span) as u16;
        if st.ports.insert((ps, port)) {
            return Ok(port);
        }
    }
    Err(libc::EADDRINUSE)
}

/// The device an ID bound to `ip` is on: the device holding `ip`, else
/// none for the wildcard and for a loopback address (Linux's rdma_cm
/// takes both as "any": such an ID listens on every device).
fn bind_dev(st: &State, ip: IpAddr) -> Result<Option<usize>, i32> {
    match st.dev_of(ip) {
        Some(d) => Ok(Some(d)),
        None if ip.is_unspecified() || ip.is_loopback() => Ok(None),
        None => Err(libc::EADDRNOTAVAIL),
    }
}

/// Bind `id` to `a` (a device's address, a loopback address or the
/// wildcard).
pub fn bind(st: &mut Locked, id: *mut rdma_cm_id, a: SocketAddr) -> Result<(), i32> {
    crate::nic::open_devices(st);
    let dev = bind_dev(st, a.ip())?;
    let s = st.id(id)?;
    // SAFETY: id is live (in the table).
    let ps = unsafe { (*id).ps };
    if s.src.is_some() {
        return Err(libc::EINVAL);
    }
    let port = take_port(st, ps, a.port())?;
    set_src(st, id, SocketAddr::new(a.ip(), port), dev)?;
    st.id(id)?.owns_port = true;
    Ok(())
}

/// Set the local side of `id`: its address `src` and, when known, its
/// device `dev` (`verbs`, the port, the source GID and the P_Key).
pub fn set_src(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    src: SocketAddr,
    dev: Option<usize>,
) -> Result<(), i32> {
    let ctx = dev.map(|d| st.devs[d].ctx);
    // The source GID is one of the device's: the source's own, or for a
    // loopback source the device's address of its family.
    let dev_ip = dev.map_or(src.ip(), |d| {
        let dv = &st.devs[d];
        match dv.addr.ip() == src.ip() || dv.gids.contains(&src.ip()) {
            true => src.ip(),
            false => dv.addr_for(src.ip()),
        }
    });
    // An ID on a device has the device's PD until its QP says otherwise
    // (programs register memory with id->pd before making the QP).
    let pd = match dev {
        Some(d) => crate::nic::default_pd(st, d)?,
        None => std::ptr::null_mut(),
    };
    let sgid_index = dev.map_or(0, |d| st.devs[d].gid_index(dev_ip));
    let s = st.id(id)?;
    s.src = Some(src);
    s.dev = dev;
    s.sgid_index = sgid_index;
    // SAFETY: id is live (in the table); its route is plain data.
    unsafe {
        to_c(
            src,
            std::ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_1).cast(),
        );
        if let Some(ctx) = ctx {
            if (*id).pd.is_null() {
                (*id).pd = pd;
            }
            (*id).verbs = ctx as *mut ibv_context;
            (*id).port_num = 1;
            (*id).route.addr.addr.ibaddr.sgid = gid_of(dev_ip);
            (*id).route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        }
    }
    Ok(())
}

/// Set the peer side of `id`: its address `dst` and the GID of `peer`
/// (the address its packets come from).
pub fn set_dst(
    st: &mut Locked,
    id: *mut rdma_cm_id,
    dst: SocketAddr,
    peer: IpAddr,
) -> Result<(), i32> {
    st.id(id)?.dst = Some(dst);
    // SAFETY: id is live (in the table); its route is plain data.
    unsafe {
        to_c(
            dst,
            std::ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_2).cast(),
        );
        (*id).route.addr.addr.ibaddr.dgid = gid_of(peer);
    }
    Ok(())
}

/// The address the kernel's routing picks as the source towards `dst`.
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = match dst {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    s.connect(SocketAddr::new(dst, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// `rdma_resolve_addr`: the device towards `dst` (the bound one, the one
/// of `src`, the one holding the routing's source address, or the only
/// one), then ADDR_RESOLVED.
pub fn resolve_addr(
    id: *mut rdma_cm_id,
    src: *const c_void,
    dst: *const c_void,
) -> Result<(), i32> {
    let dst = from_c(dst).ok_or(libc::EAFNOSUPPORT)?;
    let mut st = lock();
    crate::nic::open_devices(&mut st);
    let s = st.id(id)?;
    if s.conn.is_some() || !s.listens.is_empty() {
        return Err(libc::EINVAL);
    }
    if loops_back(&st, dst) {
        return resolve_loopback(&mut st, id, dst);
    }
    let s = st.id(id)?;
    if s.src.is_none() {
        let want = from_c(src).unwrap_or_else(|| {
            let ip = route_source(dst.ip())
                .filter(|ip| st.dev_of(*ip).is_some())
                .or_else(|| (st.devs.len() == 1).then(|| st.devs[0].addr_for(dst.ip())))
                .or_else(|| st.devs.first().map(|d| d.addr_for(dst.ip())))
                .unwrap_or(Ipv4Addr::UNSPECIFIED.into());
            SocketAddr::new(ip, 0)
        });
        if want.ip().is_unspecified() {
            return Err(libc::ENODEV);
        }
        bind(&mut st, id, want)?;
    }
    let s = st.id(id)?;
    let src = s.src.ok_or(libc::EINVAL)?;
    if s.dev.is_none() {
        // Bound to the wildcard: the device of the routing's source.
        let d = route_source(dst.ip())
            .and_then(|ip| st.dev_of(ip))
            .or_else(|| (!st.devs.is_empty()).then_some(0))
            .ok_or(libc::ENODEV)?;
        let ip = st.devs[d].addr_for(dst.ip());
        set_src(&mut st, id, SocketAddr::new(ip, src.port()), Some(d))?;
    }
    set_dst(&mut st, id, dst, dst.ip())?;
    st.push(
        id as usize,
        event(id as usize, RDMA_CM_EVENT_ADDR_RESOLVED, 0),
    );
    Ok(())
}

/// Whether a connection to `dst` stays in this program, as Linux's
/// rdma_cm resolves "any" destinations (cma_resolve_loopback): the zero
/// address, or a loopback address that none of the program's devices
/// holds and one of its IDs is bound to, with `dst`'s port. (Any other
/// loopback address is some urdma device's, maybe another program's.)
fn loops_back(st: &State, dst: SocketAddr) -> bool {
    if dst.ip().is_unspecified() {
        return true;
    }
    dst.ip().is_loopback()
        && st.dev_of(dst.ip()).is_none()
        && st
            .ids
            .values()
            .any(|s| s.src == Some(dst) && !s.listens.is_empty())
}

/// Resolve `dst` (see [`loops_back`]) to the ID's own device: the one it
/// is bound to, else the program's first; packets go to that device's
/// own address (the destination GID is the source GID), the ID's
/// addresses stay the loopback ones.
fn resolve_loopback(st: &mut Locked, id: *mut rdma_cm_id, dst: SocketAddr) -> Result<(), i32> {
    if st.devs.is_empty() {
        return Err(libc::ENODEV);
    }
    let lo: IpAddr = match dst.ip() {
        IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
    };
    if st.id(id)?.src.is_none() {
        bind(st, id, SocketAddr::new(lo, 0))?;
    }
    let s = st.id(id)?;
    let mut src = s.src.ok_or(libc::EINVAL)?;
    let d = s.dev.unwrap_or(0);
    if src.ip().is_unspecified() {
        src = SocketAddr::new(lo, src.port());
    }
    let own = st.devs[d].addr_for(dst.ip());
    set_src(st, id, src, Some(d))?;
    set_dst(st, id, dst, own)?;
    st.push(
        id as usize,
        event(id as usize, RDMA_CM_EVENT_ADDR_RESOLVED, 0),
    );
    Ok(())
}

/// The address the ID's packets go to: the one of its destination GID.
pub fn peer_ip(id: *mut rdma_cm_id) -> IpAddr {
    // SAFETY: the caller passes a live ID; its route is plain data.
    let raw = unsafe { (*id).route.addr.addr.ibaddr.dgid.raw };
    let v6 = std::net::Ipv6Addr::from(raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.into(),
        None => v6.into(),
    }
}

/// `rdma_resolve_route`: fill the path record, then ROUTE_RESOLVED.
pub fn resolve_route(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut st = lock();
    let s = st.id(id)?;
    let (Some(dev), Some(src), Some(dst)) = (s.dev, s.src, s.dst) else {
        return Err(libc::EINVAL);
    };
    let tos = s.tos;
    let mtu = st.devs[dev].mtu;
    // SAFETY: ibv_sa_path_rec is plain C data; all-zero is valid.
    let mut path: Box<ibv_sa_path_rec> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: id is live; its route is plain data.
    (path.sgid, path.dgid) = unsafe {
        let a = &(*id).route.addr.addr.ibaddr;
        (a.sgid, a.dgid)
    };
    path.pkey = 0xffffu16.to_be();
    path.hop_limit = 64;
    path.traffic_class = tos;
    path.mtu_selector = 2;
    path.mtu = mtu as u8;
    path.rate_selector = 2;
    path.packet_life_time_selector = 2;
    path.packet_life_time = 16;
    path.reversible = 1;
    path.numb_path = 1;
    let flow = (u32::from(src.port()) * 31 + u32::from(dst.port())) & 0xfffff;
    path.flow_label = flow.to_be();
    let p = &mut *path as *mut ibv_sa_path_rec;
    let s = st.id(id)?;
    s.path = Some(path);
    // SAFETY: id is live; the path record lives as long as the ID.
    unsafe {
        (*id).route.path_rec = p;
        (*id).route.num_paths = 1;
    }
    st.push(
        id as usize,
        event(id as usize, RDMA_CM_EVENT_ROUTE_RESOLVED, 0),
    );
    Ok(())
}

/// The port of the socket address at `p` (0 if none).
pub fn port_of(p: *const c_void) -> u16 {
    from_c(p).map(|a| a.port()).unwrap_or(0)
}

#[cfg(test)]
mod tests;

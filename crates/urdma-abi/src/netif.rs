//! The host's network interfaces as a device sees them: the MTU of the
//! interface that holds an address, its IPv6 link-local address and
//! interface index (from `if_addrs` and `/proc/net/if_inet6`).

use std::net::IpAddr;

/// The MTU of the interface that holds `addr` (from sysfs), if any does.
pub fn interface_mtu(addr: IpAddr) -> Option<u32> {
    let itf = if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .find(|i| i.ip() == addr)?;
    // An alias label ("eth0:1") names its interface before the colon.
    let name = itf.name.split(':').next()?;
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?;
    mtu.trim().parse().ok()
}

/// The interface's IPv6 link-local address (fe80::/64) that a device on
/// `addr` also has, as the kernel puts it first in a RoCE netdev's GID
/// table, with the interface's index (its scope): only for an IPv4
/// address, the first IPv4 address of its interface (so that one device
/// of an interface holds it), on an interface that has one. An address
/// on no interface, and loopback (which has none), have none.
pub fn link_local_for(addr: IpAddr) -> Option<(std::net::Ipv6Addr, u32)> {
    let IpAddr::V4(_) = addr else { return None };
    let ifs = if_addrs::get_if_addrs().ok()?;
    let itf = ifs.iter().find(|i| i.ip() == addr)?;
    let first_v4 = ifs
        .iter()
        .find(|i| i.index == itf.index && i.ip().is_ipv4())?;
    if first_v4.ip() != addr {
        return None;
    }
    let index = itf.index?;
    // The interface listing leaves link-local addresses out; the kernel's
    // own list has them.
    let text = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    ipv6_link_local_of(&text, index).map(|a| (a, index))
}

/// The first link-local address of interface `index` in the kernel's
/// list of IPv6 addresses (`/proc/net/if_inet6`: address, index, prefix
/// length, scope, flags and name, in hexadecimal).
fn ipv6_link_local_of(if_inet6: &str, index: u32) -> Option<std::net::Ipv6Addr> {
    if_inet6.lines().find_map(|l| {
        let (a, i) = inet6_line(l)?;
        (i == index && is_link_local(a)).then_some(a)
    })
}

/// Whether `a` is an IPv6 link-local unicast address (fe80::/10).
pub fn is_link_local(a: std::net::Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// The index of the interface holding `addr`, if one does (0 if none):
/// the scope a link-local address is bound in.
pub fn interface_index(addr: IpAddr) -> u32 {
    let listed = if_addrs::get_if_addrs()
        .ok()
        .and_then(|ifs| ifs.into_iter().find(|i| i.ip() == addr))
        .and_then(|i| i.index);
    match (listed, addr) {
        (Some(i), _) => i,
        (None, IpAddr::V6(a)) => std::fs::read_to_string("/proc/net/if_inet6")
            .ok()
            .and_then(|t| ipv6_index_of(&t, a))
            .unwrap_or(0),
        (None, IpAddr::V4(_)) => 0,
    }
}

/// The index of the interface holding `addr` in the kernel's list of
/// IPv6 addresses.
fn ipv6_index_of(if_inet6: &str, addr: std::net::Ipv6Addr) -> Option<u32> {
    if_inet6.lines().find_map(|l| {
        let (a, i) = inet6_line(l)?;
        (a == addr).then_some(i)
    })
}

/// An address and its interface index from a line of `/proc/net/if_inet6`.
fn inet6_line(l: &str) -> Option<(std::net::Ipv6Addr, u32)> {
    let f: Vec<&str> = l.split_whitespace().collect();
    let (hex, idx) = (f.first()?, f.get(1)?);
    if hex.len() != 32 {
        return None;
    }
    let raw = u128::from_str_radix(hex, 16).ok()?;
    Some((raw.into(), u32::from_str_radix(idx, 16).ok()?))
}

/// `addr` without an IPv6 scope or flow information: as a GID names it.
pub fn unscoped(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    match addr {
        std::net::SocketAddr::V6(a) => {
            std::net::SocketAddr::V6(std::net::SocketAddrV6::new(*a.ip(), a.port(), 0, 0))
        }
        a => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_addresses_from_the_kernel_list() {
        let t = "00000000000000000000000000000001 01 80 10 80       lo\n\
                 fd000000000000000000000000000002 02 40 00 80     eth0\n\
                 fe8000000000000000fc00fffe000001 02 40 20 80     eth0\n";
        let ll: std::net::Ipv6Addr = "fe80::fc:ff:fe00:1".parse().unwrap();
        assert_eq!(ipv6_link_local_of(t, 2), Some(ll));
        assert_eq!(ipv6_link_local_of(t, 1), None);
        assert_eq!(ipv6_link_local_of("junk\n", 2), None);
        assert_eq!(ipv6_index_of(t, ll), Some(2));
        assert_eq!(ipv6_index_of(t, "fe80::2".parse().unwrap()), None);
    }
}

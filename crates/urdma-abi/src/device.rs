//! What a device is before it opens: where it lives ([`DeviceConfig`]),
//! the attributes and GID table a device there has. The NIC (embedded or
//! the agent) and every driver derive them alike.

use crate::types::Mtu;
use crate::verbs::{DeviceAttr, Gid, PortAttr};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Where a device lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// Device name (urdma0, ...).
    pub name: String,
    /// IP address the device sends from and receives on.
    pub addr: IpAddr,
    /// UDP port (4791, the RoCEv2 port, unless configured otherwise).
    pub port: u16,
}

impl DeviceConfig {
    /// A device named `urdma0` on `addr`, port 4791.
    pub fn new(addr: IpAddr) -> Self {
        DeviceConfig {
            name: "urdma0".into(),
            addr,
            port: urdma_wire::ROCEV2_UDP_PORT,
        }
    }
}

/// Node GUID derived from the device address (an EUI-64 with the local bit set).
pub fn node_guid(addr: &SocketAddr) -> u64 {
    let octets = Gid::from_ip(addr.ip()).0;
    let mut g = [0u8; 8];
    g[0] = 0x02;
    g[1] = 0x75; // 'u'
    g[2..6].copy_from_slice(&octets[12..16]);
    g[6..8].copy_from_slice(&addr.port().to_be_bytes());
    u64::from_be_bytes(g)
}

/// The attributes a device on `config` has.
pub fn device_attr_for(config: &DeviceConfig) -> DeviceAttr {
    let local = SocketAddr::new(config.addr, config.port);
    let mut attr = DeviceAttr::default();
    attr.node_guid = node_guid(&local);
    attr.sys_image_guid = attr.node_guid;
    // The port MTU follows the interface; an address on no interface
    // (a test's simulated one) keeps the largest.
    if let Some(mtu) = crate::netif::interface_mtu(config.addr).and_then(Mtu::for_netdev) {
        attr.port_mtu = mtu;
    }
    attr
}

/// Entries of port 1's GID table.
pub const GID_TABLE_LEN: u32 = 16;

/// The GID at `index` of port 1's table of a device on `config`, as the
/// device lays it out when it opens (see `urdma::Device::gid_addrs`): its
/// interface's IPv6 link-local address first where it has one, then its
/// address; the other entries are empty.
pub fn gid_for(config: &DeviceConfig, index: usize) -> Option<Gid> {
    let link_local = crate::netif::link_local_for(config.addr).map(|(ll, _)| IpAddr::V6(ll));
    link_local
        .into_iter()
        .chain([config.addr])
        .nth(index)
        .map(Gid::from_ip)
}

/// The attributes of port 1 of a device with the attributes `attr` (its
/// GID table has room for [`GID_TABLE_LEN`] entries, of which [`gid_for`]
/// names those set).
pub fn port_attr_for(attr: &DeviceAttr) -> PortAttr {
    PortAttr {
        state: 4,
        max_mtu: Mtu::Mtu4096,
        active_mtu: attr.port_mtu,
        // A table with room, as a port has: the entries of [`gid_for`],
        // the others empty.
        gid_tbl_len: GID_TABLE_LEN,
        pkey_tbl_len: 1,
        max_msg_sz: crate::verbs::MAX_MSG_SZ,
        phys_state: 5,
        link_layer_ethernet: true,
    }
}

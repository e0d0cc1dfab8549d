//! Devices: an engine bound to an IP address and UDP port.

use super::cq::Cq;
use super::mr::Pd;
use crate::engine::command::AllocPd;
use crate::engine::{Counters, Engine};
use crate::error::Result;
use crate::fabric::udp::UdpDriver;
use crate::types::{AsyncEvent, Mtu};
use crate::verbs::{DeviceAttr, Gid, PortAttr};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

pub(crate) struct DeviceInner {
    pub(crate) config: DeviceConfig,
    pub(crate) driver: Arc<UdpDriver>,
    pub(crate) attr: DeviceAttr,
    next_cqn: AtomicU32,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.driver.stop();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// An open urdma device. Cloning shares it; it closes when the last
/// handle and the last object made from it are gone.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("config", &self.inner.config)
            .finish()
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
    if let Some(mtu) = crate::config::interface_mtu(config.addr).and_then(crate::Mtu::for_netdev) {
        attr.port_mtu = mtu;
    }
    attr
}

impl Device {
    /// Open a device: bind its UDP socket and start its receive thread.
    pub fn open(config: DeviceConfig) -> Result<Device> {
        let local = SocketAddr::new(config.addr, config.port);
        let attr = device_attr_for(&config);
        let engine = Engine::new(local, attr.clone(), None);
        let driver = UdpDriver::bind(&config.name, local, engine)?;
        let thread = driver.start()?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                config,
                driver,
                attr,
                next_cqn: AtomicU32::new(1),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Bound address and UDP port.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.driver.local()
    }

    /// GID at `index` (the table has one entry: the RoCE v2 GID of the address).
    pub fn gid(&self, index: usize) -> Option<Gid> {
        (index == 0).then(|| Gid::from_ip(self.inner.config.addr))
    }

    /// Device attributes and limits.
    pub fn attr(&self) -> &DeviceAttr {
        &self.inner.attr
    }

    /// Attributes of port 1.
    pub fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: 4,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.inner.attr.port_mtu,
            gid_tbl_len: 1,
            pkey_tbl_len: 1,
            max_msg_sz: crate::verbs::MAX_MSG_SZ,
            phys_state: 5,
            link_layer_ethernet: true,
        }
    }

    /// Allocate a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let pdn = self.inner.driver.call(AllocPd {})?;
        Ok(Pd::new(self.clone(), pdn))
    }

    /// Create a completion queue holding up to `cqe` completions.
    pub fn create_cq(&self, cqe: usize) -> Result<Cq> {
        if cqe == 0 || cqe > self.inner.attr.max_cqe as usize {
            return Err(crate::Error::inval(format!(
                "cqe {cqe} outside 1..={}",
                self.inner.attr.max_cqe
            )));
        }
        let cqn = self.inner.next_cqn.fetch_add(1, Ordering::Relaxed);
        Ok(Cq::new(self.clone(), cqn, cqe))
    }

    /// The UDP driver that owns this device's engine. Layers that map
    /// another object model onto the engine (the libibverbs C ABI) drive it
    /// through [`UdpDriver::with_engine`] and [`UdpDriver::inspect`].
    pub fn driver(&self) -> &Arc<UdpDriver> {
        &self.inner.driver
    }

    /// Device counters.
    pub fn counters(&self) -> Counters {
        self.inner.driver.inspect(|e| e.counters())
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: u32) -> Option<Counters> {
        self.inner.driver.inspect(|e| e.qp_counters(qpn))
    }

    /// Next asynchronous event, waiting up to `timeout` (None: forever).
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.inner.driver.next_event(timeout)
    }
}

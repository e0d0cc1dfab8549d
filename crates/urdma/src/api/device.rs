//! Devices: an engine bound to an IP address and UDP port.

pub use crate::device::{
    device_attr_for, gid_for, node_guid, port_attr_for, DeviceConfig, GID_TABLE_LEN,
};
use crate::engine::command::Request;
use crate::engine::Counters;
use crate::error::Result;
use crate::nic::{client::AgentLink, Link};
use crate::types::AsyncEvent;
use crate::verbs::{DeviceAttr, Gid, PortAttr};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct DeviceInner {
    pub(crate) config: DeviceConfig,
    pub(crate) link: Link,
    pub(crate) attr: DeviceAttr,
    pub(crate) next_cqn: AtomicU32,
    /// The NIC inside this process, for an embedded device; it closes
    /// with the device.
    _embedded: Option<Box<dyn std::any::Any + Send + Sync>>,
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

impl Device {
    /// Open a device on the host's shared NIC (the urdma NIC agent,
    /// started if none runs), or inside this process when
    /// `URDMA_NIC=embedded`.
    pub fn open(config: DeviceConfig) -> Result<Device> {
        if crate::nic::embedded_by_default() {
            #[cfg(feature = "embedded")]
            return Self::open_embedded(config);
            #[cfg(not(feature = "embedded"))]
            return Err(crate::Error::NotSupported(
                "URDMA_NIC=embedded: this build has no NIC inside the program \
                 (urdma's `embedded` feature); unset it to use the shared NIC agent"
                    .into(),
            ));
        }
        let attr = device_attr_for(&config);
        let link = AgentLink::open(
            &config.name,
            config.addr,
            config.port,
            attr.port_mtu.bytes(),
        )?;
        Ok(Self::with_link(
            config,
            Link::Agent(Arc::new(link)),
            attr,
            None,
        ))
    }

    /// Open a device whose NIC runs inside this process: bind its UDP
    /// socket and start its receive thread. Only this process can then
    /// use the address.
    #[cfg(feature = "embedded")]
    pub fn open_embedded(config: DeviceConfig) -> Result<Device> {
        Self::embedded(config, true)
    }

    /// An embedded device whose receive thread does not run: only polls
    /// of its CQs take its datagrams (see [`crate::Cq::poll_into`]).
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) fn open_embedded_unthreaded(config: DeviceConfig) -> Result<Device> {
        Self::embedded(config, false)
    }

    #[cfg(feature = "embedded")]
    fn embedded(config: DeviceConfig, receive_thread: bool) -> Result<Device> {
        let nic = urdma_nic::fabric::embedded::EmbeddedNic::open(config, receive_thread)?;
        let link = Link::Embedded(nic.driver().clone());
        Ok(Self::with_link(
            nic.config().clone(),
            link,
            nic.attr().clone(),
            Some(Box::new(nic)),
        ))
    }

    fn with_link(
        config: DeviceConfig,
        link: Link,
        attr: DeviceAttr,
        embedded: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Device {
        Device {
            inner: Arc::new(DeviceInner {
                config,
                link,
                attr,
                next_cqn: AtomicU32::new(1),
                _embedded: embedded,
            }),
        }
    }

    /// Where the device lives.
    pub fn config(&self) -> &DeviceConfig {
        &self.inner.config
    }

    /// True when the device is served by the shared NIC agent.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner.link, Link::Agent(_))
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Bound address and UDP port.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.inner.link {
            Link::Embedded(d) => d.local(),
            Link::Agent(a) => a.local(),
        }
    }

    /// The address (and UDP port) each entry of port 1's GID table
    /// stands for: the device's interface's IPv6 link-local address first
    /// when it has one (a device on an IPv4 address that is its
    /// interface's first), then the device's address, as the kernel lays
    /// out a RoCE netdev's table.
    pub fn gid_addrs(&self) -> Vec<SocketAddr> {
        match &self.inner.link {
            Link::Embedded(d) => d.gids(),
            Link::Agent(a) => a.gids().to_vec(),
        }
    }

    /// GID at `index` (RoCE v2; see [`Device::gid_addrs`]).
    pub fn gid(&self, index: usize) -> Option<Gid> {
        let gids = self.gid_addrs();
        gids.get(index).map(|a| Gid::from_ip(a.ip()))
    }

    /// The GID table index of the device's address of `ip`'s family: the
    /// source GID of traffic to `ip`.
    pub fn gid_index_for(&self, ip: IpAddr) -> Option<usize> {
        self.gid_addrs()
            .iter()
            .position(|a| a.is_ipv4() == ip.is_ipv4())
    }

    /// Device attributes and limits.
    pub fn attr(&self) -> &DeviceAttr {
        &self.inner.attr
    }

    /// Attributes of port 1 (its GID table has [`GID_TABLE_LEN`]
    /// entries, of which [`Device::gid`] 0 is set).
    pub fn port_attr(&self) -> PortAttr {
        port_attr_for(&self.inner.attr)
    }

    /// Have the NIC raise the asynchronous events of QP or SRQ `obj` on
    /// an object of the urdma kernel module (made through uverbs by this
    /// process), where the kernel's async event file reports them. Needs
    /// the shared NIC agent, able to open `/dev/urdma` (root).
    pub fn bind_to_kernel(
        &self,
        obj: urdma_abi::proto::Object,
        kernel: crate::nic::kernel::KernelObject,
    ) -> Result<()> {
        use urdma_abi::proto::Object;
        match (&self.inner.link, obj) {
            (Link::Embedded(_), _) => Err(crate::Error::NotSupported(
                "kernel async events need the shared NIC agent".into(),
            )),
            (Link::Agent(a), Object::Qp(qpn)) => a.bind_qp(qpn, kernel),
            (Link::Agent(a), Object::Srq(srqn)) => a.bind_srq(srqn, kernel),
            (Link::Agent(_), Object::Cq(_)) => {
                Err(crate::Error::inval("a CQ is bound with bind_cq_to_kernel"))
            }
        }
    }

    /// Tell the NIC a CQ is gone (its ring lives on in the CQ's memory
    /// until the last handle drops).
    pub(crate) fn release_cq(&self, cqn: u32) {
        if let Link::Agent(a) = &self.inner.link {
            if let Err(e) = a.destroy_cq(cqn) {
                tracing::debug!(cqn, error = %e, "CQ not destroyed at the NIC");
            }
        }
    }

    /// Run one engine command at the device's NIC (see
    /// [`crate::engine::command`]).
    pub fn call<R: Request>(&self, req: R) -> Result<R::Output> {
        let reply = self.inner.link.execute(req.into())?;
        R::output(reply).ok_or_else(|| crate::Error::inval("the NIC answered another command"))
    }

    /// Create an SRQ and read back the attributes it got.
    pub fn create_srq(
        &self,
        pd: u32,
        attr: crate::engine::SrqAttr,
    ) -> Result<(u32, crate::engine::SrqAttr)> {
        match &self.inner.link {
            Link::Embedded(d) => d.create_srq(pd, attr),
            Link::Agent(a) => a.create_srq(pd, attr),
        }
    }

    /// How the device reaches its NIC, for layers that post lists of work
    /// requests and take asynchronous events (the libibverbs C ABI).
    pub fn link(&self) -> &Link {
        &self.inner.link
    }

    /// The NIC of a device whose NIC runs in this process.
    pub fn local_nic(&self) -> Option<&Arc<dyn crate::nic::LocalNic>> {
        match &self.inner.link {
            Link::Embedded(d) => Some(d),
            Link::Agent(_) => None,
        }
    }

    /// Device counters.
    pub fn counters(&self) -> Counters {
        match &self.inner.link {
            Link::Embedded(d) => d.counters(None).unwrap_or_default(),
            Link::Agent(a) => a.counters(None).ok().flatten().unwrap_or_default(),
        }
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: u32) -> Option<Counters> {
        match &self.inner.link {
            Link::Embedded(d) => d.counters(Some(qpn)),
            Link::Agent(a) => a.counters(Some(qpn)).ok().flatten(),
        }
    }

    /// Carry out a call on the device's communication manager (QP 1); a
    /// connect answers the new connection's ID. See [`crate::cm`].
    pub fn cm(&self, op: crate::cm::CmOp) -> Result<Option<crate::cm::ConnId>> {
        self.inner.link.cm(op)
    }

    /// Next event of this program's CM connections, waiting up to
    /// `timeout` (None: forever).
    pub fn next_cm_event(&self, timeout: Option<Duration>) -> Option<crate::cm::CmEvent> {
        self.inner.link.next_cm_event(timeout)
    }

    /// Next asynchronous event, waiting up to `timeout` (None: forever).
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.inner.link.next_event(timeout)
    }
}

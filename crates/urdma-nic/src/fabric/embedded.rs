//! The NIC of one device inside this process: its engine, its UDP socket
//! on the device's address and the thread that receives for it. The NIC
//! agent opens one per device it serves; a program opens one for an
//! embedded device (`Device::open_embedded`), which reaches it as a
//! [`LocalNic`].

use super::udp::UdpDriver;
use crate::cm::{CmEvent, CmOp, ConnId};
use crate::device::{device_attr_for, DeviceConfig};
use crate::engine::command::{
    Command, CreateSrq, PostRecv, PostSend, PostSrqRecv, QuerySrq, Reply,
};
use crate::engine::{Counters, Engine, RecvRequest, SendRequest, SrqAttr};
use crate::error::Result;
use crate::events::EventNotifier;
use crate::types::AsyncEvent;
use crate::verbs::DeviceAttr;
use std::any::Any;
use std::net::{SocketAddr, SocketAddrV6};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use urdma_abi::local_nic::{LocalNic, PostError};

/// An open device's engine and socket; closing it (dropping it) stops its
/// receive thread and closes the socket.
pub struct EmbeddedNic {
    config: DeviceConfig,
    attr: DeviceAttr,
    driver: Arc<UdpDriver>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for EmbeddedNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedNic")
            .field("config", &self.config)
            .finish()
    }
}

impl EmbeddedNic {
    /// Bind the device's UDP socket on `config`'s address and, when
    /// `receive_thread`, start its receive thread (without it, only polls
    /// of its CQs take its datagrams).
    pub fn open(config: DeviceConfig, receive_thread: bool) -> Result<EmbeddedNic> {
        let local = SocketAddr::new(config.addr, config.port);
        let attr = device_attr_for(&config);
        let engine = Engine::new(local, attr.clone(), None);
        let link_local = urdma_abi::netif::link_local_for(config.addr)
            .map(|(ll, scope)| SocketAddr::V6(SocketAddrV6::new(ll, config.port, 0, scope)));
        // A device on a link-local address itself binds it in its scope.
        let bind_at = match local {
            SocketAddr::V6(a) if urdma_abi::netif::is_link_local(*a.ip()) => {
                SocketAddr::V6(SocketAddrV6::new(
                    *a.ip(),
                    a.port(),
                    0,
                    urdma_abi::netif::interface_index(config.addr),
                ))
            }
            a => a,
        };
        let driver = UdpDriver::bind_with(&config.name, bind_at, link_local, engine)?;
        let thread = receive_thread.then(|| driver.start()).transpose()?;
        Ok(EmbeddedNic {
            config,
            attr,
            driver,
            thread: Mutex::new(thread),
        })
    }

    /// Where the device lives.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The device's attributes and limits.
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// The device's engine and socket.
    pub fn driver(&self) -> &Arc<UdpDriver> {
        &self.driver
    }
}

impl Drop for EmbeddedNic {
    fn drop(&mut self) {
        self.driver.stop();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Post each WR in order with `post`, stopping at the first refused.
fn post_each<T>(
    wrs: Vec<T>,
    mut post: impl FnMut(T) -> Result<()>,
) -> std::result::Result<(), PostError> {
    for (i, wr) in wrs.into_iter().enumerate() {
        post(wr).map_err(|err| (i, err))?;
    }
    Ok(())
}

impl LocalNic for UdpDriver {
    fn execute(&self, cmd: Command) -> Result<Reply> {
        self.with_engine(|e, now| e.execute(now, cmd))
    }

    fn post_sends(&self, qpn: u32, wrs: Vec<SendRequest>) -> std::result::Result<(), PostError> {
        self.with_engine(|e, now| post_each(wrs, |wr| e.call(now, PostSend { qpn, wr })))
    }

    fn post_recvs(
        &self,
        n: u32,
        srq: bool,
        wrs: Vec<RecvRequest>,
    ) -> std::result::Result<(), PostError> {
        self.with_engine(|e, now| {
            post_each(wrs, |wr| match srq {
                true => e.call(now, PostSrqRecv { srqn: n, wr }),
                false => e.call(now, PostRecv { qpn: n, wr }),
            })
        })
    }

    fn create_srq(&self, pd: u32, attr: SrqAttr) -> Result<(u32, SrqAttr)> {
        self.with_engine(|e, now| {
            let n = e.call(now, CreateSrq { pd, attr })?;
            e.call(now, QuerySrq { srqn: n }).map(|q| (n, q))
        })
    }

    fn cm(&self, op: CmOp) -> Result<Option<ConnId>> {
        UdpDriver::cm(self, op)
    }

    fn next_cm_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        UdpDriver::next_cm_event(self, timeout)
    }

    fn set_event_notifier(&self, notifier: Option<EventNotifier>) {
        UdpDriver::set_event_notifier(self, notifier)
    }

    fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        UdpDriver::next_event(self, timeout)
    }

    fn local(&self) -> SocketAddr {
        UdpDriver::local(self)
    }

    fn gids(&self) -> Vec<SocketAddr> {
        UdpDriver::gids(self).to_vec()
    }

    fn counters(&self, qpn: Option<u32>) -> Option<Counters> {
        match qpn {
            None => Some(self.inspect(|e| e.counters())),
            Some(qpn) => self.inspect(|e| e.qp_counters(qpn)),
        }
    }

    fn progress(&self) -> bool {
        UdpDriver::progress(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

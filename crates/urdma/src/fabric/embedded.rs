//! The NIC of one device inside this process: its engine, its UDP socket
//! on the device's address and the thread that receives for it. The NIC
//! agent opens one per device it serves; a program opens one for an
//! embedded device (`Device::open_embedded`).

use super::udp::UdpDriver;
use crate::device::{device_attr_for, DeviceConfig};
use crate::engine::Engine;
use crate::error::Result;
use crate::verbs::DeviceAttr;
use std::net::{SocketAddr, SocketAddrV6};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
        let link_local = crate::config::link_local_for(config.addr)
            .map(|(ll, scope)| SocketAddr::V6(SocketAddrV6::new(ll, config.port, 0, scope)));
        // A device on a link-local address itself binds it in its scope.
        let bind_at = match local {
            SocketAddr::V6(a) if crate::config::is_link_local(*a.ip()) => {
                SocketAddr::V6(SocketAddrV6::new(
                    *a.ip(),
                    a.port(),
                    0,
                    crate::config::interface_index(config.addr),
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

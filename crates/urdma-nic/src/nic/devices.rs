//! The devices the agent serves and where their events go: one
//! [`AgentDevice`] per address, shared by the sessions that opened it,
//! in the agent's table ([`Nic`]); each object's asynchronous events go
//! to the [`EventSink`] of the session that made it.

use super::event_sink::EventSink;
use super::kernel::{KernelNic, KernelObject};
use super::proto::{Event, Object};
use crate::device::DeviceConfig;
use crate::error::Result;
use crate::fabric::embedded::EmbeddedNic;
use crate::fabric::stats::ProcessStats;
use crate::types::{AsyncEvent, AsyncEventKind};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The object an asynchronous event concerns.
fn object_of(ev: &AsyncEvent) -> Object {
    use AsyncEventKind as K;
    match ev.kind {
        K::CqErr => Object::Cq(ev.object),
        K::SrqLimitReached => Object::Srq(ev.object),
        _ => Object::Qp(ev.object),
    }
}

/// A device the agent serves, shared by the sessions that opened it.
pub struct AgentDevice {
    /// The device's NIC: its engine and socket.
    pub nic: EmbeddedNic,
    /// Its engine ([`EmbeddedNic::driver`]).
    pub driver: Arc<crate::fabric::udp::UdpDriver>,
    next_cqn: AtomicU32,
    owners: Mutex<HashMap<Object, Weak<EventSink>>>,
    /// Objects whose events go to the kernel's object instead (with the
    /// owning process).
    kernel_routes: Mutex<HashMap<Object, (KernelObject, u32)>>,
    users: AtomicUsize,
    /// What each session holds, by session id.
    holdings: Mutex<HashMap<u64, ProcessStats>>,
    /// Where the CM's events go.
    pub cm_routes: Mutex<super::cm_routes::CmRoutes>,
    /// The kernel device this NIC serves, if any.
    kernel_chan: Mutex<Option<super::kernel_chan::KernelChannel>>,
    /// The kernel's RC QPs on the channel, whose events go to the kernel.
    kernel_qps: Arc<super::kernel_rc::KernelQps>,
}

impl AgentDevice {
    /// A CQ number unique on the device.
    pub fn reserve_cqn(&self) -> u32 {
        self.next_cqn.fetch_add(1, Ordering::Relaxed)
    }

    /// Route the object's events to `sink`.
    pub fn own(&self, obj: Object, sink: &Arc<EventSink>) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(obj, Arc::downgrade(sink));
    }

    /// Stop routing the object's events.
    pub fn disown(&self, obj: Object) {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj);
        self.kernel_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&obj);
    }

    /// Route the object's events to `kernel`, an object of process `pid`
    /// in the urdma kernel module.
    pub fn route_to_kernel(&self, obj: Object, kernel: KernelObject, pid: u32) {
        self.kernel_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(obj, (kernel, pid));
    }

    /// Record what session `id` holds now (None: it is gone).
    pub fn report(&self, id: u64, h: Option<ProcessStats>) {
        let mut all = self.holdings.lock().unwrap_or_else(|e| e.into_inner());
        let changed = match h {
            Some(h) => all.insert(id, h.clone()).as_ref() != Some(&h),
            None => all.remove(&id).is_some(),
        };
        drop(all);
        if changed {
            self.driver.holders_changed();
        }
    }

    fn processes(&self) -> Vec<ProcessStats> {
        let mut v: Vec<ProcessStats> = self
            .holdings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|p| p.pid);
        v
    }

    fn route(&self, ev: AsyncEvent) {
        if self.kernel_qps.raise(&ev) {
            return;
        }
        let obj = object_of(&ev);
        let kernel = self
            .kernel_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&obj)
            .cloned();
        if let Some((k, pid)) = kernel {
            let raised = KernelNic::shared().and_then(|nic| nic.event(&k, ev.kind as u32, pid));
            if let Err(e) = raised {
                tracing::debug!(?ev, error = %e, "event not raised in the kernel");
            }
            return;
        }
        let sink = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&object_of(&ev))
            .and_then(Weak::upgrade);
        match sink {
            Some(s) => s.send(&Event::Async(ev)),
            None => tracing::debug!(?ev, "event for no session"),
        }
    }
}

/// The agent's devices and sessions.
#[derive(Default)]
pub struct Nic {
    devices: Mutex<HashMap<(IpAddr, u16), Arc<AgentDevice>>>,
    /// Sessions open now.
    pub(super) sessions: AtomicUsize,
    /// How long the agent runs on once idle, as it tells programs.
    pub(super) linger: Option<Duration>,
}

impl Nic {
    /// An agent's table with no device yet; the agent runs on for
    /// `linger` once idle.
    pub fn new(linger: Option<Duration>) -> Nic {
        Nic {
            linger,
            ..Nic::default()
        }
    }

    /// The device on `addr`:`port`, opened on first use.
    pub fn open_device(&self, name: &str, addr: IpAddr, port: u16) -> Result<Arc<AgentDevice>> {
        let mut devs = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devs.get(&(addr, port)) {
            d.users.fetch_add(1, Ordering::AcqRel);
            return Ok(d.clone());
        }
        let nic = EmbeddedNic::open(
            DeviceConfig {
                name: name.to_string(),
                addr,
                port,
            },
            true,
        )?;
        let driver = nic.driver().clone();
        let dev = Arc::new(AgentDevice {
            nic,
            driver,
            next_cqn: AtomicU32::new(1),
            owners: Mutex::new(HashMap::new()),
            kernel_routes: Mutex::new(HashMap::new()),
            users: AtomicUsize::new(1),
            holdings: Mutex::new(HashMap::new()),
            cm_routes: Mutex::new(Default::default()),
            kernel_chan: Mutex::new(None),
            kernel_qps: Arc::default(),
        });
        match super::kernel_chan::KernelChannel::attach(&dev.driver, dev.kernel_qps.clone()) {
            Ok(chan) => *dev.kernel_chan.lock().unwrap_or_else(|e| e.into_inner()) = chan,
            Err(e) => tracing::warn!(name, %addr, error = %e, "kernel device not attached"),
        }
        let holders = Arc::downgrade(&dev);
        dev.driver.set_holders(Some(Box::new(move || {
            holders.upgrade().map(|d| d.processes()).unwrap_or_default()
        })));
        let weak = Arc::downgrade(&dev);
        let driver = Arc::downgrade(&dev.driver);
        dev.driver.set_event_notifier(Some(Box::new(move || {
            let (Some(dev), Some(driver)) = (weak.upgrade(), driver.upgrade()) else {
                return;
            };
            while let Some(ev) = driver.next_event(Some(Duration::ZERO)) {
                dev.route(ev);
            }
        })));
        let weak = Arc::downgrade(&dev);
        let driver = Arc::downgrade(&dev.driver);
        dev.driver.set_cm_notifier(Some(Box::new(move || {
            let (Some(dev), Some(driver)) = (weak.upgrade(), driver.upgrade()) else {
                return;
            };
            let mut routes = dev.cm_routes.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(ev) = driver.next_cm_event(Some(Duration::ZERO)) {
                routes.route(ev);
            }
        })));
        tracing::info!(name, %addr, port, "device opened");
        devs.insert((addr, port), dev.clone());
        Ok(dev)
    }

    /// A session stopped using `dev`: close it when it was the last. The
    /// device closes (its socket too) with the table locked, so that a
    /// session opening the same address meanwhile waits and then binds.
    pub(super) fn release(&self, dev: Arc<AgentDevice>) {
        let mut devs = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if dev.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            let key = (dev.nic.config().addr, dev.nic.config().port);
            if let Some(d) = devs.remove(&key) {
                drop(
                    d.kernel_chan
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take(),
                );
                d.driver.set_event_notifier(None);
                d.driver.set_cm_notifier(None);
                d.driver.set_holders(None);
                tracing::info!(name = d.nic.config().name, "device closed");
            }
            drop(dev);
        }
        drop(devs);
    }
}

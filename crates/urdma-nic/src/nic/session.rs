//! One driver's session with the NIC agent: the objects it made, its
//! requests checked against them, and their teardown when it goes —
//! closed or killed alike.

mod cm;
mod doorbells;
mod objects;
mod queues;

use super::devices::AgentDevice;
use super::event_sink::EventSink;
use super::proto;
use super::proto::{Request, Value, WireError};
use crate::cm::CmOp;
use crate::cq::CqShared;
use crate::engine::command::{AbandonQp, DeallocMw, DeallocPd, DeregMr, DestroySrq};
use crate::error::{Error, Result};
use crate::fabric::stats::ProcessStats;
use crate::mr::MrEntry;
use crate::procmem::ProcessMemory;
use crate::wq::WorkRing;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A session with more send queues than this polls none of them: a scan
/// of each costs a cache miss or two per round, and beyond this many
/// doorbells cost less.
const MAX_POLLED_RINGS: usize = 64;

/// CQ numbers a session may hold reserved before it creates the CQs.
const MAX_RESERVED_CQS: usize = 16;

/// A connected driver.
pub struct Session {
    /// Its number in the agent.
    pub id: u64,
    /// Its process id.
    pub pid: u32,
    /// Its user.
    uid: u32,
    /// The process's command name.
    command: String,
    mem: Arc<ProcessMemory>,
    events: Arc<EventSink>,
    device: Option<Arc<AgentDevice>>,
    pds: HashSet<u32>,
    mrs: HashMap<u32, Arc<MrEntry>>,
    /// Memory windows by index (the upper 24 bits of their R_Keys).
    mws: HashSet<u32>,
    reserved_cqs: HashSet<u32>,
    cqs: HashMap<u32, Arc<CqShared>>,
    qps: HashSet<u32>,
    /// The send queues of its QPs, which the session thread polls while
    /// the driver is busy.
    send_rings: HashMap<u32, Arc<WorkRing>>,
    /// The send queues are polled (see [`Session::handle_doorbells`]).
    polling: bool,
    srqs: HashSet<u32>,
    captures: Vec<Arc<crate::fabric::capture::Capture>>,
    /// How many of each object the last report of holdings counted, and
    /// the services listened on.
    reported: Option<([usize; 5], Vec<u64>)>,
}

fn not_found(what: &str, n: u32) -> Error {
    Error::NotFound(format!("{what} {n}"))
}

impl Session {
    /// A session of process `pid` of user `uid` with its memory and event
    /// socket.
    pub fn new(id: u64, pid: u32, uid: u32, mem: ProcessMemory, events: OwnedFd) -> Self {
        let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        Session {
            id,
            pid,
            uid,
            command,
            mem: Arc::new(mem),
            events: Arc::new(EventSink::new(events)),
            device: None,
            pds: HashSet::default(),
            mrs: HashMap::default(),
            mws: HashSet::default(),
            reserved_cqs: HashSet::default(),
            cqs: HashMap::default(),
            qps: HashSet::default(),
            send_rings: HashMap::default(),
            polling: false,
            srqs: HashSet::default(),
            captures: Vec::new(),
            reported: None,
        }
    }

    fn device(&self) -> Result<&Arc<AgentDevice>> {
        self.device
            .as_ref()
            .ok_or_else(|| Error::inval("no device opened in this session"))
    }

    fn pd(&self, pd: u32) -> Result<u32> {
        self.pds
            .get(&pd)
            .copied()
            .ok_or_else(|| not_found("PD", pd))
    }

    fn qp(&self, qpn: u32) -> Result<u32> {
        self.qps
            .get(&qpn)
            .copied()
            .ok_or_else(|| not_found("QP", qpn))
    }

    fn cq(&self, cqn: u32) -> Result<Arc<CqShared>> {
        self.cqs
            .get(&cqn)
            .cloned()
            .ok_or_else(|| not_found("CQ", cqn))
    }

    /// Send `obj`'s asynchronous events to the kernel's `kernel`.
    fn route_to_kernel(
        &self,
        dev: &super::devices::AgentDevice,
        obj: urdma_abi::proto::Object,
        kernel: super::kernel::KernelObject,
    ) -> Result<Value> {
        super::kernel::KernelNic::shared()
            .map_err(|e| Error::NotSupported(format!("kernel async events: {e}")))?;
        dev.route_to_kernel(obj, kernel, self.pid);
        Ok(Value::Done)
    }

    fn srq(&self, srqn: u32) -> Result<u32> {
        self.srqs
            .get(&srqn)
            .copied()
            .ok_or_else(|| not_found("SRQ", srqn))
    }

    /// Run one request; `fds` are the descriptors that came with it.
    /// Posts answer `None`.
    pub fn handle(
        &mut self,
        nic: &super::devices::Nic,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Option<proto::Response> {
        if req.is_post() {
            self.handle_doorbells(vec![req], false);
            return None;
        }
        let cm = matches!(req, Request::Cm(_));
        let r = self.run(nic, req, fds);
        // Reported when a count changed (every object is made or freed by
        // one request), not after each request of a session with many QPs.
        let counts = [
            self.pds.len(),
            self.mrs.len(),
            self.cqs.len(),
            self.srqs.len(),
            self.qps.len(),
        ];
        if let Some(dev) = &self.device {
            // Only a CM request changes what the session listens on.
            let listening = match &self.reported {
                Some((_, l)) if !cm => l.clone(),
                _ => self.listening(dev),
            };
            if self.reported.as_ref() != Some(&(counts, listening.clone())) {
                self.reported = Some((counts, listening));
                dev.report(self.id, Some(self.holdings()));
            }
        }
        Some(r.map_err(|e| WireError::from(&e)))
    }

    fn run(
        &mut self,
        nic: &super::devices::Nic,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use crate::engine::command::Verb as V;
        use Request as R;
        if let R::OpenDevice { name, addr, port } = req {
            if self.device.is_some() {
                return Err(Error::inval("a session drives one device"));
            }
            let agent_uid = nix::unistd::geteuid().as_raw();
            let name = crate::config::permit_device(&name, addr, port, self.uid, agent_uid)?;
            let dev = nic.open_device(&name, addr, port)?;
            let local = dev.driver.local();
            let gids = dev.driver.gids().to_vec();
            self.device = Some(dev);
            return Ok(Value::Device { local, gids });
        }
        let dev = self.device()?.clone();
        let d = &dev.driver;
        Ok(match req {
            R::Hello { .. } | R::OpenDevice { .. } => {
                return Err(Error::inval("unexpected request"))
            }
            R::RegMr { .. }
            | R::Verb(
                V::AllocPd(_) | V::DeallocPd(_) | V::AllocMw(_) | V::DeallocMw(_) | V::DeregMr(_),
            ) => self.run_memory(&dev, req, fds)?,
            R::ReserveCq
            | R::CreateCq { .. }
            | R::BindCq { .. }
            | R::BindQp { .. }
            | R::BindSrq { .. }
            | R::ResizeCq { .. }
            | R::DestroyCq { .. }
            | R::Verb(V::CqInUse(_)) => self.run_cq(&dev, req, fds)?,
            R::CreateQp { .. } | R::Verb(V::ModifyQp(_) | V::QueryQp(_) | V::DestroyQp(_)) => {
                self.run_qp(&dev, req, fds)?
            }
            R::Verb(V::CreateSrq(_) | V::ModifySrq(_) | V::QuerySrq(_) | V::DestroySrq(_)) => {
                self.run_srq(&dev, req, fds)?
            }
            R::Doorbell { .. } => {
                return Err(Error::inval("doorbells run through handle_doorbells"))
            }
            R::Cm(op) => {
                super::cm_local::answer_for_local_peer(nic, &op, self.uid);
                Value::CmId(self.cm(op)?)
            }
            R::Capture { limit } => {
                // A capture holds every process's traffic on the device.
                let me = nix::unistd::getuid().as_raw();
                if self.uid != me && self.uid != 0 {
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        "capturing a shared NIC's traffic needs root or the NIC agent's user",
                    )));
                }
                let fd = fds
                    .pop()
                    .ok_or_else(|| Error::inval("capture file missing"))?;
                let cap = Arc::new(crate::fabric::capture::Capture::to_file(
                    File::from(fd),
                    limit,
                )?);
                d.attach_capture(cap.clone());
                self.captures.push(cap);
                Value::Done
            }
            R::Counters => {
                Value::Counters(Some(dev.driver.inspect(|e| e.counters()).values().to_vec()))
            }
            R::QpCounters { qpn } => {
                self.qp(qpn)?;
                Value::Counters(
                    dev.driver
                        .inspect(|e| e.qp_counters(qpn))
                        .map(|c| c.values().to_vec()),
                )
            }
        })
    }

    /// Tear down everything the session made, in dependency order: CM
    /// listeners and connections, QPs, SRQs, MRs (their memory is
    /// invalidated at once), PDs, CQs; hands back the device the session
    /// used.
    pub fn close(&mut self) -> Option<Arc<AgentDevice>> {
        let dev = self.device.take()?;
        let d = &dev.driver;
        // The CM stops listening first, so that no request comes in for
        // nobody; then connections end as on a host whose program died:
        // a REJ where a handshake was under way, a DREQ where connected.
        let routes = || dev.cm_routes.lock().unwrap_or_else(|e| e.into_inner());
        let services = routes().services_of(self.id);
        for service_id in services {
            let _ = d.cm(CmOp::Unlisten { service_id });
        }
        let conns = routes().release(self.id);
        for id in conns {
            let _ = d.cm(CmOp::Destroy { id });
        }
        for cap in self.captures.drain(..) {
            d.detach_capture(&cap);
        }
        self.send_rings.clear();
        for qpn in self.qps.drain() {
            let _ = d.call(AbandonQp { qpn });
            dev.disown(urdma_abi::proto::Object::Qp(qpn));
        }
        for srqn in self.srqs.drain() {
            let _ = d.call(DestroySrq { srqn });
            dev.disown(urdma_abi::proto::Object::Srq(srqn));
        }
        // Windows first: a region with windows bound stays registered.
        for index in self.mws.drain() {
            let _ = d.call(DeallocMw { rkey: index << 8 });
        }
        for (key, entry) in self.mrs.drain() {
            entry.mem.invalidate();
            let _ = d.call(DeregMr { key });
        }
        for pd in self.pds.drain() {
            let _ = d.call(DeallocPd { pd });
        }
        for (cqn, cq) in self.cqs.drain() {
            cq.set_notifier(None);
            dev.disown(urdma_abi::proto::Object::Cq(cqn));
        }
        dev.report(self.id, None);
        tracing::debug!(pid = self.pid, "session closed");
        Some(dev)
    }

    /// The CM services the session listens on, in order.
    fn listening(&self, dev: &AgentDevice) -> Vec<u64> {
        dev.cm_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .services_of(self.id)
    }

    /// What the session holds, as `urdma stat` shows it.
    pub fn holdings(&self) -> ProcessStats {
        let mut qps: Vec<u32> = self.qps.iter().copied().collect();
        qps.sort_unstable();
        let cm_listeners = self
            .device
            .as_ref()
            .map(|d| self.listening(d))
            .unwrap_or_default();
        ProcessStats {
            pid: self.pid,
            command: self.command.clone(),
            pds: self.pds.len(),
            mrs: self.mrs.len(),
            cqs: self.cqs.len(),
            srqs: self.srqs.len(),
            qps,
            cm_listeners,
        }
    }
}

//! One driver's session with the NIC agent: the objects it made, its
//! requests checked against them, and their teardown when it goes —
//! closed or killed alike.

use super::agent::AgentDevice;
use super::proto::{Event, Request, Value, WireError};
use super::{channel, proto};
use crate::cm::CmOp;
use crate::cq::{CqShared, Ring};
use crate::engine::command::{
    AbandonQp, AllocMw, AllocPd, CqInUse, CreateQp, CreateSrq, DeallocMw, DeallocPd, DeregMr,
    DestroyQp, DestroySrq, ModifyQp, ModifySrq, QueryQp, QuerySrq, RegMr,
};
use crate::engine::mw;
use crate::engine::rings::QpRings;
use crate::error::{Error, Result};
use crate::fabric::stats::ProcessStats;
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::procmem::ProcessMemory;
use crate::types::QpAttrMask;
use crate::verbs::QpCap;
use crate::wq::{self, WorkRing};
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

/// Where a session's events go.
pub struct EventSink {
    fd: OwnedFd,
}

impl EventSink {
    /// Events to the driver at the other end of `fd`.
    pub fn new(fd: OwnedFd) -> Self {
        // Room for thousands of events of a driver that reads them late.
        channel::grow_send_buffer(&fd, 4 << 20);
        EventSink { fd }
    }

    /// Send an event; one the driver has no room for is dropped and logged.
    pub fn send(&self, ev: &Event) {
        let sent = proto::encode(ev).and_then(|m| channel::try_send(&self.fd, &m));
        if let Err(e) = sent {
            tracing::debug!(error = %e, ?ev, "event not delivered");
        }
    }
}

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
        dev: &super::agent::AgentDevice,
        obj: super::agent::Object,
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
        nic: &super::agent::Nic,
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
        nic: &super::agent::Nic,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use Request as R;
        if let R::OpenDevice { name, addr, port } = req {
            if self.device.is_some() {
                return Err(Error::inval("a session drives one device"));
            }
            let agent_uid = nix::unistd::geteuid().as_raw();
            let name = crate::config::permit_device(&name, addr, port, self.uid, agent_uid)?;
            let dev = nic.open_device(&name, addr, port)?;
            let local = dev.device.local_addr();
            self.device = Some(dev);
            return Ok(Value::Device { local });
        }
        let dev = self.device()?.clone();
        let d = &dev.driver;
        Ok(match req {
            R::Hello { .. } | R::OpenDevice { .. } => {
                return Err(Error::inval("unexpected request"))
            }
            R::AllocPd => {
                let pd = d.call(AllocPd {})?;
                self.pds.insert(pd);
                Value::Number(pd)
            }
            R::DeallocPd { pd } => {
                d.call(DeallocPd { pd: self.pd(pd)? })?;
                self.pds.remove(&pd);
                Value::Done
            }
            R::RegMr {
                pd,
                access,
                iova,
                addr,
                len,
                shared,
                rekey,
            } => {
                if let Some(k) = rekey {
                    if !self.mrs.contains_key(&k) {
                        return Err(not_found("MR", k));
                    }
                }
                let len = usize::try_from(len).map_err(|_| Error::inval("MR too large"))?;
                let mem = if shared {
                    let fd = fds.pop().ok_or_else(|| Error::inval("MR memory missing"))?;
                    MemRegion::in_mapping(crate::shm::SharedMapping::from_fd(fd, len)?)
                } else {
                    MemRegion::in_process(self.mem.clone(), addr, len)
                        .ok_or_else(|| Error::inval("MR wraps the address space"))?
                };
                let entry = d.call(RegMr {
                    pd: self.pd(pd)?,
                    access,
                    iova,
                    mem,
                    rekey,
                })?;
                let key = entry.lkey;
                self.mrs.insert(key, entry);
                Value::Number(key)
            }
            R::AllocMw { pd, kind } => {
                let rkey = d.call(AllocMw {
                    pd: self.pd(pd)?,
                    kind,
                })?;
                self.mws.insert(mw::index_of(rkey));
                Value::Number(rkey)
            }
            R::DeallocMw { rkey } => {
                if !self.mws.contains(&mw::index_of(rkey)) {
                    return Err(not_found("memory window", rkey));
                }
                d.call(DeallocMw { rkey })?;
                self.mws.remove(&mw::index_of(rkey));
                Value::Done
            }
            R::DeregMr { key } => {
                if !self.mrs.contains_key(&key) {
                    return Err(not_found("MR", key));
                }
                d.call(DeregMr { key })?;
                self.mrs.remove(&key);
                Value::Done
            }
            R::ReserveCq => {
                if self.reserved_cqs.len() >= MAX_RESERVED_CQS {
                    return Err(Error::Exhausted("CQ numbers reserved and not used".into()));
                }
                let cqn = dev.reserve_cqn();
                self.reserved_cqs.insert(cqn);
                Value::Number(cqn)
            }
            R::CreateCq { cqn, capacity } => {
                // A ring holds one entry more than its CQ's capacity.
                if capacity < 2 || capacity > dev.device.attr().max_cqe + 1 {
                    return Err(Error::inval("CQ capacity out of range"));
                }
                if !self.reserved_cqs.remove(&cqn) {
                    return Err(not_found("reserved CQ", cqn));
                }
                let fd = fds.pop().ok_or_else(|| Error::inval("CQ ring missing"))?;
                let cq = Arc::new(CqShared::from_fd(cqn, capacity as usize, fd)?);
                let sink = self.events.clone();
                cq.set_notifier(Some(Box::new(move || sink.send(&Event::CqFired(cqn)))));
                dev.own(super::agent::Object::Cq(cqn), &self.events);
                self.cqs.insert(cqn, cq);
                Value::Number(cqn)
            }
            R::BindCq { cqn, kernel } => {
                let cq = self.cq(cqn)?;
                let notify = super::kernel::cq_notifier(kernel.clone(), self.pid)
                    .map_err(|e| Error::NotSupported(format!("kernel completion events: {e}")))?;
                cq.set_notifier(Some(notify));
                dev.route_to_kernel(super::agent::Object::Cq(cqn), kernel, self.pid);
                Value::Done
            }
            R::BindQp { qpn, kernel } => {
                self.qp(qpn)?;
                self.route_to_kernel(&dev, super::agent::Object::Qp(qpn), kernel)?
            }
            R::BindSrq { srqn, kernel } => {
                self.srq(srqn)?;
                self.route_to_kernel(&dev, super::agent::Object::Srq(srqn), kernel)?
            }
            R::ResizeCq { cqn, capacity } => {
                if capacity < 2 || capacity > dev.device.attr().max_cqe + 1 {
                    return Err(Error::inval("CQ capacity out of range"));
                }
                let cq = self.cq(cqn)?;
                let fd = fds.pop().ok_or_else(|| Error::inval("CQ ring missing"))?;
                cq.replace_ring(Ring::from_fd(capacity as usize, fd)?, false)?;
                Value::Done
            }
            R::DestroyCq { cqn } => {
                let cq = self.cq(cqn)?;
                if d.call(CqInUse { cqn })? {
                    return Err(Error::Busy(format!("CQ {cqn} has QPs")));
                }
                cq.set_notifier(None);
                self.cqs.remove(&cqn);
                dev.disown(super::agent::Object::Cq(cqn));
                Value::Done
            }
            R::CreateQp {
                pd,
                qp_type,
                cap,
                sq_sig_all,
                send_cq,
                recv_cq,
                srq,
            } => {
                let (scq, rcq) = (self.cq(send_cq)?, self.cq(recv_cq)?);
                let srq = srq.map(|s| self.srq(s)).transpose()?;
                let expected = if srq.is_some() { 1 } else { 2 };
                if fds.len() != expected {
                    return Err(Error::inval("a QP's work queues are missing"));
                }
                let qpn = d.call(CreateQp {
                    pd: self.pd(pd)?,
                    qp_type,
                    cap,
                    sq_sig_all,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq,
                })?;
                // Mapped once the engine has checked the capacities.
                let rings = map_qp_rings(&cap, fds).and_then(|rings| {
                    let sq = rings.sq.clone();
                    d.with_engine(|e, _| e.attach_rings(qpn, rings))?;
                    Ok(sq)
                });
                match rings {
                    Err(e) => {
                        let _ = d.call(DestroyQp { qpn });
                        return Err(e);
                    }
                    // Polled from the next doorbell batch on.
                    Ok(Some(sq)) => {
                        self.send_rings.insert(qpn, sq);
                        if self.send_rings.len() > MAX_POLLED_RINGS {
                            self.stop_polling();
                        }
                    }
                    Ok(None) => {}
                }
                self.qps.insert(qpn);
                dev.own(super::agent::Object::Qp(qpn), &self.events);
                Value::Number(qpn)
            }
            R::ModifyQp { qpn, attr, mask } => {
                self.qp(qpn)?;
                let mask = QpAttrMask::from_bits(mask)
                    .ok_or_else(|| Error::inval("unknown attribute mask bits"))?;
                let controlled = attr.qkey & crate::engine::requester::CONTROLLED_QKEY != 0;
                if mask.contains(QpAttrMask::QKEY) && controlled && self.uid != 0 {
                    // As Linux asks CAP_NET_RAW: a controlled Q_Key (QP 1's
                    // among them) lets a QP send as the NIC's own.
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        "a controlled Q_Key (high bit set) is reserved to root",
                    )));
                }
                d.call(ModifyQp { qpn, attr, mask })?;
                Value::Done
            }
            R::QueryQp { qpn } => {
                self.qp(qpn)?;
                Value::QpAttr(d.call(QueryQp { qpn })?)
            }
            R::DestroyQp { qpn } => {
                self.qp(qpn)?;
                d.call(DestroyQp { qpn })?;
                self.qps.remove(&qpn);
                self.send_rings.remove(&qpn);
                dev.disown(super::agent::Object::Qp(qpn));
                Value::Done
            }
            R::CqInUse { cqn } => {
                self.cq(cqn)?;
                Value::Flag(d.call(CqInUse { cqn })?)
            }
            R::CreateSrq { pd, attr } => {
                let pd = self.pd(pd)?;
                let fd = only_fd(fds, "an SRQ's work queue")?;
                let (srqn, got) = d.with_engine(|e, now| {
                    let n = e.call(now, CreateSrq { pd, attr })?;
                    e.call(now, QuerySrq { srqn: n }).map(|q| (n, q))
                })?;
                let ring = WorkRing::from_fd(fd, attr.max_wr, wq::recv_slot_len(attr.max_sge));
                let attached = ring
                    .map_err(Error::from)
                    .and_then(|r| d.with_engine(|e, _| e.attach_srq_ring(srqn, Arc::new(r))));
                if let Err(e) = attached {
                    let _ = d.call(DestroySrq { srqn });
                    return Err(e);
                }
                self.srqs.insert(srqn);
                dev.own(super::agent::Object::Srq(srqn), &self.events);
                Value::Srq(srqn, got)
            }
            R::ModifySrq {
                srqn,
                max_wr,
                limit,
            } => {
                let srqn = self.srq(srqn)?;
                let Some(n) = max_wr else {
                    d.call(ModifySrq {
                        srqn,
                        max_wr: None,
                        limit,
                    })?;
                    return Ok(Value::Done);
                };
                // A new size comes with the ring the driver posts to from
                // now on, of the SRQ's own slot size; the engine checks
                // everything (size and limit together) before it changes
                // anything.
                let fd = only_fd(fds, "a resized SRQ's work queue")?;
                if n == 0 || n > dev.device.attr().max_qp_wr {
                    return Err(Error::inval("SRQ size out of range"));
                }
                let sge = d.call(QuerySrq { srqn })?.max_sge;
                let ring = Arc::new(WorkRing::from_fd(fd, n, wq::recv_slot_len(sge))?);
                d.with_engine(|e, _| e.resize_srq(srqn, n, limit, Some(ring)))?;
                Value::Done
            }
            R::QuerySrq { srqn } => Value::SrqAttr(d.call(QuerySrq {
                srqn: self.srq(srqn)?,
            })?),
            R::DestroySrq { srqn } => {
                d.call(DestroySrq {
                    srqn: self.srq(srqn)?,
                })?;
                self.srqs.remove(&srqn);
                dev.disown(super::agent::Object::Srq(srqn));
                Value::Done
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
            R::Counters => Value::Counters(Some(dev.device.counters().values().to_vec())),
            R::QpCounters { qpn } => {
                self.qp(qpn)?;
                Value::Counters(dev.device.qp_counters(qpn).map(|c| c.values().to_vec()))
            }
        })
    }

    /// Take the work that doorbells announce, under one engine lock, so
    /// that the packets it makes leave in one batch. With `poll`, the
    /// session's send queues (unless it has more than [`MAX_POLLED_RINGS`])
    /// are polled from then on: the driver's next posts need no doorbell
    /// until [`Session::stop_polling`].
    pub fn handle_doorbells(&mut self, bells: Vec<Request>, poll: bool) {
        let Some(dev) = self.device.clone() else {
            return;
        };
        let poll = poll && self.send_rings.len() <= MAX_POLLED_RINGS;
        self.polling |= poll;
        dev.driver.with_engine(|e, now| {
            if poll {
                // Rings already polled are left as they are.
                for ring in self.send_rings.values() {
                    ring.start_polling();
                }
            }
            for req in bells {
                let Request::Doorbell { qpn } = req else {
                    continue;
                };
                match self.qps.contains(&qpn) {
                    true => ring_bell(e, now, qpn, self.pid),
                    false => tracing::debug!(pid = self.pid, qpn, "doorbell of an unknown QP"),
                }
            }
        });
    }

    /// Whether the send queues are polled.
    pub fn is_polling(&self) -> bool {
        self.polling
    }

    /// Take what the driver posted to polled send queues since the NIC
    /// last looked, as its doorbells would have announced. True if there
    /// was any.
    pub fn poll_rings(&mut self) -> bool {
        if !self.polling {
            return false;
        }
        let due: Vec<u32> = (self.send_rings.iter())
            .filter(|(_, r)| r.poll_due())
            .map(|(&qpn, _)| qpn)
            .collect();
        if due.is_empty() {
            return false;
        }
        let Some(dev) = self.device.clone() else {
            return false;
        };
        dev.driver.with_engine(|e, now| {
            for qpn in due {
                if self.send_rings.get(&qpn).is_some_and(|r| r.take_bell()) {
                    ring_bell(e, now, qpn, self.pid);
                }
            }
        });
        true
    }

    /// Stop polling the send queues: their doorbells are armed again, and
    /// what was posted meanwhile is taken.
    pub fn stop_polling(&mut self) {
        let Some(dev) = self.device.clone().filter(|_| self.polling) else {
            return;
        };
        self.polling = false;
        dev.driver.with_engine(|e, now| {
            for (&qpn, ring) in &self.send_rings {
                if !ring.stop_polling() {
                    ring_bell(e, now, qpn, self.pid);
                }
            }
        });
    }

    /// A call on the device's CM, for connections and services of this
    /// session and with its own QPs only.
    fn cm(&mut self, op: CmOp) -> Result<Option<u32>> {
        let dev = self.device()?.clone();
        match &op {
            CmOp::Connect(p) => {
                self.qp(p.qpn)?;
            }
            CmOp::Accept { params, .. } => {
                self.qp(params.qpn)?;
            }
            CmOp::AnswerResolve { qpn, .. } => {
                self.qp(*qpn)?;
            }
            _ => {}
        }
        let routes = || dev.cm_routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = op.conn() {
            if routes().owner(id) != Some(self.id) {
                return Err(not_found("connection", id));
            }
        }
        match op {
            CmOp::Listen { service_id } => {
                // Routed first, so that a request right after is not lost.
                if !routes().listen(service_id, self.id, &self.events) {
                    return Err(Error::Busy(format!(
                        "service {service_id:#x} has a listener"
                    )));
                }
                let r = dev.driver.cm(op);
                if r.is_err() {
                    routes().unlisten(service_id, self.id);
                }
                r
            }
            CmOp::Unlisten { service_id } => {
                if routes().listener(service_id) != Some(self.id) {
                    return Err(Error::NotFound(format!("listener {service_id:#x}")));
                }
                // The CM first: a request meanwhile still finds its route.
                let r = dev.driver.cm(op);
                routes().unlisten(service_id, self.id);
                r
            }
            op => {
                let gone = match &op {
                    CmOp::Reject { id, .. }
                    | CmOp::Destroy { id }
                    | CmOp::AnswerResolve { id, .. } => Some(*id),
                    _ => None,
                };
                let r = dev.driver.cm(op)?;
                if let Some(id) = r {
                    routes().claim(id, self.id, &self.events);
                }
                if let Some(id) = gone {
                    routes().forget(id);
                }
                Ok(r)
            }
        }
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
            dev.disown(super::agent::Object::Qp(qpn));
        }
        for srqn in self.srqs.drain() {
            let _ = d.call(DestroySrq { srqn });
            dev.disown(super::agent::Object::Srq(srqn));
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
            dev.disown(super::agent::Object::Cq(cqn));
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

/// The one descriptor a request passed (`what` it is).
fn only_fd(fds: &mut Vec<OwnedFd>, what: &str) -> Result<OwnedFd> {
    match (fds.pop(), fds.is_empty()) {
        (Some(fd), true) => Ok(fd),
        _ => Err(Error::inval(format!("{what} is missing"))),
    }
}

/// Take what a driver (process `pid`) posted to QP `qpn`, as its doorbell
/// asks; a refusal (the QP is gone) is only logged.
fn ring_bell(e: &mut crate::engine::Engine, now: u64, qpn: u32, pid: u32) {
    if let Err(err) = e.doorbell(now, qpn) {
        tracing::debug!(pid, qpn, error = %err, "doorbell refused");
    }
}

/// Map the work queues a driver made for a QP of capacities `cap`: the
/// send queue, then the receive queue unless the QP uses an SRQ.
fn map_qp_rings(cap: &QpCap, fds: &mut Vec<OwnedFd>) -> Result<QpRings> {
    let mut fds = fds.drain(..);
    let sq = fds.next().map(|fd| {
        let len = wq::send_slot_len(cap.max_send_sge, cap.max_inline_data);
        WorkRing::from_fd(fd, cap.max_send_wr, len).map(Arc::new)
    });
    let rq = fds.next().map(|fd| {
        WorkRing::from_fd(fd, cap.max_recv_wr, wq::recv_slot_len(cap.max_recv_sge)).map(Arc::new)
    });
    Ok(QpRings {
        sq: sq.transpose()?,
        rq: rq.transpose()?,
    })
}

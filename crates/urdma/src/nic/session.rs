//! One driver's session with the NIC agent: the objects it made, its
//! requests checked against them, and their teardown when it goes —
//! closed or killed alike.

use super::agent::AgentDevice;
use super::proto::{Event, Request, Value, WireError};
use super::{channel, proto};
use crate::cq::CqShared;
use crate::engine::command::{
    AllocPd, CqInUse, CreateQp, CreateSrq, DeallocPd, DeregMr, DestroyQp, DestroySrq, ModifyQp,
    ModifySrq, PostRecv, PostSend, PostSrqRecv, QueryQp, QuerySrq, RegMr,
};
use crate::error::{Error, Result};
use crate::fabric::stats::ProcessStats;
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::types::{QpAttrMask, WcOpcode, WcStatus, WorkCompletion};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;

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

/// A QP of the session and its CQs.
struct OwnedQp {
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
}

/// A connected driver.
pub struct Session {
    /// Its number in the agent.
    pub id: u64,
    /// Its process id.
    pub pid: u32,
    /// The process's command name.
    command: String,
    mem: Arc<File>,
    events: Arc<EventSink>,
    device: Option<Arc<AgentDevice>>,
    pds: HashSet<u32>,
    mrs: HashMap<u32, Arc<MrEntry>>,
    reserved_cqs: HashSet<u32>,
    cqs: HashMap<u32, Arc<CqShared>>,
    qps: HashMap<u32, OwnedQp>,
    srqs: HashSet<u32>,
    captures: Vec<Arc<crate::fabric::capture::Capture>>,
}

fn not_found(what: &str, n: u32) -> Error {
    Error::NotFound(format!("{what} {n}"))
}

impl Session {
    /// A session of process `pid` with its memory file and event socket.
    pub fn new(id: u64, pid: u32, mem: File, events: OwnedFd) -> Self {
        let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        Session {
            id,
            pid,
            command,
            mem: Arc::new(mem),
            events: Arc::new(EventSink::new(events)),
            device: None,
            pds: HashSet::new(),
            mrs: HashMap::new(),
            reserved_cqs: HashSet::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashSet::new(),
            captures: Vec::new(),
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

    fn qp(&self, qpn: u32) -> Result<&OwnedQp> {
        self.qps.get(&qpn).ok_or_else(|| not_found("QP", qpn))
    }

    fn cq(&self, cqn: u32) -> Result<Arc<CqShared>> {
        self.cqs
            .get(&cqn)
            .cloned()
            .ok_or_else(|| not_found("CQ", cqn))
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
            self.handle_posts(vec![req]);
            return None;
        }
        let r = self.run(nic, req, fds);
        if let Some(dev) = &self.device {
            dev.report(self.id, Some(self.holdings()));
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
            } => {
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
                })?;
                let key = entry.lkey;
                self.mrs.insert(key, entry);
                Value::Number(key)
            }
            R::DeregMr { key } => {
                if !self.mrs.contains_key(&key) {
                    return Err(not_found("MR", key));
                }
                let entry = d.call(DeregMr { key })?;
                entry.mem.invalidate();
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
                if capacity == 0 || capacity > dev.device.attr().max_cqe {
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
                let qpn = d.call(CreateQp {
                    pd: self.pd(pd)?,
                    qp_type,
                    cap,
                    sq_sig_all,
                    send_cq: scq.clone(),
                    recv_cq: rcq.clone(),
                    srq,
                })?;
                self.qps.insert(
                    qpn,
                    OwnedQp {
                        send_cq: scq,
                        recv_cq: rcq,
                    },
                );
                dev.own(super::agent::Object::Qp(qpn), &self.events);
                Value::Number(qpn)
            }
            R::ModifyQp { qpn, attr, mask } => {
                self.qp(qpn)?;
                let mask = QpAttrMask::from_bits(mask)
                    .ok_or_else(|| Error::inval("unknown attribute mask bits"))?;
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
                dev.disown(super::agent::Object::Qp(qpn));
                Value::Done
            }
            R::CqInUse { cqn } => {
                self.cq(cqn)?;
                Value::Flag(d.call(CqInUse { cqn })?)
            }
            R::CreateSrq { pd, attr } => {
                let pd = self.pd(pd)?;
                let (srqn, got) = d.with_engine(|e, now| {
                    let n = e.call(now, CreateSrq { pd, attr })?;
                    e.call(now, QuerySrq { srqn: n }).map(|q| (n, q))
                })?;
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
                d.call(ModifySrq {
                    srqn,
                    max_wr,
                    limit,
                })?;
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
            R::PostSend { .. } | R::PostRecv { .. } | R::PostSrqRecv { .. } => {
                return Err(Error::inval("posts run through handle_posts"))
            }
            R::Capture { limit } => {
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

    /// Run posts (requests that get no answer) under one engine lock, so
    /// that the packets they make leave in one batch.
    pub fn handle_posts(&mut self, posts: Vec<Request>) {
        let Some(dev) = self.device.clone() else {
            return;
        };
        dev.driver.with_engine(|e, now| {
            for req in posts {
                if let Err(err) = self.post(e, now, req) {
                    tracing::debug!(pid = self.pid, error = %err, "post refused");
                }
            }
        });
    }

    fn post(&self, e: &mut crate::engine::Engine, now: u64, req: Request) -> Result<()> {
        match req {
            Request::PostSend { qpn, wrs } => {
                let cq = self.qp(qpn)?.send_cq.clone();
                post_all(
                    &cq,
                    qpn,
                    wrs,
                    |w| (w.wr_id, w.op.wc_opcode()),
                    |wr| e.call(now, PostSend { qpn, wr }),
                )
            }
            Request::PostRecv { qpn, wrs } => {
                let cq = self.qp(qpn)?.recv_cq.clone();
                post_all(
                    &cq,
                    qpn,
                    wrs,
                    |w| (w.wr_id, WcOpcode::Recv),
                    |wr| e.call(now, PostRecv { qpn, wr }),
                )
            }
            Request::PostSrqRecv { srqn, wrs } => {
                let srqn = self.srq(srqn)?;
                for wr in wrs {
                    e.call(now, PostSrqRecv { srqn, wr })?;
                }
                Ok(())
            }
            _ => Err(Error::inval("not a post")),
        }
    }

    /// Tear down everything the session made, in dependency order: QPs,
    /// SRQs, MRs (their memory is invalidated at once), PDs, CQs; hands
    /// back the device the session used.
    pub fn close(&mut self) -> Option<Arc<AgentDevice>> {
        let dev = self.device.take()?;
        let d = &dev.driver;
        for cap in self.captures.drain(..) {
            d.detach_capture(&cap);
        }
        for (qpn, _) in self.qps.drain() {
            let _ = d.call(DestroyQp { qpn });
            dev.disown(super::agent::Object::Qp(qpn));
        }
        for srqn in self.srqs.drain() {
            let _ = d.call(DestroySrq { srqn });
            dev.disown(super::agent::Object::Srq(srqn));
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

    /// What the session holds, as `urdma stat` shows it.
    pub fn holdings(&self) -> ProcessStats {
        let mut qps: Vec<u32> = self.qps.keys().copied().collect();
        qps.sort_unstable();
        ProcessStats {
            pid: self.pid,
            command: self.command.clone(),
            pds: self.pds.len(),
            mrs: self.mrs.len(),
            cqs: self.cqs.len(),
            srqs: self.srqs.len(),
            qps,
        }
    }
}

/// Post WRs in order. One the engine refuses completes with an error
/// status on `cq` and the ones after it are flushed, since the driver
/// that posted them is no longer waiting for an answer.
fn post_all<T>(
    cq: &CqShared,
    qpn: u32,
    wrs: Vec<T>,
    id_op: impl Fn(&T) -> (u64, WcOpcode),
    mut post: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    let mut failed: Option<Error> = None;
    for wr in wrs {
        let (id, op) = id_op(&wr);
        let status = match &failed {
            Some(_) => WcStatus::WrFlushErr,
            None => match post(wr) {
                Ok(()) => continue,
                Err(err) => {
                    let s = post_error_status(&err);
                    failed = Some(err);
                    s
                }
            },
        };
        let _ = cq.push(WorkCompletion::new(id, status, op, qpn), false);
    }
    failed.map_or(Ok(()), Err)
}

/// The completion status of a post the NIC refused after the driver's
/// own checks passed (a full queue, a state the driver did not know of).
fn post_error_status(e: &Error) -> WcStatus {
    match e {
        Error::InvalidArgument(_) => WcStatus::LocLenErr,
        _ => WcStatus::LocQpOpErr,
    }
}

//! The driver side of the NIC channel: a session with the agent, started
//! on demand, that turns engine commands into requests and keeps what a
//! driver must know to check posts itself (QP state and limits).

use super::kernel::KernelObject;
use super::proto::{self, Event, Request, Value};
use super::{channel, spawn};
use crate::cq::{CqShared, Ring};
use crate::engine::command::{AbandonQp, Command, DestroyQp, Reply};
use crate::engine::{
    check_recv_request, check_recv_sges, check_send_request, RecvRequest, SendLimits, SendRequest,
};
use crate::error::{Error, Result};
use crate::fabric::events::EventQueue;
use crate::mr::MrEntry;
use crate::types::{AsyncEvent, AsyncEventKind, QpAttrMask, QpState, QpType};
use crate::verbs::QpCap;
use crate::wq::{self, PushError, WorkRing};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;

/// What the driver knows of one of its QPs, and its work queues.
#[derive(Debug, Clone)]
struct QpMirror {
    qp_type: QpType,
    cap: QpCap,
    state: QpState,
    max_rd_atomic: u8,
    sq: Arc<WorkRing>,
    rq: Option<Arc<WorkRing>>,
}

/// An SRQ's limit and work queue (replaced by a resize while no post
/// writes to it).
#[derive(Debug, Clone)]
struct SrqMirror {
    max_sge: u32,
    ring: Arc<RwLock<Arc<WorkRing>>>,
}

struct Channel {
    fd: OwnedFd,
    buf: channel::MsgBuf,
}

/// A driver's session with the NIC agent for one device.
pub struct AgentLink {
    chan: Mutex<Option<Channel>>,
    local: SocketAddr,
    ud_max: usize,
    qps: Mutex<HashMap<u32, QpMirror>>,
    srqs: Mutex<HashMap<u32, SrqMirror>>,
    mrs: Mutex<HashMap<u32, Arc<MrEntry>>>,
    cqs: Arc<Mutex<HashMap<u32, Weak<CqShared>>>>,
    /// Asynchronous events of the driver's objects.
    pub events: Arc<EventQueue>,
    /// Events of the driver's CM connections.
    pub cm_events: Arc<EventQueue<crate::cm::CmEvent>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set when this driver closes the session (not the agent).
    closing: Arc<AtomicBool>,
}

impl std::fmt::Debug for AgentLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLink")
            .field("local", &self.local)
            .finish()
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        // Closing the session makes the agent close the event socket,
        // which ends the event thread.
        self.closing.store(true, Ordering::SeqCst);
        self.chan.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn io_err(kind: std::io::ErrorKind, msg: impl Into<String>) -> Error {
    Error::Io(std::io::Error::new(kind, msg.into()))
}

impl AgentLink {
    /// Open the device `name` on `addr`:`port` through the NIC agent,
    /// starting the agent if none runs. `ud_max` is the port MTU in bytes.
    pub fn open(name: &str, addr: std::net::IpAddr, port: u16, ud_max: usize) -> Result<Self> {
        match Self::open_once(name, addr, port, ud_max) {
            // An agent that was exiting (idle) as this program connected
            // closes the session at once: the next attempt starts another.
            Err(Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                Self::open_once(name, addr, port, ud_max)
            }
            r => r,
        }
    }

    fn open_once(name: &str, addr: std::net::IpAddr, port: u16, ud_max: usize) -> Result<Self> {
        let fd = spawn::connect_or_start()?;
        let (events_mine, events_theirs) = channel::pair()?;
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")?;
        let hello = proto::encode(&Request::Hello {
            version: proto::VERSION,
            sentinel: crate::procmem::Sentinel::of_this_process(),
        })?;
        if let Err(e) = channel::send(&fd, &hello, &[mem.as_raw_fd(), events_theirs.as_raw_fd()]) {
            // An agent that refused the connection at once left its reason.
            let mut buf = channel::MsgBuf::default();
            if let Ok(true) = channel::try_recv(&fd, &mut buf, &mut Vec::new()) {
                if let Ok(Err(why)) = proto::decode::<proto::Response>(buf.bytes()) {
                    return Err(why.into());
                }
            }
            return Err(e.into());
        }
        drop((mem, events_theirs));
        let mut chan = Channel {
            fd,
            buf: channel::MsgBuf::default(),
        };
        answer(&mut chan)?;
        let local = match ask(
            &mut chan,
            &Request::OpenDevice {
                name: name.to_string(),
                addr,
                port,
            },
            &[],
        )? {
            Value::Device { local } => local,
            v => return Err(unexpected(v)),
        };
        // URDMA_PCAP: this program's capture, written by the NIC.
        if let Some((path, limit)) = crate::fabric::capture::requested() {
            match std::fs::File::create(&path) {
                Ok(f) => {
                    ask(&mut chan, &Request::Capture { limit }, &[f.as_raw_fd()])?;
                }
                Err(e) => tracing::warn!(%path, error = %e, "cannot create the packet capture"),
            }
        }
        let events = Arc::new(EventQueue::default());
        let cm_events = Arc::new(EventQueue::default());
        let cqs: Arc<Mutex<HashMap<u32, Weak<CqShared>>>> = Arc::default();
        let closing = Arc::new(AtomicBool::new(false));
        let thread = {
            let (events, cqs, closing) = (events.clone(), cqs.clone(), closing.clone());
            let cm_events = cm_events.clone();
            std::thread::Builder::new()
                .name("urdma-events".into())
                .spawn(move || {
                    event_loop(events_mine, &events, &cm_events, &cqs);
                    if !closing.load(Ordering::SeqCst) {
                        nic_gone(&events, &cqs);
                    }
                })?
        };
        Ok(AgentLink {
            chan: Mutex::new(Some(chan)),
            local,
            ud_max,
            qps: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
            mrs: Mutex::new(HashMap::new()),
            cqs,
            events,
            cm_events,
            thread: Mutex::new(Some(thread)),
            closing,
        })
    }

    /// Address and UDP port the NIC bound for the device.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    fn request(&self, req: &Request, fds: &[std::os::fd::RawFd]) -> Result<Value> {
        let mut g = self.chan.lock().unwrap_or_else(|e| e.into_inner());
        let chan = g
            .as_mut()
            .ok_or_else(|| io_err(std::io::ErrorKind::NotConnected, "session closed"))?;
        ask(chan, req, fds)
    }

    /// Tell the NIC of new work in an idle QP's rings.
    fn ring_doorbell(&self, qpn: u32) -> Result<()> {
        let msg = proto::encode(&Request::Doorbell { qpn })?;
        let g = self.chan.lock().unwrap_or_else(|e| e.into_inner());
        let chan = g
            .as_ref()
            .ok_or_else(|| io_err(std::io::ErrorKind::NotConnected, "session closed"))?;
        channel::send(&chan.fd, &msg, &[])?;
        Ok(())
    }

    /// Create a CQ of `capacity` completions whose ring the agent fills.
    pub fn create_cq(&self, capacity: usize) -> Result<Arc<CqShared>> {
        let cqn = number(self.request(&Request::ReserveCq, &[])?)?;
        let cq = Arc::new(CqShared::new_shared(cqn, capacity)?);
        let fd = cq
            .fd()
            .ok_or_else(|| Error::inval("CQ ring without a descriptor"))??;
        self.request(
            &Request::CreateCq {
                cqn,
                capacity: capacity as u32,
            },
            &[fd.as_raw_fd()],
        )?;
        self.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cqn, Arc::downgrade(&cq));
        Ok(cq)
    }

    /// Have the NIC raise the CQ's completion events on `kernel`.
    pub fn bind_cq(&self, cqn: u32, kernel: KernelObject) -> Result<()> {
        self.request(&Request::BindCq { cqn, kernel }, &[])?;
        Ok(())
    }

    /// Have the NIC raise the QP's asynchronous events on `kernel`.
    pub fn bind_qp(&self, qpn: u32, kernel: KernelObject) -> Result<()> {
        self.request(&Request::BindQp { qpn, kernel }, &[])?;
        Ok(())
    }

    /// Have the NIC raise the SRQ's asynchronous events on `kernel`.
    pub fn bind_srq(&self, srqn: u32, kernel: KernelObject) -> Result<()> {
        self.request(&Request::BindSrq { srqn, kernel }, &[])?;
        Ok(())
    }

    /// Give `cq` a ring of `capacity` completions: the agent moves the
    /// completions waiting into it, then this process uses it.
    pub fn resize_cq(&self, cq: &CqShared, capacity: usize) -> Result<()> {
        let ring = Ring::new(capacity, true)?;
        let fd = ring
            .fd()
            .ok_or_else(|| Error::inval("CQ ring without a descriptor"))??;
        let _paused = cq.consumer_pause();
        self.request(
            &Request::ResizeCq {
                cqn: cq.cqn,
                capacity: capacity as u32,
            },
            &[fd.as_raw_fd()],
        )?;
        cq.replace_ring(ring, true)
    }

    /// Destroy a CQ no QP uses.
    pub fn destroy_cq(&self, cqn: u32) -> Result<()> {
        self.request(&Request::DestroyCq { cqn }, &[])?;
        self.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&cqn);
        Ok(())
    }

    /// Device counters (or one QP's).
    pub fn counters(&self, qpn: Option<u32>) -> Result<Option<crate::Counters>> {
        let req = match qpn {
            Some(qpn) => Request::QpCounters { qpn },
            None => Request::Counters,
        };
        match self.request(&req, &[])? {
            Value::Counters(v) => Ok(v.map(|v| crate::Counters::from_values(&v))),
            v => Err(unexpected(v)),
        }
    }

    fn mirror(&self, qpn: u32) -> Result<QpMirror> {
        self.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("QP {qpn}")))
    }

    /// Post send WRs: each is checked here as the engine would check it,
    /// then written into the QP's send queue. Ok: all posted; Err((i, e)):
    /// the first `i` were posted, the `i`th refused.
    pub fn post_sends(
        &self,
        qpn: u32,
        wrs: Vec<SendRequest>,
    ) -> std::result::Result<(), (usize, Error)> {
        let q = self.mirror(qpn).map_err(|e| (0, e))?;
        if matches!(q.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err((0, Error::WrongState(q.state)));
        }
        let limits = SendLimits {
            qp_type: q.qp_type,
            cap: q.cap,
            max_rd_atomic: q.max_rd_atomic,
            ud_max: self.ud_max,
        };
        self.post_to(Some(qpn), &q.sq, &wrs, |w| {
            check_send_request(&limits, w).map(|_| ())
        })
    }

    /// Post receive WRs to a QP (`srq` false) or an SRQ.
    pub fn post_recvs(
        &self,
        n: u32,
        srq: bool,
        wrs: Vec<RecvRequest>,
    ) -> std::result::Result<(), (usize, Error)> {
        if srq {
            let s = self
                .srqs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&n)
                .cloned()
                .ok_or_else(|| (0, Error::NotFound(format!("SRQ {n}"))))?;
            // The NIC takes an SRQ's requests when messages need them.
            let ring = s.ring.read().unwrap_or_else(|e| e.into_inner());
            return self.post_to(None, &ring, &wrs, |w| check_recv_sges(w, s.max_sge));
        }
        let q = self.mirror(n).map_err(|e| (0, e))?;
        if q.state == QpState::Reset {
            return Err((0, Error::WrongState(q.state)));
        }
        let rq = q.rq.as_ref().ok_or_else(|| {
            (
                0,
                Error::inval("the QP takes receive requests from its SRQ"),
            )
        })?;
        self.post_to(Some(n), rq, &wrs, |w| check_recv_request(&q.cap, w))
    }

    /// Write the WRs into `ring` up to the first one `check` refuses or the
    /// ring has no room for, then ring QP `qpn`'s doorbell (if any) if the
    /// NIC asked for it. Err((i, e)): the `i`th was refused for `e`.
    fn post_to<T: serde::Serialize>(
        &self,
        qpn: Option<u32>,
        ring: &WorkRing,
        wrs: &[T],
        check: impl Fn(&T) -> Result<()>,
    ) -> std::result::Result<(), (usize, Error)> {
        let mut bell = false;
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            let pushed = check(wr).and_then(|()| {
                ring.push(wr).map_err(|e| match e {
                    PushError::Full => Error::Exhausted(e.to_string()),
                    PushError::TooLarge => Error::inval(e.to_string()),
                })
            });
            match pushed {
                Ok(b) => bell |= b,
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
        }
        if let (true, Some(qpn)) = (bell, qpn) {
            // The requests are posted; a NIC that cannot hear the doorbell
            // is gone, which every CQ of this driver then reports.
            if let Err(e) = self.ring_doorbell(qpn) {
                tracing::warn!(qpn, error = %e, "doorbell not delivered");
            }
        }
        refused.map_or(Ok(()), Err)
    }

    /// Run an engine command at the NIC.
    pub fn execute(&self, cmd: Command) -> Result<Reply> {
        use Command as C;
        Ok(match cmd {
            C::AllocPd(_) => Reply::Number(number(self.request(&Request::AllocPd, &[])?)?),
            C::DeallocPd(c) => done(self.request(&Request::DeallocPd { pd: c.pd }, &[])?)?,
            C::AllocMw(c) => Reply::Number(number(self.request(
                &Request::AllocMw {
                    pd: c.pd,
                    kind: c.kind,
                },
                &[],
            )?)?),
            C::DeallocMw(c) => done(self.request(&Request::DeallocMw { rkey: c.rkey }, &[])?)?,
            C::RegMr(c) => {
                let fd = c.mem.shared_fd().map(|f| f.as_raw_fd());
                let req = Request::RegMr {
                    pd: c.pd,
                    access: c.access,
                    iova: c.iova,
                    addr: c.mem.addr() as u64,
                    len: c.mem.len() as u64,
                    shared: fd.is_some(),
                    rekey: c.rekey,
                };
                let key = number(self.request(&req, fd.as_slice())?)?;
                let entry = Arc::new(MrEntry::new(key, c.pd, c.access, c.iova, c.mem));
                let replaced = self
                    .mrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, entry.clone());
                // A re-registration under the key: the old memory is out
                // of reach at once, as the engine's table does it.
                if let Some(old) = replaced {
                    old.mem.invalidate();
                }
                Reply::Mr(entry)
            }
            C::DeregMr(c) => {
                self.request(&Request::DeregMr { key: c.key }, &[])?;
                let entry = self
                    .mrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c.key)
                    .ok_or_else(|| Error::NotFound(format!("MR {:#x}", c.key)))?;
                Reply::Mr(entry)
            }
            C::CreateQp(c) => {
                let sq = WorkRing::new_shared(
                    c.cap.max_send_wr,
                    wq::send_slot_len(c.cap.max_send_sge, c.cap.max_inline_data),
                )?;
                let rq = match c.srq {
                    Some(_) => None,
                    None => Some(WorkRing::new_shared(
                        c.cap.max_recv_wr,
                        wq::recv_slot_len(c.cap.max_recv_sge),
                    )?),
                };
                let fds: Vec<_> = [sq.fd(), rq.as_ref().and_then(WorkRing::fd)]
                    .into_iter()
                    .flatten()
                    .map(|f| f.as_raw_fd())
                    .collect();
                let req = Request::CreateQp {
                    pd: c.pd,
                    qp_type: c.qp_type,
                    cap: c.cap,
                    sq_sig_all: c.sq_sig_all,
                    send_cq: c.send_cq.cqn,
                    recv_cq: c.recv_cq.cqn,
                    srq: c.srq,
                };
                let qpn = number(self.request(&req, &fds)?)?;
                // The NIC mapped them: the descriptors are no longer needed.
                let mut sq = sq;
                sq.close_fd();
                let rq = rq.map(|mut r| {
                    r.close_fd();
                    r
                });
                let m = QpMirror {
                    qp_type: c.qp_type,
                    cap: c.cap,
                    state: QpState::Reset,
                    max_rd_atomic: 0,
                    sq: Arc::new(sq),
                    rq: rq.map(Arc::new),
                };
                self.qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(qpn, m);
                Reply::Number(qpn)
            }
            C::ModifyQp(c) => {
                let req = Request::ModifyQp {
                    qpn: c.qpn,
                    attr: c.attr,
                    mask: c.mask.bits(),
                };
                let r = self.request(&req, &[]);
                if let Some(m) = self
                    .qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(&c.qpn)
                {
                    if r.is_ok() {
                        if c.mask.contains(QpAttrMask::STATE) {
                            m.state = c.attr.qp_state;
                        }
                        if c.mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
                            m.max_rd_atomic = c.attr.max_rd_atomic;
                        }
                    }
                }
                done(r?)?
            }
            C::QueryQp(c) => match self.request(&Request::QueryQp { qpn: c.qpn }, &[])? {
                Value::QpAttr(a) => Reply::QpAttr(a),
                v => return Err(unexpected(v)),
            },
            // A driver in a program is the owner: it only destroys.
            C::DestroyQp(DestroyQp { qpn }) | C::AbandonQp(AbandonQp { qpn }) => {
                self.request(&Request::DestroyQp { qpn }, &[])?;
                self.qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&qpn);
                Reply::Done(())
            }
            C::CqInUse(c) => match self.request(&Request::CqInUse { cqn: c.cqn }, &[])? {
                Value::Flag(f) => Reply::Flag(f),
                v => return Err(unexpected(v)),
            },
            C::CreateSrq(c) => Reply::Number(self.create_srq(c.pd, c.attr)?.0),
            C::ModifySrq(c) => {
                let req = Request::ModifySrq {
                    srqn: c.srqn,
                    max_wr: c.max_wr,
                    limit: c.limit,
                };
                match c.max_wr {
                    Some(n) => self.resize_srq(c.srqn, n, &req)?,
                    None => done(self.request(&req, &[])?)?,
                }
            }
            C::QuerySrq(c) => match self.request(&Request::QuerySrq { srqn: c.srqn }, &[])? {
                Value::SrqAttr(a) => Reply::SrqAttr(a),
                v => return Err(unexpected(v)),
            },
            C::DestroySrq(c) => {
                self.request(&Request::DestroySrq { srqn: c.srqn }, &[])?;
                self.srqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c.srqn);
                Reply::Done(())
            }
            C::PostSend(c) => {
                self.post_sends(c.qpn, vec![c.wr]).map_err(|(_, e)| e)?;
                Reply::Done(())
            }
            C::PostRecv(c) => {
                self.post_recvs(c.qpn, false, vec![c.wr])
                    .map_err(|(_, e)| e)?;
                Reply::Done(())
            }
            C::PostSrqRecv(c) => {
                self.post_recvs(c.srqn, true, vec![c.wr])
                    .map_err(|(_, e)| e)?;
                Reply::Done(())
            }
        })
    }

    /// Carry out a call on the device's CM.
    pub fn cm(&self, op: crate::cm::CmOp) -> Result<Option<crate::cm::ConnId>> {
        match self.request(&Request::Cm(op), &[])? {
            Value::CmId(id) => Ok(id),
            _ => Err(Error::inval("the NIC answered another request")),
        }
    }

    /// Give SRQ `srqn` a ring of `max_wr` requests with `req` (its
    /// ModifySrq): posts wait meanwhile, then go to the new ring; the NIC
    /// takes what the old one holds first.
    fn resize_srq(&self, srqn: u32, max_wr: u32, req: &Request) -> Result<Reply> {
        let m = self
            .srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("SRQ {srqn}")))?;
        let ring = WorkRing::new_shared(max_wr, wq::recv_slot_len(m.max_sge))?;
        let fd = ring
            .fd()
            .ok_or_else(|| Error::inval("SRQ ring without a descriptor"))?
            .as_raw_fd();
        let mut cur = m.ring.write().unwrap_or_else(|e| e.into_inner());
        let reply = done(self.request(req, &[fd])?)?;
        *cur = Arc::new(ring);
        Ok(reply)
    }

    /// Create an SRQ and read back its attributes.
    pub fn create_srq(
        &self,
        pd: u32,
        attr: crate::engine::SrqAttr,
    ) -> Result<(u32, crate::engine::SrqAttr)> {
        let ring = WorkRing::new_shared(attr.max_wr, wq::recv_slot_len(attr.max_sge))?;
        let fd = ring
            .fd()
            .ok_or_else(|| Error::inval("SRQ ring without a descriptor"))?
            .as_raw_fd();
        match self.request(&Request::CreateSrq { pd, attr }, &[fd])? {
            Value::Srq(n, a) => {
                let m = SrqMirror {
                    max_sge: a.max_sge,
                    ring: Arc::new(RwLock::new(Arc::new(ring))),
                };
                self.srqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(n, m);
                Ok((n, a))
            }
            v => Err(unexpected(v)),
        }
    }
}

fn unexpected(v: Value) -> Error {
    Error::inval(format!("the NIC answered {v:?}"))
}

fn number(v: Value) -> Result<u32> {
    match v {
        Value::Number(n) => Ok(n),
        v => Err(unexpected(v)),
    }
}

fn done(v: Value) -> Result<Reply> {
    match v {
        Value::Done => Ok(Reply::Done(())),
        v => Err(unexpected(v)),
    }
}

/// Send a request and wait for its answer.
fn ask(chan: &mut Channel, req: &Request, fds: &[std::os::fd::RawFd]) -> Result<Value> {
    channel::send(&chan.fd, &proto::encode(req)?, fds)?;
    answer(chan)
}

fn answer(chan: &mut Channel) -> Result<Value> {
    let mut fds = Vec::new();
    if !channel::recv(&chan.fd, &mut chan.buf, &mut fds)? {
        return Err(io_err(
            std::io::ErrorKind::ConnectionAborted,
            "the urdma NIC agent closed the session",
        ));
    }
    let r: proto::Response = proto::decode(chan.buf.bytes())?;
    r.map_err(Error::from)
}

/// The agent ended the session (it exited or was killed): no completion
/// will come. Every CQ reports an error (waiters and completion channels
/// wake) and raises IBV_EVENT_CQ_ERR.
fn nic_gone(events: &EventQueue, cqs: &Mutex<HashMap<u32, Weak<CqShared>>>) {
    tracing::error!("the urdma NIC agent ended the session");
    let cqs: Vec<(u32, Arc<CqShared>)> = cqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|(n, w)| w.upgrade().map(|c| (*n, c)))
        .collect();
    for (cqn, cq) in cqs {
        cq.fail();
        events.push([AsyncEvent {
            kind: AsyncEventKind::CqErr,
            object: cqn,
        }]);
    }
}

/// Deliver the agent's events: CQ notifications to the CQ's notifier,
/// asynchronous events to the queue. Ends when the agent closes the socket.
fn event_loop(
    fd: OwnedFd,
    events: &EventQueue,
    cm_events: &EventQueue<crate::cm::CmEvent>,
    cqs: &Mutex<HashMap<u32, Weak<CqShared>>>,
) {
    let mut buf = channel::MsgBuf::default();
    let mut fds = Vec::new();
    loop {
        match channel::recv(&fd, &mut buf, &mut fds) {
            Ok(true) => {}
            // A message cut short: skip it, the session goes on.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
            Ok(false) | Err(_) => break,
        }
        fds.clear();
        match proto::decode::<Event>(buf.bytes()) {
            Ok(Event::CqFired(cqn)) => {
                let cq = cqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&cqn)
                    .and_then(Weak::upgrade);
                if let Some(cq) = cq {
                    cq.notify_now();
                }
            }
            Ok(Event::Async(ev)) => events.push([ev]),
            Ok(Event::Cm(ev)) => cm_events.push([ev]),
            Err(e) => tracing::debug!(error = %e, "undecodable event"),
        }
    }
}

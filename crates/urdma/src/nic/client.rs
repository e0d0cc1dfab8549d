//! The driver side of the NIC channel: a session with the agent, started
//! on demand, that turns engine commands into requests and keeps what a
//! driver must know to check posts itself (QP state and limits).

mod commands;
mod events;
mod post;

use super::kernel::KernelObject;
use super::proto::{self, Request, Value};
use super::{channel, spawn};
use crate::cq::{CqShared, Ring};
use crate::error::{Error, Result};
use crate::events::EventQueue;
use crate::mr::MrEntry;
use crate::types::{QpState, QpType};
use crate::verbs::QpCap;
use crate::wq::WorkRing;
use events::{event_loop, nic_gone};
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
    gids: Vec<SocketAddr>,
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
        match answer(&mut chan)? {
            Value::Agent(info) => crate::config::check_agent(&info),
            v => return Err(unexpected(v)),
        }
        let (local, gids) = match ask(
            &mut chan,
            &Request::OpenDevice {
                name: name.to_string(),
                addr,
                port,
            },
            &[],
        )? {
            Value::Device { local, gids } => (local, gids),
            v => return Err(unexpected(v)),
        };
        // URDMA_PCAP: this program's capture, written by the NIC.
        if let Some((path, limit)) = crate::config::pcap_requested() {
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
                    crate::sig::block_in_helper_thread();
                    event_loop(events_mine, &events, &cm_events, &cqs);
                    if !closing.load(Ordering::SeqCst) {
                        nic_gone(&events, &cqs);
                    }
                })?
        };
        Ok(AgentLink {
            chan: Mutex::new(Some(chan)),
            local,
            gids,
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

    /// Port 1's GID table the NIC reported: the address of each entry.
    pub fn gids(&self) -> &[SocketAddr] {
        &self.gids
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

    /// Carry out a call on the device's CM.
    pub fn cm(&self, op: crate::cm::CmOp) -> Result<Option<crate::cm::ConnId>> {
        match self.request(&Request::Cm(op), &[])? {
            Value::CmId(id) => Ok(id),
            _ => Err(Error::inval("the NIC answered another request")),
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

//! The NIC agent: the process that is the urdma NIC of a host (of a
//! network namespace). It owns UDP port 4791 of the addresses it serves,
//! runs one engine per address, and serves the drivers of every process
//! through the protocol of [`super::proto`].

use super::acceptor::{self, Acceptor, Hello};
use super::channel;
use super::devices::{AgentDevice, Nic};
use super::proto::{self, Request, Value};
use super::session::Session;
use crate::device::DeviceConfig;
use crate::error::Error;
use crate::procmem::ProcessMemory;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Where to listen.
    pub addr: super::addr::AgentAddr,
    /// Exit after this long with no driver connected (None: never).
    pub linger: Option<Duration>,
    /// Devices to open at start and keep open, so that their CM answers
    /// connection requests before any program uses them.
    pub open: Vec<DeviceConfig>,
    /// Bounds of connections before their Hello, and of sessions per user.
    pub limits: acceptor::Limits,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            addr: super::addr::own(),
            linger: Some(Duration::from_secs(5)),
            open: Vec::new(),
            limits: acceptor::Limits::default(),
        }
    }
}

/// While a session's send queues are polled, its socket is looked at
/// once in this many polling rounds.
const SOCKET_LOOK_ROUNDS: u32 = 8;

/// Posts run together at most.
const MAX_POST_BATCH: usize = 64;

/// Send an answer to the driver.
fn answer(conn: &OwnedFd, a: &proto::Response) -> std::io::Result<()> {
    let sent = proto::encode(a).and_then(|m| channel::send(conn, &m, &[]));
    if let Err(e) = &sent {
        tracing::debug!(error = %e, "session ends: no answer can be sent");
    }
    sent
}

/// Run the agent until it has been idle for `linger`. Fails with
/// `AddrInUse` when another agent already serves this namespace.
pub fn run(opts: &AgentOptions) -> std::io::Result<()> {
    let (listener, _file) = super::addr::listen(&opts.addr)?;
    channel::raise_fd_limit();
    channel::keep_free_memory();
    tracing::info!(addr = %opts.addr, "NIC agent listening");
    let linger = opts.linger;
    let nic = Arc::new(Nic::new(linger));
    // Held for the agent's life (a device no session opened is not a
    // reason to stay: linger still counts sessions only).
    let _held: Vec<Arc<AgentDevice>> = opts
        .open
        .iter()
        .filter_map(|c| match nic.open_device(&c.name, c.addr, c.port) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(name = c.name, addr = %c.addr, error = %e, "device not opened");
                None
            }
        })
        .collect();
    let mut door = Acceptor::new(listener, opts.limits.clone())?;
    let mut idle_since = Some(Instant::now());
    loop {
        let wait = match (opts.linger, idle_since) {
            (Some(l), Some(t)) => {
                let left = l.saturating_sub(t.elapsed());
                if left.is_zero() {
                    tracing::info!("no driver left: the agent exits");
                    return Ok(());
                }
                left.min(Duration::from_millis(500))
            }
            _ => Duration::from_millis(500),
        };
        for hello in door.poll(wait)? {
            start_session(&nic, hello);
        }
        let busy = nic.sessions.load(Ordering::Acquire) > 0 || door.pending() > 0;
        idle_since = match (busy, idle_since) {
            (true, _) => None,
            (false, None) => Some(Instant::now()),
            (false, Some(t)) => Some(t),
        };
    }
}

/// Serve a driver's session on a thread of its own; when no thread can
/// start, refuse it (the agent and the other sessions go on).
fn start_session(nic: &Arc<Nic>, hello: Hello) {
    let name = format!("urdma-session-{}", hello.pid);
    start_session_on(nic, hello, |f| {
        std::thread::Builder::new().name(name).spawn(f).map(drop)
    });
}

/// [`start_session`] on the thread `spawn` starts.
fn start_session_on(
    nic: &Arc<Nic>,
    hello: Hello,
    spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<()>,
) {
    let count = SessionCount::new(nic.clone());
    // The session comes to its thread once the thread runs, so that a
    // thread that cannot start leaves it here to be answered.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Hello>(1);
    let (pid, uid) = (hello.pid, hello.uid);
    let spawned = spawn(Box::new(move || {
        if let Ok(h) = rx.recv() {
            serve(&count.0, h);
        }
        drop(count);
    }));
    match spawned {
        Ok(()) => {
            let _ = tx.send(hello);
        }
        Err(e) => {
            tracing::warn!(pid, uid, error = %e, "no thread for a session: refused");
            acceptor::refuse(
                &hello.conn,
                &Error::Exhausted(format!("the NIC agent cannot start a session now: {e}")),
            );
        }
    }
}

/// One live session in the count the agent lingers on; dropped when the
/// session's thread ends, however it ends.
struct SessionCount(Arc<Nic>);

impl SessionCount {
    fn new(nic: Arc<Nic>) -> Self {
        nic.sessions.fetch_add(1, Ordering::AcqRel);
        SessionCount(nic)
    }
}

impl Drop for SessionCount {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A session that is torn down when dropped, even by a panic in its thread.
struct OpenSession<'a> {
    nic: &'a Nic,
    session: Session,
}

impl Drop for OpenSession<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.session.close() {
            self.nic.release(d);
        }
        // The last session (this one still counts): the NIC is idle, and
        // the packet buffers it kept for the next burst go back too.
        if self.nic.sessions.load(Ordering::Acquire) <= 1 {
            crate::bufpool::release_all();
        }
        channel::release_free_memory();
    }
}

/// Serve one driver until it closes (or dies), then tear its objects down.
fn serve(nic: &Nic, hello: Hello) {
    let Hello {
        conn,
        pid,
        uid,
        mem,
        events,
        sentinel,
        slot: _slot,
    } = hello;
    let mem = std::fs::File::from(mem);
    if let Err(e) = super::memfile::verify(&mem, pid, sentinel.as_ref()) {
        acceptor::refuse(&conn, &Error::Io(e));
        return;
    }
    let mut buf = channel::MsgBuf::default();
    let mut fds = Vec::new();
    let info = crate::config::agent_info(&crate::config::get(), nic.linger);
    if let Ok(m) = proto::encode(&Ok::<Value, proto::WireError>(Value::Agent(info))) {
        if channel::send(&conn, &m, &[]).is_err() {
            return;
        }
    }
    static NEXT_SESSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
    let mut open = OpenSession {
        nic,
        session: Session::new(
            id,
            pid,
            uid,
            ProcessMemory::new(mem, Some(pid), sentinel),
            events,
        ),
    };
    let session = &mut open.session;
    tracing::debug!(pid, "session opened");
    let busy_poll = crate::config::busy_poll();
    let mut last_post = std::time::Instant::now();
    let mut round = 0u32;
    loop {
        fds.clear();
        let got = channel::recv_polling(&conn, &mut buf, &mut fds, || {
            if busy_poll.is_zero() {
                // No window: no clock to read (a system call where the
                // clock source is not the TSC, as in many VMs).
                session.stop_polling();
                return None;
            }
            let now = std::time::Instant::now();
            if session.poll_rings() {
                last_post = now;
            }
            if now < last_post + busy_poll {
                // Posts come through the polled rings: the socket, which
                // costs a system call to look at, only carries the rest.
                round = round.wrapping_add(1);
                return Some(!session.is_polling() || round.is_multiple_of(SOCKET_LOOK_ROUNDS));
            }
            // About to sleep: posts ring doorbells again.
            session.stop_polling();
            None
        });
        match got {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(pid, "session ends: the driver closed its end");
                break;
            }
            Err(e) => {
                tracing::debug!(pid, error = %e, "session ends");
                break;
            }
        }
        let req = match proto::decode::<Request>(buf.bytes()) {
            Ok(req) => req,
            Err(e) => {
                let a: proto::Response = Err(proto::WireError::from(&Error::inval(format!(
                    "undecodable request: {e}"
                ))));
                if answer(&conn, &a).is_err() {
                    break;
                }
                continue;
            }
        };
        if !req.is_post() {
            if let Some(a) = session.handle(nic, req, &mut fds) {
                if answer(&conn, &a).is_err() {
                    break;
                }
            }
            continue;
        }
        // Doorbells already waiting behind this one run with it, under one
        // engine lock; the first other request waits for them.
        let mut posts = vec![req];
        let mut next = None;
        while posts.len() < MAX_POST_BATCH {
            fds.clear();
            match channel::try_recv(&conn, &mut buf, &mut fds) {
                Ok(true) => match proto::decode::<Request>(buf.bytes()) {
                    Ok(r) if r.is_post() => posts.push(r),
                    Ok(r) => {
                        next = Some(r);
                        break;
                    }
                    Err(e) => {
                        let a: proto::Response = Err(proto::WireError::from(&Error::inval(
                            format!("undecodable request: {e}"),
                        )));
                        let _ = answer(&conn, &a);
                        break;
                    }
                },
                _ => break,
            }
        }
        session.handle_doorbells(posts, !busy_poll.is_zero());
        if !busy_poll.is_zero() {
            last_post = std::time::Instant::now();
        }
        if let Some(r) = next {
            if let Some(a) = session.handle(nic, r, &mut fds) {
                if answer(&conn, &a).is_err() {
                    break;
                }
            }
        }
    }
    drop(open);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_session_with_no_thread_is_refused_and_forgotten() {
        let name = format!("urdma-agent-test-{}", std::process::id());
        let l = channel::listen(&name).unwrap();
        let mut door = Acceptor::new(l, acceptor::Limits::default()).unwrap();
        let c = channel::connect(&name).unwrap();
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let (_events, theirs) = channel::pair().unwrap();
        let hello = Request::Hello {
            version: proto::VERSION,
            sentinel: None,
        };
        let m = proto::encode(&hello).unwrap();
        channel::send(&c, &m, &[mem.as_raw_fd(), theirs.as_raw_fd()]).unwrap();
        let hello = (0..50)
            .find_map(|_| door.poll(Duration::from_millis(20)).unwrap().pop())
            .expect("a Hello");
        let uid = hello.uid;
        let nic = Arc::new(Nic::default());
        start_session_on(&nic, hello, |_| Err(std::io::ErrorKind::OutOfMemory.into()));
        assert_eq!(nic.sessions.load(Ordering::Acquire), 0);
        assert_eq!(door.sessions().count(uid), 0);
        let mut buf = channel::MsgBuf::default();
        assert!(channel::recv(&c, &mut buf, &mut Vec::new()).unwrap());
        match proto::decode::<proto::Response>(buf.bytes()).unwrap() {
            Err(proto::WireError::Exhausted(m)) => assert!(m.contains("cannot start"), "{m}"),
            other => panic!("not refused: {other:?}"),
        }
    }
}

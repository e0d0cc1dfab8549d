//! The agent's door: connections between their accept and their Hello.
//!
//! The agent's own thread keeps every such connection, with no thread of
//! its own and no buffer but one small one shared by all, until a Hello
//! makes it a session. A connection silent past [`Limits::hello_deadline`],
//! one beyond the pending limits (in all, and per user), and a user's
//! session beyond [`Limits::max_sessions_per_user`] are answered with an
//! error and closed: no user can make the agent run out of threads or
//! memory for the others.

use super::channel;
use super::proto::{self, Request};
use crate::error::Error;
use crate::procmem::Sentinel;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest Hello taken (one is a few dozen bytes).
const MAX_HELLO: usize = 1024;

/// Connections accepted in one round at most, before the waiting ones
/// are looked at again.
const ACCEPT_ROUND: usize = 256;

/// How often at most the agent logs a warning about refused connections.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The bounds of the door.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time a connection has from its accept to its Hello.
    pub hello_deadline: Duration,
    /// Connections waiting for their Hello, of all users.
    pub max_pending: usize,
    /// Connections waiting for their Hello, of one user.
    pub max_pending_per_user: usize,
    /// Live sessions of one user.
    pub max_sessions_per_user: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hello_deadline: Duration::from_secs(5),
            max_pending: 1024,
            max_pending_per_user: 64,
            max_sessions_per_user: 256,
        }
    }
}

/// The live sessions of each user.
#[derive(Debug, Default)]
pub struct UserSessions(Mutex<HashMap<u32, usize>>);

impl UserSessions {
    /// A slot for one more session of `uid`, unless it has `cap` already.
    pub fn admit(self: &Arc<Self>, uid: u32, cap: usize) -> Option<SessionSlot> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = all.entry(uid).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(SessionSlot {
            sessions: self.clone(),
            uid,
        })
    }

    /// The live sessions of `uid`.
    pub fn count(&self, uid: u32) -> usize {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&uid).copied().unwrap_or(0)
    }
}

/// One session of a user in [`UserSessions`], given back when dropped.
#[derive(Debug)]
pub struct SessionSlot {
    sessions: Arc<UserSessions>,
    uid: u32,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut all = self.sessions.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = all.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.uid);
            }
        }
    }
}

/// A driver's Hello of the right shape: a session to start.
#[derive(Debug)]
pub struct Hello {
    /// The session's command socket.
    pub conn: OwnedFd,
    /// The driver's process.
    pub pid: u32,
    /// The driver's user.
    pub uid: u32,
    /// The descriptor passed as the driver's memory file (not checked yet).
    pub mem: OwnedFd,
    /// The driver's event socket.
    pub events: OwnedFd,
    /// The driver's sentinel.
    pub sentinel: Option<Sentinel>,
    /// The session's place in its user's count.
    pub slot: SessionSlot,
}

struct Pending {
    conn: OwnedFd,
    pid: u32,
    uid: u32,
    deadline: Instant,
}

/// The listener and the connections waiting for their Hello.
pub struct Acceptor {
    listener: OwnedFd,
    me: u32,
    limits: Limits,
    pending: Vec<Pending>,
    sessions: Arc<UserSessions>,
    buf: channel::MsgBuf,
    warned: Option<Instant>,
}

/// Answer `err` to the driver at the other end of `conn`, if its socket
/// has room (never waiting).
pub fn refuse(conn: &OwnedFd, err: &Error) {
    let answer: proto::Response = Err(proto::WireError::from(err));
    if let Ok(m) = proto::encode(&answer) {
        let _ = channel::try_send(conn, &m);
    }
}

impl Acceptor {
    /// Serve `listener` (made nonblocking) within `limits`, for drivers
    /// of this process's user (of every user when it runs as root).
    pub fn new(listener: OwnedFd, limits: Limits) -> std::io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        fcntl(listener.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
        Ok(Acceptor {
            listener,
            me: nix::unistd::getuid().as_raw(),
            limits,
            pending: Vec::new(),
            sessions: Arc::default(),
            buf: channel::MsgBuf::with_limit(MAX_HELLO),
            warned: None,
        })
    }

    /// Connections waiting for their Hello.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The live sessions of each user.
    pub fn sessions(&self) -> &Arc<UserSessions> {
        &self.sessions
    }

    /// Wait up to `wait` for connections and Hellos, and answer the
    /// sessions to start (each holding its user's slot).
    pub fn poll(&mut self, wait: Duration) -> std::io::Result<Vec<Hello>> {
        let now = Instant::now();
        let wait = match self.pending.iter().map(|p| p.deadline).min() {
            Some(d) => wait.min(d.saturating_duration_since(now)),
            None => wait,
        };
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd> = std::iter::once(&self.listener)
                .chain(self.pending.iter().map(|p| &p.conn))
                .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
                .collect();
            let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => return Ok(Vec::new()),
                Err(e) => return Err(std::io::Error::from_raw_os_error(e as i32)),
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        let mut hellos = Vec::new();
        let now = Instant::now();
        let waiting = std::mem::take(&mut self.pending);
        for (p, &readable) in waiting.into_iter().zip(&ready[1..]) {
            if readable {
                if let Some(p) = self.read_hello(p, &mut hellos) {
                    self.pending.push(p);
                }
            } else if now >= p.deadline {
                tracing::debug!(pid = p.pid, uid = p.uid, "no Hello in time: closed");
                refuse(&p.conn, &Error::Timeout);
            } else {
                self.pending.push(p);
            }
        }
        if ready[0] {
            self.accept_round();
        }
        Ok(hellos)
    }

    fn warn(&mut self, msg: &str, uid: u32) {
        if self.warned.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            self.warned = Some(Instant::now());
            tracing::warn!(
                uid,
                "{msg} (further refusals for {WARN_EVERY:?} logged at debug level)"
            );
        } else {
            tracing::debug!(uid, "{msg}");
        }
    }

    fn accept_round(&mut self) {
        for _ in 0..ACCEPT_ROUND {
            match channel::accept(&self.listener) {
                Ok(conn) => self.admit(conn),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors: the listener stays readable, so
                    // wait instead of spinning on it.
                    tracing::warn!(error = %e, "accept failed");
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
        }
    }

    /// Keep a new connection until its Hello, unless a limit refuses it.
    fn admit(&mut self, conn: OwnedFd) {
        let Ok((pid, uid)) = channel::peer(&conn) else {
            return;
        };
        if uid != self.me && self.me != 0 {
            let msg = format!(
                "driver of user {uid} refused by the agent of user {}",
                self.me
            );
            tracing::warn!(pid, "{msg}");
            refuse(
                &conn,
                &Error::Io(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    msg,
                )),
            );
            return;
        }
        let mine = self.pending.iter().filter(|p| p.uid == uid).count();
        let refusal = if self.pending.len() >= self.limits.max_pending {
            Some(format!(
                "{} connections of all users wait for their Hello already",
                self.pending.len()
            ))
        } else if mine >= self.limits.max_pending_per_user {
            Some(format!(
                "{mine} connections of user {uid} wait for their Hello already"
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            let msg = format!("connection refused by the NIC agent: {why}");
            self.warn(&msg, uid);
            refuse(&conn, &Error::Busy(msg));
            return;
        }
        self.pending.push(Pending {
            conn,
            pid,
            uid,
            deadline: Instant::now() + self.limits.hello_deadline,
        });
    }

    /// Read the message of a readable waiting connection: a session to
    /// start (into `hellos`), a refusal, or (answered) the connection to
    /// keep waiting.
    fn read_hello(&mut self, p: Pending, hellos: &mut Vec<Hello>) -> Option<Pending> {
        let mut fds = Vec::new();
        match channel::try_recv(&p.conn, &mut self.buf, &mut fds) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(p),
            Err(e) => {
                tracing::debug!(pid = p.pid, error = %e, "connection ended before its Hello");
                refuse(&p.conn, &Error::Io(e));
                return None;
            }
            Ok(false) => return None,
            Ok(true) => {}
        }
        let sentinel = match proto::decode::<Request>(self.buf.bytes()) {
            Ok(Request::Hello { version, sentinel }) if version == proto::VERSION => {
                if fds.len() != 2 {
                    refuse(
                        &p.conn,
                        &Error::inval("a Hello passes two descriptors: memory and events"),
                    );
                    return None;
                }
                sentinel
            }
            Ok(Request::Hello { version, .. }) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("driver protocol {version}, agent {}", proto::VERSION),
                );
                refuse(&p.conn, &Error::Io(e));
                return None;
            }
            _ => {
                let e = std::io::Error::from(std::io::ErrorKind::InvalidData);
                refuse(&p.conn, &Error::Io(e));
                return None;
            }
        };
        let cap = self.limits.max_sessions_per_user;
        let Some(slot) = self.sessions.admit(p.uid, cap) else {
            let msg = format!(
                "session refused by the NIC agent: user {} has {cap} sessions open, \
                 the most it allows (its --max-sessions-per-user)",
                p.uid
            );
            self.warn(&msg, p.uid);
            refuse(&p.conn, &Error::Exhausted(msg));
            return None;
        };
        let events = fds.pop().expect("two descriptors");
        let mem = fds.pop().expect("two descriptors");
        hellos.push(Hello {
            conn: p.conn,
            pid: p.pid,
            uid: p.uid,
            mem,
            events,
            sentinel,
            slot,
        });
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::WireError;

    fn door(limits: Limits, tag: &str) -> (Acceptor, String) {
        let name = format!("urdma-acceptor-test-{}-{tag}", std::process::id());
        let l = channel::listen(&name).unwrap();
        (Acceptor::new(l, limits).unwrap(), name)
    }

    fn say_hello(conn: &OwnedFd) -> OwnedFd {
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let (mine, theirs) = channel::pair().unwrap();
        let m = proto::encode(&Request::Hello {
            version: proto::VERSION,
            sentinel: None,
        })
        .unwrap();
        channel::send(conn, &m, &[mem.as_raw_fd(), theirs.as_raw_fd()]).unwrap();
        mine
    }

    /// The answer waiting on `conn`, if any (None: closed with none).
    fn answer(conn: &OwnedFd) -> Option<proto::Response> {
        let mut buf = channel::MsgBuf::default();
        match channel::try_recv(conn, &mut buf, &mut Vec::new()) {
            Ok(true) => Some(proto::decode(buf.bytes()).unwrap()),
            _ => None,
        }
    }

    /// Poll for `time`, and at least 8 times however slowly the test is
    /// scheduled, gathering the Hellos.
    fn run(a: &mut Acceptor, time: Duration) -> Vec<Hello> {
        let end = Instant::now() + time;
        let mut all = Vec::new();
        let mut rounds = 0;
        while rounds < 8 || Instant::now() < end {
            all.extend(a.poll(Duration::from_millis(20)).unwrap());
            rounds += 1;
        }
        all
    }

    #[test]
    fn silent_connection_closed_after_deadline() {
        let deadline = Duration::from_millis(300);
        let limits = Limits {
            hello_deadline: deadline,
            ..Limits::default()
        };
        let (mut a, name) = door(limits, "deadline");
        let before = Instant::now();
        let c = channel::connect(&name).unwrap();
        assert!(a.poll(Duration::ZERO).unwrap().is_empty());
        assert_eq!(a.pending(), 1);
        // Closed once the deadline has passed, never before it (however
        // slowly this test is scheduled).
        let bound = Instant::now() + Duration::from_secs(10);
        while a.pending() > 0 && Instant::now() < bound {
            assert!(a.poll(Duration::from_millis(20)).unwrap().is_empty());
        }
        assert_eq!(a.pending(), 0);
        assert!(before.elapsed() >= deadline);
        assert!(matches!(answer(&c), Some(Err(WireError::Timeout))));
        let mut buf = channel::MsgBuf::default();
        assert!(!channel::recv(&c, &mut buf, &mut Vec::new()).unwrap());
    }

    #[test]
    fn pending_connections_bounded_per_user() {
        let limits = Limits {
            max_pending_per_user: 3,
            ..Limits::default()
        };
        let (mut a, name) = door(limits, "pending");
        let conns: Vec<OwnedFd> = (0..5).map(|_| channel::connect(&name).unwrap()).collect();
        run(&mut a, Duration::from_millis(60));
        assert_eq!(a.pending(), 3);
        let refused = conns
            .iter()
            .filter(|c| matches!(answer(c), Some(Err(WireError::Busy(_)))))
            .count();
        assert_eq!(refused, 2);
        // The ones kept still become sessions.
        let _ev: Vec<OwnedFd> = conns[..3].iter().map(say_hello).collect();
        assert_eq!(run(&mut a, Duration::from_millis(60)).len(), 3);
    }

    #[test]
    fn user_cap_refuses_the_next_session() {
        let limits = Limits {
            max_sessions_per_user: 2,
            ..Limits::default()
        };
        let (mut a, name) = door(limits, "cap");
        let uid = nix::unistd::getuid().as_raw();
        let conns: Vec<OwnedFd> = (0..3).map(|_| channel::connect(&name).unwrap()).collect();
        let mut _ev = Vec::new();
        let mut hellos = Vec::new();
        for c in &conns {
            _ev.push(say_hello(c));
            hellos.extend(run(&mut a, Duration::from_millis(40)));
        }
        assert_eq!(hellos.len(), 2);
        assert_eq!(a.sessions().count(uid), 2);
        match answer(&conns[2]) {
            Some(Err(WireError::Exhausted(m))) => assert!(m.contains("2 sessions"), "{m}"),
            other => panic!("session 3 not refused: {other:?}"),
        }
        // A session that ends frees its slot.
        drop(hellos.pop());
        assert_eq!(a.sessions().count(uid), 1);
        let c = channel::connect(&name).unwrap();
        let _e = say_hello(&c);
        assert_eq!(run(&mut a, Duration::from_millis(40)).len(), 1);
    }

    #[test]
    fn malformed_hello_refused() {
        let (mut a, name) = door(Limits::default(), "malformed");
        let c = channel::connect(&name).unwrap();
        channel::send(&c, b"not a hello", &[]).unwrap();
        assert!(run(&mut a, Duration::from_millis(40)).is_empty());
        assert_eq!(a.pending(), 0);
        assert!(matches!(answer(&c), Some(Err(_))));
    }
}

//! The UDP fabric: one socket per device and one receive thread that
//! waits on it (polling for a short window after traffic, then sleeping),
//! feeding datagrams and timer expiries to the engine and sending what the
//! engine produces. Threads that spin on an empty CQ of an embedded
//! device take its datagrams too ([`UdpDriver::progress`]).

pub mod loopback;
mod received;
mod rx_thread;
mod send;

use super::batch::RecvBatch;
use super::stats;
use crate::engine::command::Request;
use crate::engine::dma::whole;
use crate::engine::{Counter, Engine, GsiDatagram};
pub use crate::events::EventNotifier;
use crate::events::EventQueue;
use crate::types::AsyncEvent;
use loopback::{Handed, Inbox, Routed};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use urdma_abi::netif::unscoped;

/// Socket buffer size asked for (the kernel may grant less).
const SOCKET_BUFFER: usize = 16 << 20;
/// Packets of a received batch handled before the ACKs they call for are
/// sent: a quarter of a send window, so a sender whose window one batch
/// fills hears of progress while the rest of the batch is handled.
const ACK_CHUNK: usize = (crate::engine::WINDOW / 4) as usize;

/// A device's engine bound to a UDP socket.
pub struct UdpDriver {
    name: String,
    engine: Mutex<Engine>,
    /// Taken before the engine lock is released and held while datagrams
    /// drained from the engine are sent, so that batches leave in the
    /// order the engine produced them while the engine is already free.
    send_order: Mutex<()>,
    socket: UdpSocket,
    local: SocketAddr,
    /// The socket on the device's address of the other family (its
    /// interface's link-local IPv6 address), if it has one.
    second: Option<UdpSocket>,
    /// That address (without its scope: as peers' GIDs name it).
    second_local: Option<SocketAddr>,
    /// Port 1's GID table: the address each entry stands for.
    gids: Vec<SocketAddr>,
    epoch: Instant,
    shutdown: AtomicBool,
    /// The receive thread's sleep and what wakes it.
    wake: Wake,
    events: EventQueue,
    cm_events: EventQueue<crate::cm::CmEvent>,
    /// Where the device's traffic is captured.
    captures: super::capture::Captures,
    /// Who holds what on the device (the shared NIC's sessions).
    holders: Mutex<Option<Holders>>,
    /// The holders changed since the counters were last published.
    holders_changed: AtomicBool,
    /// Where datagrams for the kernel's QP 1 go.
    kernel_gsi_sink: Mutex<Option<GsiSink>>,
    /// Datagrams from devices of this process (internal loopback).
    inbox: Inbox,
    /// This driver, for handing itself to the loopback path.
    me: std::sync::Weak<UdpDriver>,
    /// The receive buffers, held by whichever thread takes datagrams from
    /// the socket (the receive thread, or a program's thread polling an
    /// empty CQ, see [`UdpDriver::progress`]) until the engine has
    /// handled them, so that they are handled in the order they came.
    rx: Mutex<RecvBatch>,
    /// Engine time (ns) a polling thread last took datagrams: traffic the
    /// receive thread keeps busy-polling after, as after its own.
    polled_rx: AtomicU64,
    /// Batches of datagrams polling threads took.
    polled_batches: AtomicU64,
}

/// The receive thread's sleep, and what wakes it.
struct Wake {
    /// Deadline (ns) the receive thread sleeps until; u64::MAX = no
    /// deadline, 0 = awake.
    sleeping_until: AtomicU64,
    /// Deadline (ns) the receive thread's own sleep ends at (its wait's
    /// timeout; u64::MAX = none). A timer set nearer than that by another
    /// thread can be taken back once its deadline is gone.
    own_wake: AtomicU64,
    /// Times the receive thread slept in the kernel and woke.
    rx_wakeups: AtomicU64,
    /// The receive thread sleeps in the kernel: a datagram put in the
    /// inbox must wake it.
    parked: AtomicBool,
    /// Wakes the receive thread, now or at a deadline.
    alarm: super::alarm::Alarm,
    /// Held while the alarm's timer is set (see `arm_alarm`).
    arming: Mutex<()>,
}

impl Drop for UdpDriver {
    fn drop(&mut self) {
        loopback::detach(self.local, self);
        if let Some(a) = self.second_local {
            loopback::detach(a, self);
        }
    }
}

/// Takes datagrams for the kernel's QP 1 (see [`UdpDriver::set_kernel_gsi_sink`]).
pub type GsiSink = Box<dyn Fn(Vec<GsiDatagram>) + Send + Sync>;

/// Reports, for the published counters, what each process holds.
pub type Holders = Box<dyn Fn() -> Vec<stats::ProcessStats> + Send + Sync>;

fn make_socket(addr: SocketAddr) -> std::io::Result<(UdpSocket, bool)> {
    use super::batch::set_int_option;
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::AsRawFd;
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        // An address still in duplicate address detection (just after its
        // interface came up) can be bound; it sends once detection ends.
        let _ = set_int_option(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_FREEBIND, 1);
    }
    // Buffers large enough for a full send window of 4 KiB packets; as
    // root the rmem/wmem limits can be exceeded.
    let size = SOCKET_BUFFER as libc::c_int;
    if set_int_option(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    }
    if set_int_option(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size).is_err() {
        let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    }
    if addr.is_ipv4() {
        // DF set and IP ID 0 on an unconnected socket: the IPv4 header
        // fields that the ICRC covers are then known to both ends.
        set_int_option(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
    }
    s.bind(&addr.into())?;
    // Runs of datagrams arrive as one buffer (cut apart on receipt).
    if !super::batch::enable_gro(s.as_raw_fd()) {
        tracing::debug!("UDP GRO not available");
    }
    let ecn = crate::config::ecn() && super::batch::enable_ecn(s.as_raw_fd(), addr.is_ipv6());
    if crate::config::ecn() && !ecn {
        tracing::debug!("ECN marks not available");
    }
    Ok((s.into(), ecn))
}

/// Sets the receive thread's timer for a deadline (engine time) when
/// dropped: at the end of a flush, or as it unwinds.
struct TimerOnDrop<'a>(&'a UdpDriver, Option<u64>);

impl Drop for TimerOnDrop<'_> {
    fn drop(&mut self) {
        self.0.arm_alarm(self.1);
    }
}

impl UdpDriver {
    /// Bind the device socket at `local` and wrap `engine`.
    pub fn bind(name: &str, local: SocketAddr, engine: Engine) -> std::io::Result<Arc<Self>> {
        Self::bind_with(name, local, None, engine)
    }

    /// Bind the device socket at `local`, and at `link_local` (the IPv6
    /// link-local address of its interface, with its scope, on the same
    /// port) if given and it can be bound, and wrap `engine`. The GID
    /// table is then `[link_local, local]` (as the kernel orders a RoCE
    /// netdev's), else `[local]`.
    pub fn bind_with(
        name: &str,
        local: SocketAddr,
        link_local: Option<SocketAddr>,
        mut engine: Engine,
    ) -> std::io::Result<Arc<Self>> {
        engine.set_internal_peer_test(std::sync::Arc::new(|peer| loopback::lookup(peer).is_some()));
        let (socket, ecn) = make_socket(local)?;
        // The policy: the configuration's, with ECN only if the socket
        // reports marks, and a device window no larger than the receive
        // buffer the kernel granted (without CAP_NET_ADMIN, at most
        // net.core.rmem_max) holds.
        let mut policy = crate::engine::Policy {
            selective: crate::config::selective(),
            ecn,
            ..engine.policy()
        };
        if let Ok(granted) = socket2::SockRef::from(&socket).recv_buffer_size() {
            let window = crate::engine::device_window::for_receive_buffer(granted);
            if window < crate::engine::device_window::DEVICE_WINDOW {
                tracing::debug!(granted, window, "receive buffer bounds the device window");
            }
            policy.device_window = window;
        }
        engine.set_policy(policy);
        let local = unscoped(socket.local_addr()?);
        let second = link_local.and_then(|ll| {
            let ll = SocketAddr::new(ll.ip(), local.port()).set_scope(ll);
            match make_socket(ll) {
                Ok((s, _)) => Some(s),
                Err(e) => {
                    tracing::warn!(name, addr = %ll, error = %e, "link-local GID left out");
                    None
                }
            }
        });
        let second_local = second
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map(unscoped);
        let gids: Vec<SocketAddr> = second_local.into_iter().chain([local]).collect();
        engine.set_gids(gids.clone());
        let alarm = super::alarm::Alarm::new()?;
        let driver = Arc::new_cyclic(|me| UdpDriver {
            name: name.to_string(),
            engine: Mutex::new(engine),
            send_order: Mutex::new(()),
            socket,
            local,
            second,
            second_local,
            gids,
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            wake: Wake {
                sleeping_until: AtomicU64::new(u64::MAX),
                own_wake: AtomicU64::new(u64::MAX),
                rx_wakeups: AtomicU64::new(0),
                parked: AtomicBool::new(false),
                alarm,
                arming: Mutex::new(()),
            },
            events: EventQueue::default(),
            cm_events: EventQueue::default(),
            captures: Default::default(),
            holders: Mutex::new(None),
            holders_changed: AtomicBool::new(false),
            kernel_gsi_sink: Mutex::new(None),
            inbox: Inbox::default(),
            me: me.clone(),
            rx: Mutex::new(RecvBatch::new()),
            polled_rx: AtomicU64::new(0),
            polled_batches: AtomicU64::new(0),
        });
        loopback::attach(&driver);
        Ok(driver)
    }

    /// The bound address.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// Port 1's GID table: the address (and port) each entry stands for.
    pub fn gids(&self) -> &[SocketAddr] {
        &self.gids
    }

    /// The device's address that sends to (and hears from) `peer`: the
    /// one of its family.
    pub fn local_for(&self, peer: SocketAddr) -> SocketAddr {
        match self.second_local {
            Some(s) if self.local.is_ipv4() != peer.is_ipv4() => s,
            _ => self.local,
        }
    }

    /// The socket that sends to `peer` (that of its family).
    pub(super) fn socket_for(&self, peer: SocketAddr) -> &UdpSocket {
        match &self.second {
            Some(s) if self.local.is_ipv4() != peer.is_ipv4() => s,
            _ => &self.socket,
        }
    }

    /// Engine time now, in ns.
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the engine, then send its output and adjust the timer.
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine, u64) -> R) -> R {
        let mut eng = self.lock();
        let now = self.now();
        let r = f(&mut eng, now);
        self.flush(eng, now);
        r
    }

    /// Run one engine command (see [`crate::engine::command`]), then send
    /// its output.
    pub fn call<R: Request>(&self, req: R) -> crate::Result<R::Output> {
        self.with_engine(|e, now| e.call(now, req))
    }

    /// Read-only access to the engine.
    pub fn inspect<R>(&self, f: impl FnOnce(&Engine) -> R) -> R {
        f(&self.lock())
    }

    /// Install (or remove) where datagrams for the kernel's QP 1 go (see
    /// [`crate::nic::kernel_chan`]). It runs with the engine unlocked.
    pub fn set_kernel_gsi_sink(&self, sink: Option<GsiSink>) {
        *self
            .kernel_gsi_sink
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = sink;
    }

    /// Install the report of what each process holds on the device.
    pub fn set_holders(&self, h: Option<Holders>) {
        *self.holders.lock().unwrap_or_else(|e| e.into_inner()) = h;
    }

    /// What each process holds changed: publish the counters soon.
    pub fn holders_changed(&self) {
        self.holders_changed.store(true, Ordering::Release);
        self.wake();
    }

    fn snapshot(&self, eng: &Engine) -> stats::DeviceStats {
        let s = stats::snapshot(&self.name, eng);
        match self
            .holders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(h) => s.with_processes(h()),
            None => s,
        }
    }

    /// Capture this device's traffic into `cap` too, until detached.
    pub fn attach_capture(&self, cap: Arc<super::capture::Capture>) {
        self.captures.attach(cap);
    }

    /// Stop capturing into `cap` (flushing it).
    pub fn detach_capture(&self, cap: &Arc<super::capture::Capture>) {
        self.captures.detach(cap);
    }

    /// Handle what the inbox holds on this thread, unless another thread
    /// drives the engine now. Returns false when it could not.
    pub(crate) fn drain_inbox_here(&self) -> bool {
        if self.is_stopped() {
            return true;
        }
        let eng = match self.engine.try_lock() {
            Ok(e) => e,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let mut eng = eng;
        let internal = self.inbox.take(Vec::new());
        if internal.is_empty() {
            return true;
        }
        let now = self.now();
        self.handle_internal(&mut eng, now, &internal);
        self.flush(eng, now);
        crate::bufpool::give_all(internal.into_iter().map(|(_, d)| d.data));
        true
    }

    /// Record (when capturing) and handle datagrams of the inbox.
    fn handle_internal(&self, eng: &mut Engine, now: u64, internal: &[(SocketAddr, Handed)]) {
        self.captures.each(|cap| {
            for (src, d) in internal {
                if let Some(whole) = whole(&d.data, d.source.as_ref()) {
                    cap.record_internal(*src, self.local, &whole);
                }
            }
            cap.flush();
        });
        eng.handle_internal_batch(
            now,
            internal.iter().map(|(s, d)| crate::engine::dma::Delivered {
                src: *s,
                data: &d.data,
                source: d.source.as_ref(),
                sink: d.sink.as_ref(),
            }),
        );
    }

    /// Datagrams reached the inbox while this thread drove the engine
    /// (another thread could not take the engine for them): handle them
    /// now.
    fn take_own_inbox(&self) {
        if self.inbox.is_pending() {
            if let Some(me) = self.me.upgrade() {
                loopback::run_inline(me);
            }
        }
    }

    /// Wake the receive thread if it sleeps in the kernel while datagrams
    /// wait in its inbox.
    pub(crate) fn wake_for_inbox(&self) {
        if self.inbox.is_pending() && self.wake.parked.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Wake the receive thread.
    fn wake(&self) {
        self.wake.alarm.wake();
    }

    /// Install (or remove) a callback run each time new asynchronous
    /// events were queued, so a consumer can wake a file descriptor instead
    /// of blocking in [`UdpDriver::next_event`]. It runs on the thread that
    /// drove the engine, with the engine locked: it must not call back into
    /// the engine, only take the events with `next_event(Some(Duration::ZERO))`
    /// and hand them on. Removing it waits for a running call to finish.
    pub fn set_event_notifier(&self, n: Option<EventNotifier>) {
        self.events.set_notifier(n);
    }

    /// Carry out a call on the device's CM.
    pub fn cm(&self, op: crate::cm::CmOp) -> crate::Result<Option<crate::cm::ConnId>> {
        self.with_engine(|e, now| e.cm_call(now, |cm| cm.apply(now, op)))
    }

    /// Next CM event, waiting up to `timeout` (None: forever).
    pub fn next_cm_event(&self, timeout: Option<Duration>) -> Option<crate::cm::CmEvent> {
        self.cm_events.next(timeout)
    }

    /// Install (or remove) a callback run each time CM events were queued
    /// (as [`UdpDriver::set_event_notifier`]).
    pub fn set_cm_notifier(&self, n: Option<EventNotifier>) {
        self.cm_events.set_notifier(n);
    }

    /// Next async event, waiting up to `timeout` (None: forever).
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.events.next(timeout)
    }
}

/// Giving an address the IPv6 scope of another.
trait SetScope {
    fn set_scope(self, from: SocketAddr) -> SocketAddr;
}

impl SetScope for SocketAddr {
    fn set_scope(self, from: SocketAddr) -> SocketAddr {
        match (self, from) {
            (SocketAddr::V6(a), SocketAddr::V6(f)) => SocketAddr::V6(std::net::SocketAddrV6::new(
                *a.ip(),
                a.port(),
                0,
                f.scope_id(),
            )),
            (a, _) => a,
        }
    }
}

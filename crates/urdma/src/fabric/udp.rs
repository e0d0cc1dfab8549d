//! The UDP fabric: one socket per device and one receive thread that
//! waits on it (polling for a short window after traffic, then sleeping),
//! feeding datagrams and timer expiries to the engine and sending what the
//! engine produces. Threads that spin on an empty CQ of an embedded
//! device take its datagrams too ([`UdpDriver::progress`]).

#[cfg(test)]
mod progress_tests;
mod received;

use super::batch::RecvBatch;
pub use super::events::EventNotifier;
use super::events::EventQueue;
use super::loopback::{Handed, Inbox, Routed};
use super::stats;
use crate::engine::command::Request;
use crate::engine::dma::whole;
use crate::engine::{Counter, Engine, GsiDatagram};
use crate::types::AsyncEvent;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Socket buffer size asked for (the kernel may grant less).
const SOCKET_BUFFER: usize = 16 << 20;
/// Packets of a received batch handled before the ACKs they call for are
/// sent: a quarter of a send window, so a sender whose window one batch
/// fills hears of progress while the rest of the batch is handled.
const ACK_CHUNK: usize = (crate::engine::requester::WINDOW / 4) as usize;

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
    epoch: Instant,
    shutdown: AtomicBool,
    /// Deadline (ns) the receive thread sleeps until; u64::MAX = no
    /// deadline, 0 = awake.
    sleeping_until: AtomicU64,
    /// Deadline (ns) the receive thread's own sleep ends at (its wait's
    /// timeout; u64::MAX = none). A timer set nearer than that by another
    /// thread can be taken back once its deadline is gone.
    own_wake: AtomicU64,
    /// Times the receive thread slept in the kernel and woke.
    rx_wakeups: AtomicU64,
    events: EventQueue,
    cm_events: EventQueue<crate::cm::CmEvent>,
    /// Captures attached besides the process's own (drivers of the shared NIC).
    captures: Mutex<Vec<Arc<super::capture::Capture>>>,
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
    /// The receive thread sleeps in the kernel: a datagram put in the
    /// inbox must wake it.
    parked: AtomicBool,
    /// Wakes the receive thread, now or at a deadline.
    alarm: super::alarm::Alarm,
    /// Held while the alarm's timer is set (see `arm_alarm`).
    arming: Mutex<()>,
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

impl Drop for UdpDriver {
    fn drop(&mut self) {
        super::loopback::detach(self.local, self);
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
    pub fn bind(name: &str, local: SocketAddr, mut engine: Engine) -> std::io::Result<Arc<Self>> {
        engine.set_selective(crate::config::selective());
        engine.set_internal_peer_test(std::sync::Arc::new(|peer| {
            super::loopback::lookup(peer).is_some()
        }));
        let (socket, ecn) = make_socket(local)?;
        engine.set_ecn(ecn);
        // The kernel may have granted less than asked (without
        // CAP_NET_ADMIN, at most net.core.rmem_max).
        if let Ok(granted) = socket2::SockRef::from(&socket).recv_buffer_size() {
            let window = crate::engine::device_window::for_receive_buffer(granted);
            if window < crate::engine::device_window::DEVICE_WINDOW {
                tracing::debug!(granted, window, "receive buffer bounds the device window");
            }
            engine.set_device_window(window);
        }
        let local = socket.local_addr()?;
        let alarm = super::alarm::Alarm::new()?;
        let driver = Arc::new_cyclic(|me| UdpDriver {
            name: name.to_string(),
            engine: Mutex::new(engine),
            send_order: Mutex::new(()),
            socket,
            local,
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            sleeping_until: AtomicU64::new(u64::MAX),
            own_wake: AtomicU64::new(u64::MAX),
            rx_wakeups: AtomicU64::new(0),
            events: EventQueue::default(),
            cm_events: EventQueue::default(),
            captures: Mutex::new(Vec::new()),
            holders: Mutex::new(None),
            holders_changed: AtomicBool::new(false),
            kernel_gsi_sink: Mutex::new(None),
            inbox: Inbox::default(),
            me: me.clone(),
            parked: AtomicBool::new(false),
            alarm,
            arming: Mutex::new(()),
            rx: Mutex::new(RecvBatch::new()),
            polled_rx: AtomicU64::new(0),
            polled_batches: AtomicU64::new(0),
        });
        super::loopback::attach(&driver);
        Ok(driver)
    }

    /// The bound address.
    pub fn local(&self) -> SocketAddr {
        self.local
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

    /// Hand on what the engine produced at engine time `now`: queue its
    /// events, release the engine, send the datagrams (in engine order,
    /// see `send_order`) and rearm the receive thread's timer.
    fn flush(&self, mut eng: MutexGuard<'_, Engine>, now: u64) {
        let out: Vec<_> = eng.drain_tx().collect();
        let for_kernel = eng.take_kernel_gsi();
        self.events.push(eng.take_events());
        self.cm_events.push(eng.take_cm_events());
        // A deadline nearer than the receive thread's sleep: one due now
        // (a ring to look at again) wakes the thread at once; a later one
        // sets the thread's timer when this flush ends, once the datagrams
        // are on their way (a system call a message need not wait for).
        let deadline = eng.next_deadline();
        let armed = self.sleeping_until.load(Ordering::Acquire);
        let nearer = deadline.filter(|&d| d < armed);
        // A timer set for a deadline that is gone (a message's timers,
        // stopped by its acknowledgement) would wake the sleeping thread
        // for nothing, a context switch per message of a ping-pong: it is
        // taken back, and the thread sleeps until its own deadline.
        let own = self.own_wake.load(Ordering::Acquire);
        let gone = deadline.is_none() && armed != 0 && armed < own;
        let retimed = nearer.or(gone.then_some(own));
        if let Some(d) = retimed {
            self.sleeping_until.store(d, Ordering::Release);
        }
        let _timer = match nearer {
            Some(d) if d <= now => {
                self.alarm.wake();
                TimerOnDrop(self, None)
            }
            _ => TimerOnDrop(self, retimed),
        };
        if out.is_empty() {
            drop(eng);
            self.to_kernel_gsi(for_kernel);
            self.take_own_inbox();
            return;
        }
        let mut routed = Routed::new(out);
        let internal = routed.internal_count();
        if internal > 0 {
            eng.count_loopback(internal as u64);
        }
        let sending = self.send_order.lock().unwrap_or_else(|e| e.into_inner());
        drop(eng);
        // With the engine free; before the capture records them.
        self.seal_for_network(routed.external_mut());
        use std::os::fd::AsRawFd;
        // Recorded before sending, so that no answer precedes its request
        // in the capture. A program may exit without closing its device:
        // each batch reaches the file at once.
        self.each_capture(|cap| {
            for (t, internal) in routed.all() {
                if !internal {
                    cap.record(self.local, t.dst, &t.data);
                } else if let Some(whole) = whole(&t.data, t.source.as_ref()) {
                    cap.record_internal(self.local, t.dst, &whole);
                }
            }
            cap.flush();
        });
        let (internal, external) = routed.split();
        // Queued in engine order, taken (below) with nothing held.
        let mut targets: smallvec::SmallVec<[_; 4]> = smallvec::SmallVec::new();
        for (target, datagrams) in internal {
            // Never to this device itself: its inbox is drained below.
            let many =
                super::loopback::hand_off(&datagrams) && !std::ptr::eq(Arc::as_ptr(&target), self);
            target.inbox.push(self.local, datagrams);
            targets.push((target, many));
        }
        let mut external = external;
        let failed = super::batch::send_all(self.socket.as_raw_fd(), &mut external);
        drop(sending);
        crate::bufpool::give_all(external.into_iter().map(|t| t.data));
        for (target, many) in targets {
            if many {
                target.wake_for_inbox();
            } else {
                super::loopback::run_inline(target);
            }
        }
        self.take_own_inbox();
        self.to_kernel_gsi(for_kernel);
        if failed > 0 {
            tracing::debug!(failed, "datagrams not sent");
            self.lock().count_tx_errors(failed as u64);
        }
    }

    /// Give an ICRC to datagrams that were closed without one for a peer
    /// inside this process (RC and UC QPs whose peer was internal when
    /// they were connected) but go to the network: that device has
    /// stopped and another process may hold its address now. A zero
    /// field is what such a datagram carries; a sealed one whose ICRC
    /// happens to be zero is sealed again to the same value.
    fn seal_for_network<'a>(
        &self,
        external: impl Iterator<Item = &'a mut crate::engine::Transmit>,
    ) {
        for t in external {
            if t.data.ends_with(&[0; urdma_wire::ICRC_LEN]) {
                let ctx = urdma_wire::IcrcContext::new(self.local, t.dst);
                if let Err(e) = urdma_wire::reseal(&mut t.data, &ctx) {
                    tracing::debug!(dst = %t.dst, error = %e, "cannot seal a datagram");
                }
            }
        }
    }

    /// Set the receive thread's timer for deadline `d` (engine time),
    /// unless the thread no longer sleeps until `d`: a nearer deadline
    /// came since (whose flush sets the timer) or the thread woke and
    /// times its own sleep. The deadline the thread's own sleep ends at
    /// needs no timer: it is stopped instead.
    fn arm_alarm(&self, d: Option<u64>) {
        let Some(d) = d else { return };
        let _arming = self.arming.lock().unwrap_or_else(|e| e.into_inner());
        if self.sleeping_until.load(Ordering::Acquire) != d {
            return;
        }
        if d == self.own_wake.load(Ordering::Acquire) {
            self.alarm.stop_timer();
        } else {
            let after = d.saturating_sub(self.now());
            self.alarm.wake_after(Duration::from_nanos(after));
        }
    }

    /// Hand datagrams to the kernel's QP 1.
    fn to_kernel_gsi(&self, datagrams: Vec<GsiDatagram>) {
        if datagrams.is_empty() {
            return;
        }
        if let Some(sink) = self
            .kernel_gsi_sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            sink(datagrams);
        }
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

    /// Run `f` on every capture of this device's traffic.
    fn each_capture(&self, f: impl Fn(&super::capture::Capture)) {
        if let Some(cap) = super::capture::global() {
            f(cap);
        }
        let caps = self.captures.lock().unwrap_or_else(|e| e.into_inner());
        for cap in caps.iter() {
            f(cap);
        }
    }

    /// Capture this device's traffic into `cap` too, until detached.
    pub fn attach_capture(&self, cap: Arc<super::capture::Capture>) {
        self.captures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cap);
    }

    /// Stop capturing into `cap` (flushing it).
    pub fn detach_capture(&self, cap: &Arc<super::capture::Capture>) {
        cap.flush();
        self.captures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|c| !Arc::ptr_eq(c, cap));
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
        self.each_capture(|cap| {
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
                super::loopback::run_inline(me);
            }
        }
    }

    /// Wake the receive thread if it sleeps in the kernel while datagrams
    /// wait in its inbox.
    pub(crate) fn wake_for_inbox(&self) {
        if self.inbox.is_pending() && self.parked.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Wake the receive thread.
    fn wake(&self) {
        self.alarm.wake();
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

    /// Start the receive thread.
    pub fn start(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("urdma-rx-{}", self.name))
            .spawn(move || me.rx_loop())
    }

    /// Ask the receive thread to stop; the device is no longer reachable
    /// by internal loopback.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::Release);
        super::loopback::detach(self.local, self);
        self.wake();
    }

    /// Times the receive thread slept in the kernel and woke since the
    /// device opened.
    pub fn rx_wakeups(&self) -> u64 {
        self.rx_wakeups.load(Ordering::Relaxed)
    }

    /// Whether [`UdpDriver::stop`] was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Wait until the socket is readable (true), or the inbox holds
    /// datagrams, the alarm goes off or `timeout` passes (false). Polls
    /// without sleeping until `spin_until` (busy polling: input that comes
    /// soon is taken without the cost of a wake-up).
    fn wait_input(
        &self,
        fd: std::os::fd::RawFd,
        timeout: Option<Duration>,
        spin_until: Instant,
    ) -> std::io::Result<bool> {
        let [wake, timer] = self.alarm.fds();
        let fds = [fd, wake, timer];
        // Bit 0: the socket; the others: the alarm, cleared once seen.
        let readable = |timeout| -> std::io::Result<Option<bool>> {
            let ready = super::batch::wait_any(&fds, timeout)?;
            if ready & 0b110 != 0 {
                self.alarm.clear();
            }
            Ok((ready != 0).then_some(ready & 1 != 0))
        };
        let end = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.inbox.is_pending() {
                return Ok(readable(Some(Duration::ZERO))? == Some(true));
            }
            let now = Instant::now();
            if now >= spin_until {
                break;
            }
            if end.is_some_and(|e| now >= e) {
                return Ok(false);
            }
            if let Some(socket) = readable(Some(Duration::ZERO))? {
                return Ok(socket);
            }
            std::thread::yield_now();
        }
        // Parked before the inbox is looked at for the last time: a device
        // that queues a datagram after that look sees `parked` and wakes
        // this thread.
        self.parked.store(true, Ordering::SeqCst);
        let r = if self.inbox.is_pending() {
            readable(Some(Duration::ZERO))
        } else {
            let rest = end.map(|e| e.saturating_duration_since(Instant::now()));
            let r = readable(rest);
            self.rx_wakeups.fetch_add(1, Ordering::Relaxed);
            r
        };
        self.parked.store(false, Ordering::SeqCst);
        Ok(r? == Some(true))
    }

    fn rx_loop(&self) {
        use std::os::fd::AsRawFd;
        let fd = self.socket.as_raw_fd();
        let mut published_at = 0u64;
        let mut published_packets = u64::MAX;
        let busy_poll = crate::config::busy_poll();
        let mut last_rx = std::time::Instant::now();
        let mut internal = Vec::new();
        while !self.shutdown.load(Ordering::Acquire) {
            let (timeout, snapshot) = {
                let eng = self.lock();
                let c = eng.counters();
                let packets: u64 = [
                    Counter::TxPackets,
                    Counter::RxPackets,
                    Counter::Dropped,
                    Counter::HeaderErrors,
                    Counter::IcrcErrors,
                    Counter::Oversized,
                ]
                .iter()
                .map(|&k| c[k])
                .sum();
                let now = self.now();
                let mut d = eng.next_deadline().unwrap_or(u64::MAX);
                let mut snapshot = None;
                if packets != published_packets || self.holders_changed.load(Ordering::Acquire) {
                    let due = published_at + stats::PUBLISH_INTERVAL_NS;
                    if now >= due {
                        self.holders_changed.store(false, Ordering::Release);
                        snapshot = Some(self.snapshot(&eng));
                        published_at = now;
                        published_packets = packets;
                    } else {
                        d = d.min(due);
                    }
                }
                self.sleeping_until.store(d, Ordering::Release);
                self.own_wake.store(d, Ordering::Release);
                let timeout = match d {
                    u64::MAX => None,
                    d => Some(Duration::from_nanos(d.saturating_sub(self.now()).max(1000))),
                };
                (timeout, snapshot)
            };
            // The counter file is written with the engine unlocked.
            if let Some(snap) = snapshot {
                if let Err(e) = stats::publish(&snap) {
                    tracing::debug!(error = %e, "cannot publish counters");
                }
            }
            // Wait with a high-resolution timeout (the socket's own receive
            // timeout is only as fine as the scheduler tick), then take
            // whatever arrived without blocking.
            let polled = self.epoch + Duration::from_nanos(self.polled_rx.load(Ordering::Relaxed));
            let readable = self.wait_input(fd, timeout, last_rx.max(polled) + busy_poll);
            // A thread polling a CQ that holds the buffers is taking the
            // datagrams (in order): this one goes on to its other work.
            let mut rx = match &readable {
                Ok(true) => self.try_take_rx(),
                Ok(false) => None,
                Err(e) => {
                    received::note_receive_error(e);
                    None
                }
            };
            let got = rx.as_deref_mut().is_some_and(|b| match b.recv(fd) {
                Ok(_) => true,
                Err(e) => {
                    received::note_receive_error(&e);
                    false
                }
            });
            let batch = rx.as_deref().filter(|_| got);
            if batch.is_some_and(received::carries_traffic) {
                last_rx = std::time::Instant::now();
            }
            let (mut eng, now) = self.handle_received(batch, false);
            drop(rx);
            // Taken with the engine locked, so that batches another thread
            // drains meanwhile are handled in the order they were queued.
            internal = self.inbox.take(internal);
            if !internal.is_empty() {
                last_rx = std::time::Instant::now();
                self.handle_internal(&mut eng, now, &internal);
                // Kept for their buffers; the regions are let go now.
                internal
                    .iter_mut()
                    .for_each(|(_, d)| (d.source, d.sink) = (None, None));
            }
            if eng.next_deadline().is_some_and(|d| d <= now) {
                eng.handle_timeouts(now);
            }
            self.flush(eng, now);
        }
        if let Some(cap) = super::capture::global() {
            cap.flush();
        }
        let last = self.snapshot(&self.lock());
        stats::publish_final(last);
    }
}

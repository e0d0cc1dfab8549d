//! The receive thread of a UDP device: starting and stopping it, and its
//! loop, which waits on the socket (polling for a short window after
//! traffic, then sleeping) and feeds datagrams and timer expiries to the
//! engine.

use super::{stats, Counter, UdpDriver};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

impl UdpDriver {
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
        if let Some(a) = self.second_local {
            super::loopback::detach(a, self);
        }
        self.wake();
    }

    /// Times the receive thread slept in the kernel and woke since the
    /// device opened.
    pub fn rx_wakeups(&self) -> u64 {
        self.wake.rx_wakeups.load(Ordering::Relaxed)
    }

    /// Whether [`UdpDriver::stop`] was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Wait until a socket is readable (true), or the inbox holds
    /// datagrams, the alarm goes off or `timeout` passes (false). Polls
    /// without sleeping until `spin_until` (busy polling: input that comes
    /// soon is taken without the cost of a wake-up).
    fn wait_input(
        &self,
        fd: std::os::fd::RawFd,
        timeout: Option<Duration>,
        spin_until: Instant,
    ) -> std::io::Result<bool> {
        let [wake, timer] = self.wake.alarm.fds();
        use std::os::fd::AsRawFd;
        // A negative descriptor is ignored by poll.
        let second = self.second.as_ref().map_or(-1, |s| s.as_raw_fd());
        let fds = [fd, wake, timer, second];
        // Bits 0 and 3: the sockets; the others: the alarm, cleared once seen.
        let readable = |timeout| -> std::io::Result<Option<bool>> {
            let ready = super::super::batch::wait_any(&fds, timeout)?;
            if ready & 0b110 != 0 {
                self.wake.alarm.clear();
            }
            Ok((ready != 0).then_some(ready & 0b1001 != 0))
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
        self.wake.parked.store(true, Ordering::SeqCst);
        let r = if self.inbox.is_pending() {
            readable(Some(Duration::ZERO))
        } else {
            let rest = end.map(|e| e.saturating_duration_since(Instant::now()));
            let r = readable(rest);
            self.wake.rx_wakeups.fetch_add(1, Ordering::Relaxed);
            r
        };
        self.wake.parked.store(false, Ordering::SeqCst);
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
                self.wake.sleeping_until.store(d, Ordering::Release);
                self.wake.own_wake.store(d, Ordering::Release);
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
            // The link-local socket's datagrams are taken first, in a
            // batch of their own.
            if let (Ok(true), Some(second)) = (&readable, &self.second) {
                if self.take_from(second.as_raw_fd(), false) {
                    last_rx = std::time::Instant::now();
                }
            }
            // A thread polling a CQ that holds the buffers is taking the
            // datagrams (in order): this one goes on to its other work.
            let mut rx = match &readable {
                Ok(true) => self.try_take_rx(),
                Ok(false) => None,
                Err(e) => {
                    super::received::note_receive_error(e);
                    None
                }
            };
            let got = rx.as_deref_mut().is_some_and(|b| match b.recv(fd) {
                Ok(_) => true,
                Err(e) => {
                    super::received::note_receive_error(&e);
                    false
                }
            });
            let batch = rx.as_deref().filter(|_| got);
            if batch.is_some_and(super::received::carries_traffic) {
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
        if let Some(cap) = super::super::capture::global() {
            cap.flush();
        }
        let last = self.snapshot(&self.lock());
        stats::publish_final(last);
    }
}

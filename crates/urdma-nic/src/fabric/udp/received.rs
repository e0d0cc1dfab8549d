//! Datagrams taken from a device's socket, by its receive thread or by a
//! program's thread that spins on an empty CQ of an embedded device
//! ([`UdpDriver::progress`]): the work then goes on in the thread that
//! waits for it, without waiting for the receive thread to be scheduled.

use super::{Engine, RecvBatch, UdpDriver, ACK_CHUNK};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// Whether `batch` holds a datagram with bytes in it: an empty one (a
/// peer's, or a wake-up from an older build of this code) is no traffic
/// to keep polling for.
pub(super) fn carries_traffic(batch: &RecvBatch) -> bool {
    batch
        .iter()
        .any(|(_, d, _)| d.is_some_and(|d| !d.is_empty()))
}

/// Log a failed receive; none waiting, or none before the timeout, is no
/// failure.
pub(super) fn note_receive_error(e: &std::io::Error) {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    if !matches!(e.kind(), WouldBlock | TimedOut) {
        tracing::debug!(error = %e, "receive failed");
    }
}

impl UdpDriver {
    /// The receive buffers, unless another thread holds them (and is
    /// then taking the datagrams, in order).
    pub(super) fn try_take_rx(&self) -> Option<MutexGuard<'_, RecvBatch>> {
        match self.rx.try_lock() {
            Ok(rx) => Some(rx),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Record in the captures and hand to the engine the datagrams of
    /// `batch` (None: nothing was received); `polling`: on a thread other
    /// than the receive thread. Answers the engine, still locked, and the
    /// time it was taken at.
    pub(super) fn handle_received(
        &self,
        batch: Option<&RecvBatch>,
        polling: bool,
    ) -> (MutexGuard<'_, Engine>, u64) {
        if let Some(batch) = batch {
            self.captures.each(|cap| {
                for (src, data, _) in batch.iter() {
                    if let (Some(src), Some(data)) = (src, data) {
                        if !data.is_empty() {
                            cap.record_received(src, self.local_for(src), data);
                        }
                    }
                }
                cap.flush();
            });
        }
        let mut eng = self.lock();
        if !polling {
            // Awake: posters need not wake the receive thread until it
            // sleeps again.
            self.wake.sleeping_until.store(0, Ordering::Release);
        }
        let now = self.now();
        if let Some(batch) = batch {
            let mut truncated = 0;
            let items = batch
                .iter()
                .filter_map(|(src, data, ce)| match (src, data) {
                    (Some(s), Some(d)) if !d.is_empty() => Some((s, d, ce)),
                    (_, None) => {
                        truncated += 1;
                        None
                    }
                    _ => None,
                });
            // A batch can hold a sender's whole window: the ACKs leave
            // after each part of it, not after the last.
            eng = crate::fabric::batch::in_parts(
                eng,
                items,
                ACK_CHUNK,
                |eng, part| eng.handle_batch_ecn(now, part),
                |eng| {
                    self.flush(eng, now);
                    self.lock()
                },
            );
            eng.count_oversized(truncated);
        }
        (eng, now)
    }

    /// Take and handle, on the calling thread, the datagrams that have
    /// arrived, without waiting: a program polling an empty CQ of an
    /// embedded device moves its NIC on itself instead of waiting for the
    /// receive thread to be scheduled. Does nothing while another thread
    /// takes datagrams. True if datagrams with bytes came.
    pub fn progress(&self) -> bool {
        if self.is_stopped() {
            return false;
        }
        let mut traffic = self.take_from(self.socket.as_raw_fd(), true);
        if let Some(second) = &self.second {
            traffic |= self.take_from(second.as_raw_fd(), true);
        }
        traffic
    }

    /// Take and handle the datagrams waiting on socket `fd`, without
    /// waiting, unless another thread takes datagrams now; `polling`: on a
    /// thread other than the receive thread. True if datagrams with bytes
    /// came.
    pub(super) fn take_from(&self, fd: std::os::fd::RawFd, polling: bool) -> bool {
        let Some(mut rx) = self.try_take_rx() else {
            return false;
        };
        match rx.recv(fd) {
            Ok(n) if n > 0 => {}
            Ok(_) => return false,
            Err(e) => {
                note_receive_error(&e);
                return false;
            }
        }
        let traffic = carries_traffic(&rx);
        let (eng, now) = self.handle_received(Some(&rx), polling);
        drop(rx);
        if polling {
            if traffic {
                self.polled_rx.store(now, Ordering::Relaxed);
            }
            self.polled_batches.fetch_add(1, Ordering::Relaxed);
        }
        self.flush(eng, now);
        traffic
    }

    /// Batches of datagrams that threads polling an empty CQ took
    /// ([`UdpDriver::progress`]) rather than the receive thread.
    pub fn polled_batches(&self) -> u64 {
        self.polled_batches.load(Ordering::Relaxed)
    }
}

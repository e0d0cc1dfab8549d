//! Datagrams taken from a device's socket, by its receive thread or by a
//! program's thread that polls an empty CQ of an embedded device
//! ([`UdpDriver::progress`]): the work then goes on in the thread that
//! waits for it, as an RNIC's does on its own, with no other thread to
//! wake or to schedule.

use super::{Engine, RecvBatch, UdpDriver, ACK_CHUNK};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

impl UdpDriver {
    /// Record in the captures and hand to the engine what `batch`
    /// received (`got`: its count, or why there is none); `polling`: on
    /// a thread other than the receive thread. Answers the engine, still
    /// locked, and the time it was taken at.
    pub(super) fn handle_received(
        &self,
        batch: &RecvBatch,
        got: std::io::Result<usize>,
        polling: bool,
    ) -> (MutexGuard<'_, Engine>, u64) {
        if got.is_ok() {
            self.each_capture(|cap| {
                for (src, data, _) in batch.iter() {
                    if let (Some(src), Some(data)) = (src, data) {
                        if !data.is_empty() {
                            cap.record_received(src, self.local, data);
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
            self.sleeping_until.store(0, Ordering::Release);
        }
        let now = self.now();
        match got {
            Ok(_) => {
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
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => tracing::debug!(error = %e, "receive failed"),
        }
        (eng, now)
    }

    /// Take and handle, on the calling thread, the datagrams that have
    /// arrived, without waiting: a program polling an empty CQ of an
    /// embedded device moves its NIC on itself instead of waiting for the
    /// receive thread to be scheduled. Does nothing (false) while another
    /// thread takes datagrams, or when none came.
    pub fn progress(&self) -> bool {
        if self.is_stopped() {
            return false;
        }
        let mut rx = match self.rx.try_lock() {
            Ok(rx) => rx,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let got = match rx.recv(self.socket.as_raw_fd()) {
            Ok(n) if n > 0 => n,
            _ => return false,
        };
        let (eng, now) = self.handle_received(&rx, Ok(got), true);
        drop(rx);
        self.polled_rx.store(now, Ordering::Relaxed);
        self.polled_batches.fetch_add(1, Ordering::Relaxed);
        self.flush(eng, now);
        true
    }

    /// Batches of datagrams that threads polling an empty CQ took
    /// ([`UdpDriver::progress`]) rather than the receive thread.
    pub fn polled_batches(&self) -> u64 {
        self.polled_batches.load(Ordering::Relaxed)
    }
}

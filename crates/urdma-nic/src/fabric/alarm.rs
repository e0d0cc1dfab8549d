//! How other threads reach a device's receive thread while it sleeps in
//! the kernel: a counter it is woken by (an eventfd) and a one-shot timer
//! for the engine's next deadline (a timerfd).
//!
//! A deadline that comes nearer (a post arms a retransmission timer) only
//! resets the timer: the receive thread sleeps on until that deadline
//! instead of being woken to recompute its sleep, which would cost a
//! context switch per message.

use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

/// A receive thread's wake-up counter and deadline timer.
pub(crate) struct Alarm {
    wake: EventFd,
    timer: TimerFd,
}

fn io(e: nix::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

impl Alarm {
    /// A new alarm, neither woken nor timed.
    pub fn new() -> std::io::Result<Self> {
        let wake =
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(io)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(io)?;
        Ok(Alarm { wake, timer })
    }

    /// Wake the thread now.
    pub fn wake(&self) {
        // Fails only when the counter is full, which wakes it as well.
        let _ = self.wake.write(1);
    }

    /// Wake the thread `after` from now (replacing an earlier setting).
    pub fn wake_after(&self, after: Duration) {
        // A zero expiry would disarm the timer.
        let after = after.max(Duration::from_nanos(1));
        let at = Expiration::OneShot(TimeSpec::from_duration(after));
        if let Err(e) = self.timer.set(at, TimerSetTimeFlags::empty()) {
            tracing::debug!(error = %e, "cannot set the receive thread's timer; waking it");
            self.wake();
        }
    }

    /// Stop the timer (a deadline that is gone).
    pub fn stop_timer(&self) {
        if let Err(e) = self.timer.unset() {
            tracing::debug!(error = %e, "cannot stop the receive thread's timer");
        }
    }

    /// The descriptors to wait on beside the socket.
    pub fn fds(&self) -> [RawFd; 2] {
        [
            self.wake.as_fd().as_raw_fd(),
            self.timer.as_fd().as_raw_fd(),
        ]
    }

    /// Reset what woke the thread, so that the next wait sleeps.
    pub fn clear(&self) {
        let mut buf = [0u8; 8];
        for fd in self.fds() {
            // Nonblocking: nothing to read is EAGAIN, which is fine.
            let _ = nix::unistd::read(fd, &mut buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::batch::wait_any;

    #[test]
    fn a_wake_is_seen_once() {
        let a = Alarm::new().unwrap();
        let fds = a.fds();
        assert_eq!(wait_any(&fds, Some(Duration::ZERO)).unwrap(), 0);
        a.wake();
        a.wake();
        assert_eq!(wait_any(&fds, Some(Duration::ZERO)).unwrap(), 0b01);
        a.clear();
        assert_eq!(wait_any(&fds, Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn a_stopped_timer_does_not_fire() {
        let a = Alarm::new().unwrap();
        a.wake_after(Duration::from_millis(1));
        a.stop_timer();
        assert_eq!(
            wait_any(&a.fds(), Some(Duration::from_millis(50))).unwrap(),
            0
        );
    }

    #[test]
    fn the_timer_fires_and_a_later_setting_replaces_it() {
        let a = Alarm::new().unwrap();
        let fds = a.fds();
        a.wake_after(Duration::from_secs(3600));
        assert_eq!(wait_any(&fds, Some(Duration::ZERO)).unwrap(), 0);
        a.wake_after(Duration::from_millis(1));
        assert_eq!(wait_any(&fds, Some(Duration::from_secs(10))).unwrap(), 0b10);
        a.clear();
        assert_eq!(wait_any(&fds, Some(Duration::ZERO)).unwrap(), 0);
    }
}

//! Doorbells and the polling of a session's send queues: how the work a
//! driver posts reaches the engine.

use super::{Session, MAX_POLLED_RINGS};
use crate::proto::Request;

impl Session {
    /// Take the work that doorbells announce, under one engine lock, so
    /// that the packets it makes leave in one batch. With `poll`, the
    /// session's send queues (unless it has more than `MAX_POLLED_RINGS`)
    /// are polled from then on: the driver's next posts need no doorbell
    /// until [`Session::stop_polling`].
    pub fn handle_doorbells(&mut self, bells: Vec<Request>, poll: bool) {
        let Some(dev) = self.device.clone() else {
            return;
        };
        let poll = poll && self.send_rings.len() <= MAX_POLLED_RINGS;
        self.polling |= poll;
        dev.driver.with_engine(|e, now| {
            if poll {
                // Rings already polled are left as they are.
                for ring in self.send_rings.values() {
                    ring.start_polling();
                }
            }
            for req in bells {
                let Request::Doorbell { qpn } = req else {
                    continue;
                };
                match self.qps.contains(&qpn) {
                    true => ring_bell(e, now, qpn, self.pid),
                    false => tracing::debug!(pid = self.pid, qpn, "doorbell of an unknown QP"),
                }
            }
        });
    }

    /// Whether the send queues are polled.
    pub fn is_polling(&self) -> bool {
        self.polling
    }

    /// Take what the driver posted to polled send queues since the NIC
    /// last looked, as its doorbells would have announced. True if there
    /// was any.
    pub fn poll_rings(&mut self) -> bool {
        if !self.polling {
            return false;
        }
        let due: Vec<u32> = (self.send_rings.iter())
            .filter(|(_, r)| r.poll_due())
            .map(|(&qpn, _)| qpn)
            .collect();
        if due.is_empty() {
            return false;
        }
        let Some(dev) = self.device.clone() else {
            return false;
        };
        dev.driver.with_engine(|e, now| {
            for qpn in due {
                if self.send_rings.get(&qpn).is_some_and(|r| r.take_bell()) {
                    ring_bell(e, now, qpn, self.pid);
                }
            }
        });
        true
    }

    /// Stop polling the send queues: their doorbells are armed again, and
    /// what was posted meanwhile is taken.
    pub fn stop_polling(&mut self) {
        let Some(dev) = self.device.clone().filter(|_| self.polling) else {
            return;
        };
        self.polling = false;
        dev.driver.with_engine(|e, now| {
            for (&qpn, ring) in &self.send_rings {
                if !ring.stop_polling() {
                    ring_bell(e, now, qpn, self.pid);
                }
            }
        });
    }
}

/// Take what a driver (process `pid`) posted to QP `qpn`, as its doorbell
/// asks; a refusal (the QP is gone) is only logged.
fn ring_bell(e: &mut crate::engine::Engine, now: u64, qpn: u32, pid: u32) {
    if let Err(err) = e.doorbell(now, qpn) {
        tracing::debug!(pid, qpn, error = %err, "doorbell refused");
    }
}

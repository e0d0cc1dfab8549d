//! Where a session's events go: the driver's event socket.

use super::channel;
use super::proto::{self, Event};
use std::os::fd::OwnedFd;

/// Where a session's events go.
pub struct EventSink {
    fd: OwnedFd,
}

impl EventSink {
    /// Events to the driver at the other end of `fd`.
    pub fn new(fd: OwnedFd) -> Self {
        // Room for thousands of events of a driver that reads them late.
        channel::grow_send_buffer(&fd, 4 << 20);
        EventSink { fd }
    }

    /// Send an event; one the driver has no room for is dropped and logged.
    pub fn send(&self, ev: &Event) {
        let sent = proto::encode(ev).and_then(|m| channel::try_send(&self.fd, &m));
        if let Err(e) = sent {
            tracing::debug!(error = %e, ?ev, "event not delivered");
        }
    }
}

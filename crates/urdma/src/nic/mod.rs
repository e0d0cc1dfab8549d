//! The driver's link to its NIC.
//!
//! A urdma NIC is one per address, shared by every process of the host:
//! the agent (`urdma agent`, crate `urdma-nic`) runs the engines and owns
//! UDP port 4791 of the addresses it serves; drivers (the Rust API, the
//! drop-in libibverbs, the provider) reach it through a command socket
//! ([`proto`], [`channel`]), completion rings in shared memory
//! ([`crate::cq::CqShared`]) and their own `/proc/self/mem`, which they
//! pass to the agent as its only way to their registered memory. A driver
//! starts the agent when none runs ([`spawn`]).
//!
//! [`Link`] is a device's way to its NIC: the agent by default, or an
//! engine inside the process ([`LocalNic`]: `URDMA_NIC=embedded`, or
//! `Device::open_embedded`, with the `embedded` feature) for tests and
//! embedding.

pub mod client;
pub mod spawn;

pub use urdma_abi::local_nic::{LocalNic, PostError};
pub use urdma_abi::{addr, channel, kernel, proto, vouch};

use crate::engine::command::{Command, Reply};
use crate::engine::{RecvRequest, SendRequest};
use crate::error::Result;
use crate::events::EventNotifier;
use crate::types::AsyncEvent;
use std::sync::Arc;
use std::time::Duration;

/// True when `URDMA_NIC=embedded` asks for the NIC inside this process.
pub fn embedded_by_default() -> bool {
    crate::config::get().nic.value == crate::config::NicMode::Embedded
}

/// How a device reaches its NIC.
pub enum Link {
    /// An engine in this process, with its own UDP socket.
    Embedded(Arc<dyn LocalNic>),
    /// The shared NIC agent.
    Agent(Arc<client::AgentLink>),
}

impl Link {
    /// Carry out a call on the device's communication manager; a connect
    /// answers the new connection's ID.
    pub fn cm(&self, op: crate::cm::CmOp) -> Result<Option<crate::cm::ConnId>> {
        match self {
            Link::Embedded(d) => d.cm(op),
            Link::Agent(a) => a.cm(op),
        }
    }

    /// Next event of this driver's CM connections, waiting up to `timeout`
    /// (None: forever).
    pub fn next_cm_event(&self, timeout: Option<Duration>) -> Option<crate::cm::CmEvent> {
        match self {
            Link::Embedded(d) => d.next_cm_event(timeout),
            Link::Agent(a) => a.cm_events.next(timeout),
        }
    }

    /// Run an engine command.
    pub fn execute(&self, cmd: Command) -> Result<Reply> {
        match self {
            Link::Embedded(d) => d.execute(cmd),
            Link::Agent(a) => a.execute(cmd),
        }
    }

    /// Post send WRs in order; stops at the first one refused.
    pub fn post_sends(
        &self,
        qpn: u32,
        wrs: Vec<SendRequest>,
    ) -> std::result::Result<(), PostError> {
        match self {
            Link::Embedded(d) => d.post_sends(qpn, wrs),
            Link::Agent(a) => a.post_sends(qpn, wrs),
        }
    }

    /// Post receive WRs to a QP, or to an SRQ when `srq`.
    pub fn post_recvs(
        &self,
        n: u32,
        srq: bool,
        wrs: Vec<RecvRequest>,
    ) -> std::result::Result<(), PostError> {
        match self {
            Link::Embedded(d) => d.post_recvs(n, srq, wrs),
            Link::Agent(a) => a.post_recvs(n, srq, wrs),
        }
    }

    /// Install the callback run when asynchronous events were queued.
    pub fn set_event_notifier(&self, n: Option<EventNotifier>) {
        match self {
            Link::Embedded(d) => d.set_event_notifier(n),
            Link::Agent(a) => a.events.set_notifier(n),
        }
    }

    /// Hand each asynchronous event to `handler` as it is raised (None:
    /// stop). The handler runs on the thread that raised the event and
    /// must not call back into the device.
    pub fn on_events(&self, handler: Option<Arc<dyn Fn(AsyncEvent) + Send + Sync>>) {
        let Some(h) = handler else {
            self.set_event_notifier(None);
            return;
        };
        let notifier: EventNotifier = match self {
            Link::Embedded(d) => {
                let weak = Arc::downgrade(d);
                Box::new(move || {
                    if let Some(d) = weak.upgrade() {
                        while let Some(ev) = d.next_event(Some(Duration::ZERO)) {
                            h(ev);
                        }
                    }
                })
            }
            Link::Agent(a) => {
                let weak = Arc::downgrade(&a.events);
                Box::new(move || {
                    if let Some(q) = weak.upgrade() {
                        while let Some(ev) = q.next(Some(Duration::ZERO)) {
                            h(ev);
                        }
                    }
                })
            }
        };
        self.set_event_notifier(Some(notifier));
    }

    /// Next asynchronous event, waiting up to `timeout` (None: forever).
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        match self {
            Link::Embedded(d) => d.next_event(timeout),
            Link::Agent(a) => a.events.next(timeout),
        }
    }
}

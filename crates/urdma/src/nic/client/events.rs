//! The driver's event thread: CQ notifications and asynchronous and CM
//! events from the agent, and what follows when the agent goes.

use crate::cq::CqShared;
use crate::events::EventQueue;
use crate::nic::channel;
use crate::nic::proto::{self, Event};
use crate::types::{AsyncEvent, AsyncEventKind};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, Weak};

/// The agent ended the session (it exited or was killed): no completion
/// will come. Every CQ reports an error (waiters and completion channels
/// wake) and raises IBV_EVENT_CQ_ERR.
pub(super) fn nic_gone(events: &EventQueue, cqs: &Mutex<HashMap<u32, Weak<CqShared>>>) {
    tracing::error!("the urdma NIC agent ended the session");
    let cqs: Vec<(u32, Arc<CqShared>)> = cqs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|(n, w)| w.upgrade().map(|c| (*n, c)))
        .collect();
    for (cqn, cq) in cqs {
        cq.fail();
        events.push([AsyncEvent {
            kind: AsyncEventKind::CqErr,
            object: cqn,
        }]);
    }
}

/// Deliver the agent's events: CQ notifications to the CQ's notifier,
/// asynchronous events to the queue. Ends when the agent closes the socket.
pub(super) fn event_loop(
    fd: OwnedFd,
    events: &EventQueue,
    cm_events: &EventQueue<crate::cm::CmEvent>,
    cqs: &Mutex<HashMap<u32, Weak<CqShared>>>,
) {
    let mut buf = channel::MsgBuf::default();
    let mut fds = Vec::new();
    loop {
        match channel::recv(&fd, &mut buf, &mut fds) {
            Ok(true) => {}
            // A message cut short: skip it, the session goes on.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
            Ok(false) | Err(_) => break,
        }
        fds.clear();
        match proto::decode::<Event>(buf.bytes()) {
            Ok(Event::CqFired(cqn)) => {
                let cq = cqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&cqn)
                    .and_then(Weak::upgrade);
                if let Some(cq) = cq {
                    cq.notify_now();
                }
            }
            Ok(Event::Async(ev)) => events.push([ev]),
            Ok(Event::Cm(ev)) => cm_events.push([ev]),
            Err(e) => tracing::debug!(error = %e, "undecodable event"),
        }
    }
}

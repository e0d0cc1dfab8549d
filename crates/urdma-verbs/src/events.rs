//! Asynchronous events: the engine's events are routed to the context
//! that owns the QP, CQ or SRQ they concern, queued there, and counted on
//! that context's `async_fd` (an [`EventFd`]), so `poll`/`epoll` on it
//! work and `ibv_get_async_event` blocks on it.

use crate::util::EventFd;
use crate::util::VResult;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use urdma::{AsyncEvent, AsyncEventKind};

/// Events kept per context before the oldest are dropped.
const MAX_QUEUED: usize = 4096;

/// What an event concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A queue pair (`element.qp`).
    Qp,
    /// A completion queue (`element.cq`).
    Cq,
    /// A shared receive queue (`element.srq`).
    Srq,
}

/// One event waiting for `ibv_get_async_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// `enum ibv_event_type` value.
    pub event_type: u32,
    /// What `element` points to.
    pub target: Target,
    /// The C object (`ibv_qp *`, `ibv_cq *` or `ibv_srq *`).
    pub element: usize,
}

/// A context's queue of asynchronous events and its descriptor.
#[derive(Debug)]
pub struct AsyncQueue {
    /// The context's `async_fd`: one count per queued event.
    pub fd: EventFd,
    q: Mutex<VecDeque<Queued>>,
}

impl AsyncQueue {
    /// An empty queue with a fresh descriptor.
    pub fn new() -> VResult<Arc<Self>> {
        Ok(Arc::new(AsyncQueue {
            fd: EventFd::new()?,
            q: Mutex::new(VecDeque::new()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue an event and count it on the descriptor. A full queue drops
    /// its oldest event, whose count then stands for the new one.
    pub fn push(&self, ev: Queued) {
        let mut q = self.lock();
        let full = q.len() >= MAX_QUEUED;
        if full {
            q.pop_front();
        }
        q.push_back(ev);
        drop(q);
        if !full {
            self.fd.signal();
        }
    }

    /// Take the oldest event.
    pub fn pop(&self) -> Option<Queued> {
        self.lock().pop_front()
    }

    /// Drop the events of an object being destroyed, with their counts.
    pub fn purge(&self, element: usize) {
        let mut q = self.lock();
        let before = q.len();
        q.retain(|e| e.element != element);
        let removed = before - q.len();
        drop(q);
        for _ in 0..removed {
            self.fd.try_take();
        }
    }
}

/// Where a device's events go: per object number, the owning context's
/// queue and the C object.
#[derive(Debug, Default)]
pub struct Routes {
    m: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    qp: HashMap<u32, (Arc<AsyncQueue>, usize)>,
    cq: HashMap<u32, (Arc<AsyncQueue>, usize)>,
    srq: HashMap<u32, (Arc<AsyncQueue>, usize)>,
}

impl Tables {
    fn table(&mut self, t: Target) -> &mut HashMap<u32, (Arc<AsyncQueue>, usize)> {
        match t {
            Target::Qp => &mut self.qp,
            Target::Cq => &mut self.cq,
            Target::Srq => &mut self.srq,
        }
    }
}

/// The verbs event type and target of an engine event.
pub fn classify(kind: AsyncEventKind) -> (u32, Target) {
    use crate::sys::*;
    match kind {
        AsyncEventKind::CqErr => (IBV_EVENT_CQ_ERR, Target::Cq),
        AsyncEventKind::QpFatal => (IBV_EVENT_QP_FATAL, Target::Qp),
        AsyncEventKind::QpReqErr => (IBV_EVENT_QP_REQ_ERR, Target::Qp),
        AsyncEventKind::QpAccessErr => (IBV_EVENT_QP_ACCESS_ERR, Target::Qp),
        AsyncEventKind::SqDrained => (IBV_EVENT_SQ_DRAINED, Target::Qp),
        AsyncEventKind::SrqLimitReached => (IBV_EVENT_SRQ_LIMIT_REACHED, Target::Srq),
        AsyncEventKind::QpLastWqeReached => (IBV_EVENT_QP_LAST_WQE_REACHED, Target::Qp),
    }
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send the events of object `num` to `queue`, naming `element`.
    pub fn add(&self, t: Target, num: u32, queue: Arc<AsyncQueue>, element: usize) {
        self.lock().table(t).insert(num, (queue, element));
    }

    /// Stop routing the events of object `num` and drop those queued.
    pub fn remove(&self, t: Target, num: u32) {
        let r = self.lock().table(t).remove(&num);
        if let Some((q, element)) = r {
            q.purge(element);
        }
    }

    /// Deliver one engine event (dropped if its object is gone).
    pub fn dispatch(&self, ev: AsyncEvent) {
        let (event_type, target) = classify(ev.kind);
        let dest = self.lock().table(target).get(&ev.object).cloned();
        if let Some((queue, element)) = dest {
            queue.push(Queued {
                event_type,
                target,
                element,
            });
        }
    }
}

/// Route a device's events as the NIC raises them: the device runs this
/// hook after queueing events, on whichever thread received them.
pub fn install(link: &urdma::nic::Link, routes: Arc<Routes>) {
    link.on_events(Some(Arc::new(move |ev| {
        // A panic here would end the thread that raised the event.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| routes.dispatch(ev)));
    })));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_reach_the_owner_and_purge_with_it() {
        let r = Routes::default();
        let q = AsyncQueue::new().unwrap();
        r.add(Target::Qp, 7, q.clone(), 0x1000);
        r.dispatch(AsyncEvent {
            kind: AsyncEventKind::QpFatal,
            object: 7,
        });
        r.dispatch(AsyncEvent {
            kind: AsyncEventKind::QpFatal,
            object: 8,
        });
        r.dispatch(AsyncEvent {
            kind: AsyncEventKind::CqErr,
            object: 7,
        });
        let e = q.pop().unwrap();
        assert_eq!(e.element, 0x1000);
        assert_eq!(e.event_type, crate::sys::IBV_EVENT_QP_FATAL);
        assert!(q.fd.try_take());
        assert!(q.pop().is_none());
        r.dispatch(AsyncEvent {
            kind: AsyncEventKind::SqDrained,
            object: 7,
        });
        r.remove(Target::Qp, 7);
        assert!(q.pop().is_none());
        assert!(!q.fd.try_take());
    }
}

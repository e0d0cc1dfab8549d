//! A device's queue of asynchronous events (`ibv_get_async_event`): the
//! engine's events wait here until a consumer takes them, and an optional
//! callback lets a consumer wake a file descriptor instead of blocking.

use crate::types::AsyncEvent;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Async events kept before the oldest are dropped.
const MAX_EVENTS: usize = 1024;

/// Callback run after asynchronous events were queued.
pub type EventNotifier = Box<dyn Fn() + Send + Sync>;

/// Queued events of one device: asynchronous events, or the CM's.
pub struct EventQueue<T = AsyncEvent> {
    events: Mutex<VecDeque<T>>,
    cv: Condvar,
    notifier: Mutex<Option<EventNotifier>>,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            events: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            notifier: Mutex::new(None),
        }
    }
}

impl<T> EventQueue<T> {
    /// Queue events (the oldest go beyond `MAX_EVENTS`), wake waiters
    /// and run the notifier.
    pub fn push(&self, evs: impl IntoIterator<Item = T>) {
        let mut q = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let before = q.len();
        for ev in evs {
            if q.len() >= MAX_EVENTS {
                q.pop_front();
            }
            q.push_back(ev);
        }
        if q.len() == before && before < MAX_EVENTS {
            return;
        }
        drop(q);
        self.cv.notify_all();
        let notifier = self.notifier.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = notifier.as_ref() {
            n();
        }
    }

    /// Install (or remove) the callback run each time events were queued.
    /// It runs on the thread that queued them: it must only take the
    /// events with `next(Some(Duration::ZERO))` and hand them on. Removing
    /// it waits for a running call to finish.
    pub fn set_notifier(&self, n: Option<EventNotifier>) {
        *self.notifier.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }

    /// Next event, waiting up to `timeout` (None: forever).
    pub fn next(&self, timeout: Option<Duration>) -> Option<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.events.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(ev) = q.pop_front() {
                return Some(ev);
            }
            match deadline {
                None => q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    q = self
                        .cv
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AsyncEventKind;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn events_queue_in_order_and_notify() {
        let q = Arc::new(EventQueue::<AsyncEvent>::default());
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        q.set_notifier(Some(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        })));
        let ev = |object| AsyncEvent {
            kind: AsyncEventKind::QpFatal,
            object,
        };
        q.push([ev(1), ev(2)]);
        q.push([]);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert_eq!(q.next(Some(Duration::ZERO)).map(|e| e.object), Some(1));
        assert_eq!(q.next(Some(Duration::ZERO)).map(|e| e.object), Some(2));
        assert_eq!(q.next(Some(Duration::from_millis(1))), None);
        q.push((0..MAX_EVENTS as u32 + 5).map(ev));
        assert_eq!(q.next(None).map(|e| e.object), Some(5));
    }
}

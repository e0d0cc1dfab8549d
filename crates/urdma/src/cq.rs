//! Completion queues: a bounded ring of work completions with blocking
//! waits and completion notification.

use crate::error::{Error, Result};
use crate::types::WorkCompletion;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Callback run when an armed CQ receives a completion.
pub type CqNotifier = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct CqState {
    entries: VecDeque<WorkCompletion>,
    overrun: bool,
    /// Armed for notification: Some(solicited_only).
    armed: Option<bool>,
}

/// A completion queue shared by the engine (producer) and the application.
pub struct CqShared {
    /// CQ number.
    pub cqn: u32,
    capacity: usize,
    state: Mutex<CqState>,
    cond: Condvar,
    notifier: Mutex<Option<CqNotifier>>,
}

impl std::fmt::Debug for CqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqShared")
            .field("cqn", &self.cqn)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// A completion could not be queued because the CQ is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqFull;

impl CqShared {
    /// A CQ holding at most `capacity` completions.
    pub fn new(cqn: u32, capacity: usize) -> Self {
        CqShared {
            cqn,
            capacity,
            state: Mutex::new(CqState::default()),
            cond: Condvar::new(),
            notifier: Mutex::new(None),
        }
    }

    /// Maximum number of completions held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CqState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a completion (engine side). A full CQ enters the overrun
    /// state and the completion is reported lost through [`CqFull`].
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqFull> {
        let fire = {
            let mut s = self.lock();
            if s.overrun || s.entries.len() >= self.capacity {
                s.overrun = true;
                drop(s);
                self.cond.notify_all();
                return Err(CqFull);
            }
            s.entries.push_back(wc);
            let fire = match s.armed {
                Some(solicited_only) => {
                    !solicited_only || solicited || wc.status != crate::types::WcStatus::Success
                }
                None => false,
            };
            if fire {
                s.armed = None;
            }
            fire
        };
        self.cond.notify_all();
        if fire {
            if let Some(n) = self
                .notifier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                n();
            }
        }
        Ok(())
    }

    /// Take up to `max` completions. After an overrun, the completions
    /// still held are returned first, then [`Error::CqOverrun`].
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let mut s = self.lock();
        let n = max.min(s.entries.len());
        if n == 0 && s.overrun {
            return Err(Error::CqOverrun);
        }
        out.extend(s.entries.drain(..n));
        Ok(n)
    }

    /// Number of completions waiting.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block until at least one completion is available (or the CQ
    /// overran), then take up to `max`. `None` waits forever.
    pub fn wait(
        &self,
        max: usize,
        timeout: Option<Duration>,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.lock();
        while s.entries.is_empty() && !s.overrun {
            match deadline {
                None => s = self.cond.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Timeout);
                    }
                    s = self
                        .cond
                        .wait_timeout(s, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        drop(s);
        self.poll(max, out)
    }

    /// Arm the CQ: the notifier runs on the next completion (or the next
    /// solicited or error completion with `solicited_only`).
    pub fn req_notify(&self, solicited_only: bool) {
        let mut s = self.lock();
        s.armed = Some(match s.armed {
            Some(prev) => prev && solicited_only,
            None => solicited_only,
        });
    }

    /// Install the notification callback.
    pub fn set_notifier(&self, n: Option<CqNotifier>) {
        *self.notifier.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{WcOpcode, WcStatus};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, 1)
    }

    #[test]
    fn full_cq_reports_overrun_after_remaining_entries() {
        let cq = CqShared::new(1, 2);
        cq.push(wc(1), false).unwrap();
        cq.push(wc(2), false).unwrap();
        assert_eq!(cq.push(wc(3), false), Err(CqFull));
        let mut out = Vec::new();
        assert_eq!(cq.poll(10, &mut out).unwrap(), 2);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(cq.poll(10, &mut out), Err(Error::CqOverrun)));
        assert_eq!(cq.push(wc(4), false), Err(CqFull));
    }

    #[test]
    fn notifier_fires_once_per_arm() {
        let cq = CqShared::new(1, 8);
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        cq.set_notifier(Some(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        })));
        cq.push(wc(1), false).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        cq.req_notify(true);
        cq.push(wc(2), false).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        cq.push(wc(3), true).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        cq.push(wc(4), true).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_times_out_and_wakes() {
        let cq = Arc::new(CqShared::new(1, 8));
        let mut out = Vec::new();
        assert!(matches!(
            cq.wait(1, Some(Duration::from_millis(5)), &mut out),
            Err(Error::Timeout)
        ));
        let c = cq.clone();
        let t = std::thread::spawn(move || c.push(wc(9), false));
        assert_eq!(
            cq.wait(4, Some(Duration::from_secs(10)), &mut out).unwrap(),
            1
        );
        assert_eq!(out[0].wr_id, 9);
        t.join().unwrap().unwrap();
    }
}

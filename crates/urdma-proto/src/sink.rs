//! Where the engine puts completions: a [`CompletionSink`] per CQ.
//!
//! The NIC's CQs are rings in memory shared with the program that polls
//! them, and a push may wake that program; the engine sees only the trait.
//! [`LocalCq`] is a plain queue of completions for the simulator and the
//! tests.

use crate::types::WorkCompletion;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A completion could not be queued because the CQ is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqFull;

/// A completion queue as the engine fills it.
pub trait CompletionSink: Send + Sync + std::fmt::Debug {
    /// The CQ's number.
    fn cqn(&self) -> u32;
    /// Queue a completion. `solicited`: the completion of a message the
    /// sender asked to be told of (it fires a solicited-only arm). A full
    /// CQ enters the overrun state and the completion is reported lost
    /// through [`CqFull`].
    fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqFull>;
}

/// A bounded in-process queue of completions.
#[derive(Debug)]
pub struct LocalCq {
    cqn: u32,
    capacity: usize,
    queue: Mutex<LocalState>,
}

#[derive(Debug, Default)]
struct LocalState {
    queued: VecDeque<WorkCompletion>,
    overrun: bool,
}

impl LocalCq {
    /// CQ `cqn`, holding at most `capacity` completions.
    pub fn new(cqn: u32, capacity: usize) -> Self {
        LocalCq {
            cqn,
            capacity,
            queue: Mutex::new(LocalState::default()),
        }
    }

    /// Take up to `max` completions, oldest first, appending them to `out`;
    /// returns how many were taken.
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(q.queued.len());
        out.extend(q.queued.drain(..n));
        n
    }

    /// Whether a completion was lost to a full queue.
    pub fn overrun(&self) -> bool {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).overrun
    }
}

impl CompletionSink for LocalCq {
    fn cqn(&self) -> u32 {
        self.cqn
    }

    fn push(&self, wc: WorkCompletion, _solicited: bool) -> Result<(), CqFull> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.overrun || q.queued.len() >= self.capacity {
            q.overrun = true;
            return Err(CqFull);
        }
        q.queued.push_back(wc);
        Ok(())
    }
}

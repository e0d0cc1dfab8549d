//! The timers of one QP, as a table indexed by [`TimerKind`], and the
//! engine's index of every QP's deadlines ([`TimerIndex`]), which finds
//! the next expiry without visiting every QP.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};

/// What a QP's timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerKind {
    /// No ACK came in time for the oldest outstanding request: resend
    /// (ACK timeout, 4.096 us x 2^timeout).
    Retransmit,
    /// An RNR NAK asked the requester to wait before resending.
    RnrBackoff,
    /// The driver posted faster than one visit takes: come back for the
    /// rest of its ring once the engine lock has been released.
    Revisit,
    /// The QP is paced after congestion notifications: its next packet
    /// may leave then.
    Pace,
    /// No progress for a probe timeout with a selective peer: resend the
    /// oldest unacknowledged packet and the last one ([`super::rtt`]).
    Probe,
}

impl TimerKind {
    /// Every kind.
    const ALL: [TimerKind; 5] = [
        TimerKind::Retransmit,
        TimerKind::RnrBackoff,
        TimerKind::Revisit,
        TimerKind::Pace,
        TimerKind::Probe,
    ];
}

/// Deadlines (engine time, ns) of a QP's timers; a timer without a
/// deadline is stopped. Once attached to an engine's [`TimerIndex`],
/// every deadline set is reported there.
#[derive(Debug, Default, Clone)]
pub(crate) struct Timers {
    deadlines: [Option<u64>; TimerKind::ALL.len()],
    /// The index and this QP's number in it.
    index: Option<(Arc<TimerIndex>, u32)>,
}

impl Timers {
    /// Report this QP's deadlines, as QP `qpn`, to `index` from now on.
    pub(crate) fn attach(&mut self, index: &Arc<TimerIndex>, qpn: u32) {
        self.index = Some((index.clone(), qpn));
        if let Some(d) = self.next_deadline() {
            index.push(d, qpn);
        }
    }

    /// Start (or restart) timer `k` to expire at `at`; `None` stops it.
    /// Only a deadline earlier than all the QP's others is reported: the
    /// index already holds an entry at or before those.
    pub(crate) fn set(&mut self, k: TimerKind, at: Option<u64>) {
        if let (Some(at), Some((index, qpn))) = (at, &self.index) {
            if self.next_deadline().is_none_or(|b| at < b) {
                index.push(at, *qpn);
            }
        }
        self.deadlines[k as usize] = at;
    }

    /// Stop timer `k`.
    pub(crate) fn stop(&mut self, k: TimerKind) {
        self.set(k, None);
    }

    /// Stop every timer.
    pub(crate) fn stop_all(&mut self) {
        self.deadlines = Default::default();
    }

    /// The deadline of timer `k`, if it runs.
    pub(crate) fn deadline(&self, k: TimerKind) -> Option<u64> {
        self.deadlines[k as usize]
    }

    /// Whether timer `k` runs.
    pub(crate) fn is_running(&self, k: TimerKind) -> bool {
        self.deadline(k).is_some()
    }

    /// If timer `k` has expired at `now`, stop it and say so.
    pub(crate) fn take_expired(&mut self, k: TimerKind, now: u64) -> bool {
        let expired = self.deadline(k).is_some_and(|t| now >= t);
        if expired {
            self.stop(k);
        }
        expired
    }

    /// The earliest deadline of any running timer.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.deadlines.iter().flatten().copied().min()
    }
}

/// The deadlines QPs reported, earliest first. An entry may be stale
/// (its timer stopped, ran or moved later since); what is kept true is
/// that every QP with a timer running has an entry at or before its
/// earliest deadline. Stale entries are dropped as they come to the top,
/// and the whole index is rebuilt from the QPs once it holds many more
/// entries than there are QPs.
#[derive(Debug, Default)]
pub(crate) struct TimerIndex {
    inner: Mutex<IndexInner>,
}

#[derive(Debug, Default)]
struct IndexInner {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// The entries were dropped ([`TimerIndex::trim`]): rebuild them from
    /// the QPs before the next use.
    dropped: bool,
}

/// What the index needs to know of the QPs.
pub(crate) trait QpDeadlines {
    /// QP `qpn`'s earliest deadline (None: no timer runs, or no such QP).
    fn deadline_of(&self, qpn: u32) -> Option<u64>;
    /// How many QPs there are.
    fn count(&self) -> usize;
    /// Every QP's number and earliest deadline, for a rebuild.
    fn all(&self) -> impl Iterator<Item = (u32, Option<u64>)> + '_;
}

/// Entries beyond twice the QPs that make [`TimerIndex::earliest`]
/// rebuild the index.
const SLACK: usize = 1024;

/// Engines with at most this many QPs visit them all for their deadlines
/// (fewer steps than the index takes), and only keep the index short
/// ([`TimerIndex::trim`]).
pub(crate) const SCAN_QPS: usize = 16;

impl TimerIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, IndexInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// QP `qpn` has a timer due at `at`.
    pub(crate) fn push(&self, at: u64, qpn: u32) {
        let mut g = self.lock();
        if !g.dropped {
            g.heap.push(Reverse((at, qpn)));
        }
    }

    /// While the engine visits every QP instead, drop the entries once
    /// they are many; the next use of the index rebuilds them.
    pub(crate) fn trim(&self) {
        let mut g = self.lock();
        if g.heap.len() > SLACK {
            g.heap = BinaryHeap::new();
            g.dropped = true;
        }
    }

    /// Lock the index, first rebuilding its entries from `qps` if they
    /// were dropped or are many more than the QPs.
    fn refreshed(&self, qps: &impl QpDeadlines) -> std::sync::MutexGuard<'_, IndexInner> {
        let mut g = self.lock();
        if g.dropped || g.heap.len() > 2 * qps.count() + SLACK {
            g.heap = qps
                .all()
                .filter_map(|(qpn, d)| Some(Reverse((d?, qpn))))
                .collect();
            g.dropped = false;
        }
        g
    }

    /// The earliest deadline of any of `qps`.
    pub(crate) fn earliest(&self, qps: &impl QpDeadlines) -> Option<u64> {
        let mut g = self.refreshed(qps);
        let heap = &mut g.heap;
        while let Some(&Reverse((at, qpn))) = heap.peek() {
            match qps.deadline_of(qpn) {
                Some(d) if d == at => return Some(at),
                // Moved: its entry now says when.
                Some(d) => {
                    heap.pop();
                    heap.push(Reverse((d, qpn)));
                }
                None => {
                    heap.pop();
                }
            }
        }
        None
    }

    /// The QPs with a timer due at `now`, in QP-number order, each once.
    /// Their entries leave the index: after running their timers, the
    /// caller reports each one's deadline again ([`TimerIndex::push`]).
    pub(crate) fn take_due(&self, now: u64, qps: &impl QpDeadlines) -> Vec<u32> {
        let mut g = self.refreshed(qps);
        let heap = &mut g.heap;
        let mut due = Vec::new();
        while let Some(&Reverse((at, qpn))) = heap.peek() {
            if at > now {
                break;
            }
            heap.pop();
            match qps.deadline_of(qpn) {
                Some(d) if d <= now => due.push(qpn),
                Some(d) => heap.push(Reverse((d, qpn))),
                None => {}
            }
        }
        due.sort_unstable();
        due.dedup();
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// QPs with their timers, attached to one index.
    fn qps(index: &Arc<TimerIndex>, n: u32) -> HashMap<u32, Timers> {
        (0..n)
            .map(|q| {
                let mut t = Timers::default();
                t.attach(index, q);
                (q, t)
            })
            .collect()
    }

    impl QpDeadlines for HashMap<u32, Timers> {
        fn deadline_of(&self, qpn: u32) -> Option<u64> {
            self.get(&qpn)?.next_deadline()
        }
        fn count(&self) -> usize {
            self.len()
        }
        fn all(&self) -> impl Iterator<Item = (u32, Option<u64>)> + '_ {
            self.iter().map(|(&q, t)| (q, t.next_deadline()))
        }
    }

    fn earliest(index: &TimerIndex, qps: &HashMap<u32, Timers>) -> Option<u64> {
        index.earliest(qps)
    }

    #[test]
    fn the_index_finds_the_earliest_deadline_through_stale_entries() {
        let index = Arc::new(TimerIndex::default());
        let mut qps = qps(&index, 3);
        assert_eq!(earliest(&index, &qps), None);
        qps.get_mut(&0)
            .unwrap()
            .set(TimerKind::Retransmit, Some(100));
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(50));
        assert_eq!(earliest(&index, &qps), Some(50));
        // Moved later, then stopped: the stale entries give way.
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(150));
        assert_eq!(earliest(&index, &qps), Some(100));
        qps.get_mut(&0).unwrap().stop_all();
        assert_eq!(earliest(&index, &qps), Some(150));
        // A later timer of a QP whose earlier one stops still counts.
        let q2 = qps.get_mut(&2).unwrap();
        q2.set(TimerKind::Pace, Some(120));
        q2.set(TimerKind::Revisit, Some(130));
        q2.stop(TimerKind::Pace);
        assert_eq!(earliest(&index, &qps), Some(130));
        // A destroyed QP's entries are dropped.
        qps.remove(&2);
        assert_eq!(earliest(&index, &qps), Some(150));
    }

    #[test]
    fn due_qps_come_once_each_in_number_order() {
        let index = Arc::new(TimerIndex::default());
        let mut qps = qps(&index, 4);
        for (q, at) in [(3, 10), (1, 20), (2, 500), (0, 30)] {
            qps.get_mut(&q)
                .unwrap()
                .set(TimerKind::Retransmit, Some(at));
        }
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(25));
        assert_eq!(index.take_due(30, &qps), vec![0, 1, 3]);
        assert_eq!(index.take_due(30, &qps), Vec::<u32>::new());
        assert_eq!(earliest(&index, &qps), Some(500));
    }

    #[test]
    fn dropped_entries_are_rebuilt_before_use() {
        let index = Arc::new(TimerIndex::default());
        let mut qps = qps(&index, 2);
        for at in 0..=SLACK as u64 {
            qps.get_mut(&0)
                .unwrap()
                .set(TimerKind::Retransmit, Some(9000 - at));
        }
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(9500));
        index.trim();
        assert!(index.lock().dropped);
        // Nothing is recorded meanwhile; the rebuild finds both QPs.
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(5));
        assert_eq!(earliest(&index, &qps), Some(5));
        qps.get_mut(&1).unwrap().stop_all();
        assert_eq!(earliest(&index, &qps), Some(9000 - SLACK as u64));
    }

    #[test]
    fn many_stale_entries_are_rebuilt_away() {
        let index = Arc::new(TimerIndex::default());
        let mut qps = qps(&index, 2);
        for at in 0..5000u64 {
            qps.get_mut(&0)
                .unwrap()
                .set(TimerKind::Retransmit, Some(1_000_000 - at));
        }
        qps.get_mut(&1).unwrap().set(TimerKind::Probe, Some(7));
        assert_eq!(earliest(&index, &qps), Some(7));
        assert!(index.lock().heap.len() <= 2 * qps.len() + SLACK);
        qps.get_mut(&1).unwrap().stop_all();
        assert_eq!(earliest(&index, &qps), Some(1_000_000 - 4999));
    }

    #[test]
    fn timers_expire_once_and_report_the_earliest_deadline() {
        let mut t = Timers::default();
        assert_eq!(t.next_deadline(), None);
        t.set(TimerKind::Retransmit, Some(500));
        t.set(TimerKind::RnrBackoff, Some(200));
        assert_eq!(t.next_deadline(), Some(200));
        assert!(!t.take_expired(TimerKind::RnrBackoff, 199));
        assert!(t.take_expired(TimerKind::RnrBackoff, 200));
        assert!(!t.take_expired(TimerKind::RnrBackoff, 300));
        assert_eq!(t.next_deadline(), Some(500));
        t.stop_all();
        assert!(!t.is_running(TimerKind::Retransmit));
    }
}

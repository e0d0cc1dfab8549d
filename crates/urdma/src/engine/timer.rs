//! The timers of one QP, as a table indexed by [`TimerKind`].

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
/// deadline is stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timers {
    deadlines: [Option<u64>; TimerKind::ALL.len()],
}

impl Timers {
    /// Start (or restart) timer `k` to expire at `at`; `None` stops it.
    pub(crate) fn set(&mut self, k: TimerKind, at: Option<u64>) {
        self.deadlines[k as usize] = at;
    }

    /// Stop timer `k`.
    pub(crate) fn stop(&mut self, k: TimerKind) {
        self.set(k, None);
    }

    /// Stop every timer.
    pub(crate) fn stop_all(&mut self) {
        *self = Timers::default();
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

#[cfg(test)]
mod tests {
    use super::*;

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

//! The send window's response to loss: how many PSNs an RC QP may have
//! outstanding right now, at most `super::requester::WINDOW`. It starts
//! at [`INITIAL_WINDOW`] and opens fast; a retransmission timeout closes it
//! to [`MIN_WINDOW`] and a sequence NAK halves it (with a selective peer,
//! outside a congestion episode, a timeout only halves it and a repaired
//! loss leaves it alone: see the completer), and acknowledged packets open
//! it again, fast
//! (one per packet) up to half the size it had at the last loss, then by
//! one packet per window's worth, as TCP's Reno does. Many QPs that share
//! one receiver thus back off instead of overflowing its socket with
//! retransmitted windows until their retries run out.

use super::psn;
use super::requester::WINDOW;

/// Smallest window after a loss, in packets.
pub const MIN_WINDOW: u32 = 4;
/// The window a QP starts with, in packets; acknowledgements open it one
/// packet per packet acknowledged (doubling it each round trip) up to
/// `WINDOW`, as TCP's slow start does, so that many QPs starting at
/// once do not overflow a queue on the path with full windows. (A READ
/// request counts as one packet here; its responses, up to
/// `super::requester::READ_CHUNK`, come whatever the window.)
pub const INITIAL_WINDOW: u32 = 32;

/// A QP's send window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWindow {
    size: u32,
    threshold: u32,
    /// Packets acknowledged toward the next +1 above the threshold.
    credit: u32,
    /// After a selective loss: the highest PSN sent then. Until the oldest
    /// unacknowledged PSN passes it, further losses are of the same
    /// window and shrink nothing more.
    recover: Option<u32>,
}

impl Default for SendWindow {
    fn default() -> Self {
        SendWindow {
            size: INITIAL_WINDOW,
            threshold: WINDOW,
            credit: 0,
            recover: None,
        }
    }
}

impl SendWindow {
    /// PSNs that may be outstanding now.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// `n` more packets were acknowledged.
    pub fn on_ack(&mut self, n: u32) {
        if self.size < self.threshold {
            self.size = (self.size + n).min(self.threshold);
            return;
        }
        self.credit += n;
        while self.credit >= self.size && self.size < WINDOW {
            self.credit -= self.size;
            self.size += 1;
        }
        if self.size >= WINDOW {
            self.credit = 0;
        }
    }

    /// A sequence NAK: a packet was lost but later ones arrived.
    pub fn on_loss(&mut self) {
        self.threshold = (self.size / 2).max(MIN_WINDOW);
        self.size = self.threshold;
        self.credit = 0;
    }

    /// A loss a selective NAK reported, with `una` the oldest
    /// unacknowledged PSN and `high` the highest sent: the window halves,
    /// once per window (the losses one window suffers are one sign of
    /// congestion), as TCP's NewReno does.
    pub fn on_selective_loss(&mut self, una: u32, high: u32) {
        if self.recover.is_some_and(|r| psn::lt(una, r)) {
            return;
        }
        self.recover = Some(high);
        self.on_loss();
    }

    /// Everything before `una` is acknowledged: a recovery it passed is
    /// over (so that an old PSN never compares as recent after a wrap).
    pub fn on_una(&mut self, una: u32) {
        if self.recover.is_some_and(|r| !psn::lt(una, r)) {
            self.recover = None;
        }
    }

    /// A retransmission timeout: nothing came back for a whole timeout.
    pub fn on_timeout(&mut self) {
        self.threshold = (self.size / 2).max(MIN_WINDOW);
        self.size = MIN_WINDOW;
        self.credit = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_on_loss_and_reopens_with_acks() {
        let mut w = SendWindow::default();
        assert_eq!(w.size(), INITIAL_WINDOW);
        // Slow start: one more per packet acknowledged.
        w.on_ack(INITIAL_WINDOW);
        assert_eq!(w.size(), 2 * INITIAL_WINDOW);
        w.on_ack(WINDOW);
        assert_eq!(w.size(), WINDOW);
        w.on_timeout();
        assert_eq!(w.size(), MIN_WINDOW);
        // Fast up to half the old size...
        w.on_ack(200);
        assert_eq!(w.size(), WINDOW / 2);
        // ...then one packet per window acknowledged.
        w.on_ack(WINDOW / 2);
        assert_eq!(w.size(), WINDOW / 2 + 1);
        w.on_loss();
        assert_eq!(w.size(), (WINDOW / 2).div_ceil(2));
        for _ in 0..100_000 {
            w.on_ack(7);
        }
        assert_eq!(w.size(), WINDOW);
        for _ in 0..20 {
            w.on_timeout();
        }
        assert_eq!(w.size(), MIN_WINDOW);
    }
}

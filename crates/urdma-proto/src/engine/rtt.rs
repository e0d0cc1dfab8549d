//! A QP's round-trip time, as the requester measures it, and the loss
//! probe timeout it gives.
//!
//! One packet at a time is timed, from its first transmission to the
//! acknowledgement that covers it; a packet sent again is not timed
//! (Karn's rule), since its acknowledgement could answer either copy. The
//! smoothed time and its variation follow RFC 6298.
//!
//! With a selective peer, a requester that hears nothing for a probe
//! timeout resends its oldest unacknowledged packet and its last one: a lost resend or a
//! lost last packet (which no later packet reveals) is repaired in a few
//! round trips, not after the ACK timeout (4.096 us x 2^timeout, often
//! tens of milliseconds), which stays the limit of retries as IBTA says.

use super::psn;

/// Shortest probe timeout (ns): below it, the peer's ACK coalescing and
/// scheduling make probes spurious.
pub const MIN_PROBE_NS: u64 = 200_000;
/// The probe timeout before any round trip was measured (ns).
pub const INITIAL_PROBE_NS: u64 = 1_000_000;
/// Most doublings of the probe timeout while nothing progresses.
const MAX_BACKOFF: u32 = 3;

/// Round-trip measurement of one QP.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RttEstimator {
    /// Smoothed round-trip time (ns), once measured.
    srtt: Option<u64>,
    /// Round-trip time variation (ns).
    rttvar: u64,
    /// The packet being timed: its PSN and when it left.
    timing: Option<(u32, u64)>,
    /// Probes sent since the last progress.
    backoff: u32,
}

impl RttEstimator {
    /// A new packet `p` left at `now`: time it unless one is timed.
    pub fn on_send(&mut self, p: u32, now: u64) {
        if self.timing.is_none() {
            self.timing = Some((p, now));
        }
    }

    /// Everything before `una` is acknowledged at `now`: take the sample
    /// if the timed packet is among it, and end any probe backoff.
    pub fn on_ack(&mut self, una: u32, now: u64) {
        self.backoff = 0;
        if let Some((p, at)) = self.timing {
            if psn::lt(p, una) {
                self.timing = None;
                self.sample(now.saturating_sub(at));
            }
        }
    }

    /// Packets are being sent again: the timed one may be among them.
    pub fn on_resend(&mut self) {
        self.timing = None;
    }

    /// A probe went out: the next one waits twice as long.
    pub fn on_probe(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    fn sample(&mut self, r: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
    }

    /// The smoothed round-trip time (ns), once measured.
    pub fn srtt(&self) -> Option<u64> {
        self.srtt
    }

    /// How long to wait for progress before a probe (ns): SRTT + 4 x
    /// RTTVAR, at least [`MIN_PROBE_NS`], doubled for each probe since the
    /// last progress.
    pub fn probe_timeout(&self) -> u64 {
        let base = match self.srtt {
            Some(s) => (s + 4 * self.rttvar).max(MIN_PROBE_NS),
            None => INITIAL_PROBE_NS,
        };
        base << self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_smooth_and_resends_are_not_timed() {
        let mut r = RttEstimator::default();
        assert_eq!(r.probe_timeout(), INITIAL_PROBE_NS);
        r.on_send(10, 1_000);
        r.on_send(11, 2_000);
        r.on_ack(11, 401_000);
        assert_eq!(r.srtt(), Some(400_000));
        assert_eq!(r.probe_timeout(), 400_000 + 4 * 200_000);
        // The next sample is timed from packet 20, not 11.
        r.on_send(20, 500_000);
        r.on_ack(20, 600_000);
        assert_eq!(r.srtt(), Some(400_000), "20 is not yet acknowledged");
        r.on_ack(21, 900_000);
        assert_eq!(r.srtt(), Some((7 * 400_000 + 400_000) / 8));
        // Karn: a resend drops the timing.
        r.on_send(30, 1_000_000);
        r.on_resend();
        r.on_ack(31, 9_000_000);
        assert_eq!(r.srtt(), Some(400_000));
    }

    #[test]
    fn probes_back_off_until_progress() {
        let mut r = RttEstimator::default();
        r.on_send(0, 0);
        r.on_ack(1, 10_000);
        let base = r.probe_timeout();
        assert_eq!(base, MIN_PROBE_NS);
        r.on_probe();
        r.on_probe();
        assert_eq!(r.probe_timeout(), 4 * base);
        for _ in 0..20 {
            r.on_probe();
        }
        assert_eq!(r.probe_timeout(), base << MAX_BACKOFF);
        r.on_ack(1, 20_000);
        assert_eq!(r.probe_timeout(), base);
    }
}

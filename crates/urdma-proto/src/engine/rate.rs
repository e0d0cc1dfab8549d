//! The sending rate of an RC or UC QP under congestion notification: the
//! reaction point of DCQCN (Zhu et al., SIGCOMM 2015), which RoCEv2 NICs
//! run. A QP sends unpaced until a CNP comes; from then on it is paced by
//! a token bucket at its current rate `rc`, which:
//! - on a CNP falls to `rc * (1 - alpha / 2)`, the rate it had becoming
//!   the target `rt`, while `alpha` (the estimate of how congested the path
//!   is) rises by `G * (1 - alpha)`;
//! - without CNPs, `alpha` decays by `1 - G` every [`ALPHA_INTERVAL_NS`],
//!   and every period the rate climbs: halfway to the target for
//!   [`FAST_RECOVERY_STEPS`] steps, then with the target rising by
//!   [`ADDITIVE_INCREASE`] per step;
//! - once it climbs past twice the rate the QP was measured sending at
//!   when the first CNP came, the QP is unpaced again.
//!
//! DCQCN's timers (55 us) suit a data-center round trip. A path whose
//! round trip is longer reports congestion later, and the CNPs for packets
//! sent before a cut would cut again: so the period is the QP's smoothed
//! round-trip time when that is longer ([`INCREASE_INTERVAL_NS`] at
//! least), the rate is cut at most once per period (later CNPs only raise
//! `alpha` and hold the climb back), and the rate measured before the
//! first CNP is averaged over a round trip (`alpha` still decays every
//! [`ALPHA_INTERVAL_NS`]). The bucket holds what the rate
//! sends in [`BURST_NS`], between [`MIN_BURST_BYTES`] and
//! [`BURST_BYTES`]: a slow QP does not dump a GSO run into a queue.
//!
//! Only the requests a QP sends are paced; the READ responses and atomic
//! acknowledgements its responder sends are not.
//!
//! Everything is computed from the engine time passed in: no timer runs
//! for it besides the pacing deadline the requester sets.

/// Weight of a CNP in `alpha` (DCQCN's g = 1/256).
const G: f64 = 1.0 / 256.0;
/// `alpha` decays once per this long without a CNP (DCQCN's K, 55 us).
pub const ALPHA_INTERVAL_NS: u64 = 55_000;
/// The rate climbs once per this long without a CNP (DCQCN's T).
pub const INCREASE_INTERVAL_NS: u64 = 55_000;
/// Climbing steps that only recover toward the target (DCQCN's F).
pub const FAST_RECOVERY_STEPS: u32 = 5;
/// Target rise per step after fast recovery, in bytes per ns (1 Mbit/s).
pub const ADDITIVE_INCREASE: f64 = 1e6 / 8.0 / 1e9;
/// Lowest paced rate, in bytes per ns (8 Mbit/s).
pub const MIN_RATE: f64 = 1e6 / 1e9;
/// Bytes the bucket holds at most: one GSO run of packets leaves at once.
pub const BURST_BYTES: f64 = 65536.0;
/// Bytes the bucket holds at least.
pub const MIN_BURST_BYTES: f64 = 4096.0;
/// The bucket holds what the rate sends in this long (ns).
pub const BURST_NS: f64 = 100_000.0;
/// Shortest window over which the sending rate is measured.
const MEASURE_NS: u64 = 100_000;
/// Climbing steps applied at most in one go (after a long idle time the
/// rest make no difference).
const MAX_STEPS: u64 = 10_000;

/// How a QP is paced after a CNP.
#[derive(Debug, Clone, PartialEq)]
struct Paced {
    /// Current rate, bytes per ns.
    rc: f64,
    /// Target rate, bytes per ns.
    rt: f64,
    alpha: f64,
    /// When `alpha` last changed (a CNP, or a decay step).
    alpha_at: u64,
    /// When the rate last climbed, or a CNP held it back.
    increase_at: u64,
    /// When a CNP last cut the rate.
    cut_at: u64,
    /// Climbing period and least time between cuts: the round trip, at
    /// least [`INCREASE_INTERVAL_NS`].
    period: u64,
    /// Climbing steps since the last CNP.
    steps: u32,
    /// Token bucket, bytes (may go below zero by one packet).
    tokens: f64,
    tokens_at: u64,
    /// Above this rate the QP runs unpaced again: twice the rate it was
    /// measured sending at when the first CNP came.
    ceiling: f64,
}

/// A QP's sending rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SendRate {
    paced: Option<Paced>,
    /// Bytes sent in the current measuring window, and when it began.
    window_bytes: u64,
    window_start: u64,
    /// Highest rate measured, bytes per ns.
    peak: f64,
}

/// The climbing period for a QP of smoothed round trip `srtt` (ns).
fn period(srtt: Option<u64>) -> u64 {
    srtt.unwrap_or(0).max(INCREASE_INTERVAL_NS)
}

impl SendRate {
    /// The current paced rate in bytes per ns, or None when unpaced.
    pub fn rate(&self) -> Option<f64> {
        self.paced.as_ref().map(|p| p.rc)
    }

    /// A CNP for this QP came at `now`; `srtt` is the QP's smoothed
    /// round-trip time (ns), once measured.
    pub fn on_cnp(&mut self, now: u64, srtt: Option<u64>) {
        self.advance(now);
        // Before the first measuring window ends, what it holds so far.
        let span = now.saturating_sub(self.window_start);
        let measured = if self.peak > 0.0 || span == 0 {
            self.peak
        } else {
            self.window_bytes as f64 / span as f64
        };
        let start = measured.max(MIN_RATE);
        let period = period(srtt);
        let first = self.paced.is_none();
        let p = self.paced.get_or_insert(Paced {
            rc: start,
            rt: start,
            alpha: 1.0,
            alpha_at: now,
            increase_at: now,
            cut_at: now,
            period,
            steps: 0,
            tokens: burst(start),
            tokens_at: now,
            ceiling: 2.0 * start,
        });
        p.period = period;
        if first || now.saturating_sub(p.cut_at) >= p.period {
            p.rt = p.rc;
            p.rc = (p.rc * (1.0 - p.alpha / 2.0)).max(MIN_RATE);
            p.tokens = p.tokens.min(burst(p.rc));
            p.cut_at = now;
        }
        p.alpha = (1.0 - G) * p.alpha + G;
        p.alpha_at = now;
        p.increase_at = now;
        p.steps = 0;
    }

    /// When a packet may leave: `now` if it may now, else the time the
    /// bucket holds a token again.
    pub fn next_send(&mut self, now: u64) -> u64 {
        self.advance(now);
        match &self.paced {
            Some(p) if p.tokens <= 0.0 => now + (-p.tokens / p.rc).ceil() as u64 + 1,
            _ => now,
        }
    }

    /// A packet of `bytes` left at `now`; `srtt` as for
    /// [`SendRate::on_cnp`].
    pub fn sent(&mut self, now: u64, bytes: usize, srtt: Option<u64>) {
        if let Some(p) = &mut self.paced {
            p.tokens -= bytes as f64;
            p.period = period(srtt);
        }
        self.window_bytes += bytes as u64;
        let span = now.saturating_sub(self.window_start);
        if span >= srtt.unwrap_or(0).max(MEASURE_NS) {
            let sample = self.window_bytes as f64 / span as f64;
            // A window spent mostly idle says little: the peak only rises,
            // and falls slowly.
            self.peak = sample.max(self.peak * 0.99);
            self.window_bytes = 0;
            self.window_start = now;
        }
    }

    /// Bring `alpha`, the rate and the bucket up to `now`.
    fn advance(&mut self, now: u64) {
        let Some(p) = &mut self.paced else { return };
        let decays = now.saturating_sub(p.alpha_at) / ALPHA_INTERVAL_NS;
        if decays > 0 {
            p.alpha *= (1.0 - G).powi(decays.min(i32::MAX as u64) as i32);
            p.alpha_at += decays * ALPHA_INTERVAL_NS;
        }
        let steps = now.saturating_sub(p.increase_at) / p.period;
        for _ in 0..steps.min(MAX_STEPS) {
            if p.steps >= FAST_RECOVERY_STEPS {
                p.rt += ADDITIVE_INCREASE;
            }
            p.rc = (p.rt + p.rc) / 2.0;
            p.steps = p.steps.saturating_add(1);
        }
        p.increase_at += steps * p.period;
        p.tokens = (p.tokens + now.saturating_sub(p.tokens_at) as f64 * p.rc).min(burst(p.rc));
        p.tokens_at = now;
        if steps >= MAX_STEPS || p.rc > p.ceiling {
            self.paced = None;
        }
    }
}

/// What the bucket holds at most at rate `rc` (bytes per ns).
fn burst(rc: f64) -> f64 {
    (rc * BURST_NS).clamp(MIN_BURST_BYTES, BURST_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A QP measured sending at `rate` bytes per ns for a while.
    fn sending_at(rate: f64) -> (SendRate, u64) {
        let mut s = SendRate::default();
        let mut now = 0;
        for _ in 0..100 {
            now += 10_000;
            s.sent(now, (rate * 10_000.0) as usize, None);
        }
        (s, now)
    }

    #[test]
    fn unpaced_until_a_cnp() {
        let (mut s, now) = sending_at(1.0);
        assert_eq!(s.rate(), None);
        assert_eq!(s.next_send(now), now);
        s.on_cnp(now, None);
        let r = s.rate().unwrap();
        // alpha starts at 1: the first CNP halves the measured rate.
        assert!((r - 0.5).abs() < 0.05, "rate {r}");
    }

    #[test]
    fn cnps_cut_and_quiet_restores() {
        let (mut s, mut now) = sending_at(1.0);
        s.on_cnp(now, None);
        let first = s.rate().unwrap();
        for _ in 0..5 {
            now += INCREASE_INTERVAL_NS;
            s.on_cnp(now, None);
        }
        let cut = s.rate().unwrap();
        assert!(cut < first / 4.0, "{cut} vs {first}");
        assert!(cut >= MIN_RATE);
        // Fast recovery: halfway to the target per step.
        now += INCREASE_INTERVAL_NS;
        s.next_send(now);
        assert!(s.rate().unwrap() > cut);
        // Long quiet: unpaced again.
        now += 2 * MAX_STEPS * INCREASE_INTERVAL_NS;
        s.next_send(now);
        assert_eq!(s.rate(), None);
    }

    #[test]
    fn the_bucket_paces_to_the_rate() {
        let (mut s, mut now) = sending_at(1.0);
        s.on_cnp(now, None);
        let rate = s.rate().unwrap();
        // Send 1 MB as fast as allowed and see how long it takes.
        let start = now;
        let mut sent = 0usize;
        while sent < 1_000_000 {
            now = s.next_send(now);
            s.sent(now, 1000, None);
            sent += 1000;
        }
        let took = (now - start) as f64;
        // The bucket's burst leaves at once; the rest at about the rate
        // (which climbs a little meanwhile).
        let expect = (1_000_000.0 - burst(rate)) / rate;
        assert!(
            took < expect * 1.05 && took > expect * 0.5,
            "{took} vs {expect}"
        );
    }

    #[test]
    fn one_cut_per_round_trip_and_cnps_meanwhile_hold_the_climb() {
        let srtt = Some(2_000_000);
        let (mut s, mut now) = sending_at(1.0);
        s.on_cnp(now, srtt);
        let cut = s.rate().unwrap();
        // CNPs for packets sent before the cut: no further cut, and no
        // climb while they come.
        for _ in 0..10 {
            now += 100_000;
            s.on_cnp(now, srtt);
            assert_eq!(s.rate(), Some(cut));
        }
        // Quiet for less than a round trip: no climb yet; after one, a step.
        now += 1_000_000;
        s.next_send(now);
        assert_eq!(s.rate(), Some(cut));
        now += 1_000_000;
        s.next_send(now);
        assert!(s.rate().unwrap() > cut);
        // A round trip after the cut, a CNP cuts again.
        s.on_cnp(now, srtt);
        assert!(s.rate().unwrap() < cut);
    }

    #[test]
    fn a_cnp_before_the_first_round_trip_ends_starts_from_what_was_sent() {
        let srtt = Some(10_000_000);
        let mut s = SendRate::default();
        let mut now = 0;
        for _ in 0..5 {
            now += 10_000;
            s.sent(now, 10_000, srtt);
        }
        // 50 us into a 10 ms measuring window, at 1 byte per ns.
        s.on_cnp(now, srtt);
        let r = s.rate().unwrap();
        assert!((r - 0.5).abs() < 0.05, "rate {r}");
    }

    #[test]
    fn a_slow_qp_has_a_small_bucket() {
        let srtt = Some(100_000_000);
        let (mut s, now) = sending_at(0.005);
        s.on_cnp(now, srtt);
        // 2.5 MB/s: a 64 KiB burst would be 26 ms of its sending.
        assert_eq!(burst(s.rate().unwrap()), MIN_BURST_BYTES);
        // Idle long enough to fill any bucket, too short to climb.
        let t = now + 50_000_000;
        let mut at_once = 0;
        while s.next_send(t) == t {
            s.sent(t, 1024, srtt);
            at_once += 1024;
        }
        assert!(at_once as f64 <= MIN_BURST_BYTES + 1024.0, "{at_once}");
        assert!(at_once as f64 >= MIN_BURST_BYTES, "{at_once}");
    }

    #[test]
    fn never_below_the_floor() {
        let (mut s, mut now) = sending_at(0.001);
        for _ in 0..1000 {
            now += 1_000;
            s.on_cnp(now, None);
        }
        assert!(s.rate().unwrap() >= MIN_RATE);
    }
}

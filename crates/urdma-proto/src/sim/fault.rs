//! Fault configuration of the links, and its injection into every
//! datagram the engines send.

use super::trace::TraceKind;
use super::{InFlight, SimNet};
use rand::rngs::StdRng;
use rand::Rng;
use std::cmp::Reverse;
use std::net::SocketAddr;

/// Faults and latency of one direction of a link. Probabilities are in
/// `[0, 1]` (values outside are clamped, NaN counts as 0); each is drawn
/// independently for every packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability that a packet is lost.
    pub drop: f64,
    /// Probability that a packet is delivered twice (each copy gets its
    /// own delay and may be corrupted on its own).
    pub duplicate: f64,
    /// Probability that a packet is held back by an extra random delay
    /// (uniform in `0..=reorder_delay_ns`), letting later packets pass it.
    /// This is the only fault that reorders packets of one link.
    pub reorder: f64,
    /// Largest extra delay of a reordered packet, in ns.
    pub reorder_delay_ns: u64,
    /// Base one-way latency, in ns.
    pub delay_ns: u64,
    /// Random extra latency of every packet, uniform in `0..=jitter_ns`.
    /// With `fifo`, jitter keeps the link's order (a packet never arrives
    /// before one sent earlier on the same link, unless that one was
    /// reordered).
    pub jitter_ns: u64,
    /// Jitter keeps packets in order. Without it every packet's jitter is
    /// independent, which shuffles a burst sent at one instant (there is
    /// no serialisation delay in the simulation).
    pub fifo: bool,
    /// Probability that one random bit of a packet is flipped.
    pub corrupt: f64,
}

impl Default for FaultConfig {
    /// A perfect link with 2 us of latency.
    fn default() -> Self {
        FaultConfig::perfect()
    }
}

impl FaultConfig {
    /// A link that loses, duplicates, reorders and corrupts nothing, with
    /// 2 us of latency and no jitter.
    pub fn perfect() -> Self {
        FaultConfig {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay_ns: 0,
            delay_ns: 2_000,
            jitter_ns: 0,
            fifo: true,
            corrupt: 0.0,
        }
    }

    /// A link that loses every packet (a dead peer or a cut cable).
    pub fn dead() -> Self {
        FaultConfig {
            drop: 1.0,
            ..FaultConfig::perfect()
        }
    }

    /// A link losing a fraction `drop` of its packets, with a little
    /// duplication, reordering and corruption besides.
    pub fn lossy(drop: f64) -> Self {
        FaultConfig {
            drop,
            duplicate: 0.01,
            reorder: 0.02,
            reorder_delay_ns: 50_000,
            delay_ns: 2_000,
            jitter_ns: 1_000,
            fifo: true,
            corrupt: 0.005,
        }
    }
}

/// True with probability `p` (clamped to [0, 1]; NaN is 0). Draws from
/// the RNG only when the outcome is not certain.
fn chance(rng: &mut StdRng, p: f64) -> bool {
    if p.is_nan() || p <= 0.0 {
        false
    } else if p >= 1.0 {
        true
    } else {
        rng.gen::<f64>() < p
    }
}

impl SimNet {
    /// Faults of every link without its own configuration.
    pub fn set_default_faults(&mut self, faults: FaultConfig) {
        self.default_faults = faults;
    }

    /// Faults of the link from device `src` to device `dst` (one direction).
    pub fn set_link(&mut self, src: usize, dst: usize, faults: FaultConfig) {
        self.links.insert((src, dst), faults);
    }

    /// Faults of the link from `src` to `dst`.
    pub fn link(&self, src: usize, dst: usize) -> FaultConfig {
        self.links
            .get(&(src, dst))
            .copied()
            .unwrap_or(self.default_faults)
    }

    /// Apply the link's faults to one datagram and queue what survives.
    pub(super) fn transmit(&mut self, src: usize, dst_addr: SocketAddr, data: Vec<u8>) {
        self.stats.sent += 1;
        let Some(&dst) = self.by_addr.get(&dst_addr) else {
            self.stats.undeliverable += 1;
            self.record(TraceKind::Undeliverable, src, dst_addr, &data);
            return;
        };
        let f = self.link(src, dst);
        if chance(&mut self.rng, f.drop) {
            self.stats.dropped += 1;
            self.record(TraceKind::Dropped, src, dst_addr, &data);
            return;
        }
        let copies = if chance(&mut self.rng, f.duplicate) {
            2
        } else {
            1
        };
        let mut original = Some(data);
        for copy in 0..copies {
            let mut data = if copy + 1 == copies {
                original.take().unwrap_or_default()
            } else {
                original.clone().unwrap_or_default()
            };
            let mut delay = f.delay_ns;
            if f.jitter_ns > 0 {
                delay = delay.saturating_add(self.rng.gen_range(0..=f.jitter_ns));
            }
            let at = if chance(&mut self.rng, f.reorder) {
                self.stats.reordered += 1;
                if f.reorder_delay_ns > 0 {
                    delay = delay.saturating_add(self.rng.gen_range(0..=f.reorder_delay_ns));
                }
                self.now.saturating_add(delay)
            } else if !f.fifo {
                self.now.saturating_add(delay)
            } else {
                let last = self.last_arrival.entry((src, dst)).or_insert(0);
                *last = self.now.saturating_add(delay).max(*last);
                *last
            };
            if copy == 0 {
                self.record(TraceKind::Sent { arrives: at }, src, dst_addr, &data);
            } else {
                self.stats.duplicated += 1;
                self.record(TraceKind::Duplicated { arrives: at }, src, dst_addr, &data);
            }
            if !data.is_empty() && chance(&mut self.rng, f.corrupt) {
                let bit = self.rng.gen_range(0..data.len() * 8);
                if let Some(b) = data.get_mut(bit / 8) {
                    *b ^= 1 << (bit % 8);
                }
                self.stats.corrupted += 1;
                self.record(TraceKind::Corrupted { bit }, src, dst_addr, &data);
            }
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at,
                seq: self.seq,
                src,
                dst,
                data,
            }));
        }
    }
}

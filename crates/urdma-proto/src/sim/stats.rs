//! Totals of what the network did, and the digest of every delivery.

use super::{InFlight, SimNet};

/// Totals of what the simulated network did with packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SimStats {
    /// Datagrams the engines produced.
    pub sent: u64,
    /// Datagrams handed to an engine (duplicates included).
    pub delivered: u64,
    /// Datagrams lost on purpose.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies held back by a reordering delay.
    pub reordered: u64,
    /// Copies with a flipped bit.
    pub corrupted: u64,
    /// Datagrams for an address no device of the net has.
    pub undeliverable: u64,
    /// Timer events handled (one per device whose deadline was due).
    pub timer_events: u64,
    /// Steps taken.
    pub steps: u64,
    /// A digest of every delivery (time, link, length and headers): two
    /// runs with equal digests delivered the same packets at the same times.
    pub digest: u64,
}

/// Fold one delivery into a running FNV-1a digest (the first 64 bytes of
/// the datagram cover every transport header).
pub(super) fn digest(mut h: u64, p: &InFlight) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    if h == 0 {
        h = 0xCBF2_9CE4_8422_2325;
    }
    let head = (p.at, p.src as u64, p.dst as u64, p.data.len() as u64);
    for w in [head.0, head.1, head.2, head.3] {
        for b in w.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
    }
    for &b in p.data.iter().take(64) {
        h = (h ^ u64::from(b)).wrapping_mul(PRIME);
    }
    h
}

impl SimNet {
    /// What the network did so far.
    pub fn stats(&self) -> SimStats {
        self.stats
    }
}

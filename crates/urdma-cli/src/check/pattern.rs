//! Deterministic sizes, offsets and contents: everything a round does
//! derives from the seed and the QP and round numbers, so both sides know
//! what to expect.

use urdma::rng::{mix, SplitMix64};

/// Largest message of the workload.
pub(super) const MAX_MSG: usize = 128 * 1024 + 5;
/// Offsets inside a slot are below this (unaligned on purpose).
pub(super) const SKEW: usize = 64;
/// One buffer slot: a message at any offset below `SKEW`, rounded to 64.
pub(super) const SLOT: usize = (MAX_MSG + SKEW).div_ceil(64) * 64;

/// The generator of round `round` of QP `q` in a run seeded with `seed`.
fn round_rng(seed: u64, q: u64, round: u64) -> SplitMix64 {
    SplitMix64::new(mix(seed ^ mix(q ^ mix(round))))
}

/// What a byte stream carries: one per message, plus the READ areas.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stream {
    Write = 1,
    WriteImm = 2,
    Send = 3,
    ReadArea = 4,
}

/// The stream of message `s` of round `round` of QP `q`.
pub(super) fn tag(seed: u64, q: usize, round: u64, s: Stream) -> u64 {
    mix(seed ^ mix(((q as u64) << 56) ^ (round << 4) ^ s as u64))
}

/// Bytes `start..start + out.len()` of the stream `tag`.
fn pattern(tag: u64, start: usize, out: &mut [u8]) {
    let (mut pos, mut i) = (start, 0);
    while i < out.len() {
        let block = mix(tag ^ ((pos / 8) as u64).wrapping_mul(0xd6e8_feb8_6659_fd93));
        let from = pos % 8;
        let n = (8 - from).min(out.len() - i);
        out[i..i + n].copy_from_slice(&block.to_le_bytes()[from..from + n]);
        i += n;
        pos += n;
    }
}

/// Bytes `start..start + len` of the stream `tag`.
pub(super) fn pattern_vec(tag: u64, start: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    pattern(tag, start, &mut v);
    v
}

/// A message: length, offset in the local slot, offset in the remote slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Xfer {
    pub(super) len: usize,
    pub(super) local: usize,
    pub(super) remote: usize,
}

/// Everything one round of one QP does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Round {
    pub(super) write: Xfer,
    pub(super) write_imm: Xfer,
    pub(super) send: Xfer,
    pub(super) read: Xfer,
    pub(super) add: u64,
    pub(super) cas_fail: bool,
    pub(super) cas_next: u64,
}

/// A message length: tiny, single packet, around a multiple of the MTU,
/// large, or (rarely, where allowed) zero.
fn pick_len(g: &mut SplitMix64, mtu: usize, zero: bool) -> usize {
    match g.below(32) {
        0 if zero => 0,
        0..=7 => 1 + g.below(64),
        8..=15 => 65 + g.below(mtu - 65),
        16..=23 => (1 + g.below(4)) * mtu + g.below(3) - 1,
        _ => {
            let lo = 4 * mtu + 2;
            lo + g.below(MAX_MSG - lo + 1)
        }
    }
}

/// A message of a round: its length and its offsets in the two slots.
fn xfer(g: &mut SplitMix64, mtu: usize, zero: bool) -> Xfer {
    Xfer {
        len: pick_len(g, mtu, zero),
        local: g.below(SKEW),
        remote: g.below(SKEW),
    }
}

/// What round `round` of QP `q` does with path MTU `mtu`.
pub(super) fn plan(seed: u64, mtu: usize, q: usize, round: u64) -> Round {
    let mut g = round_rng(seed, q as u64, round);
    Round {
        write: xfer(&mut g, mtu, true),
        write_imm: xfer(&mut g, mtu, true),
        send: xfer(&mut g, mtu, true),
        read: xfer(&mut g, mtu, false),
        add: 1 + g.below(1_000_000) as u64,
        cas_fail: g.below(4) == 0,
        cas_next: g.next_u64() | 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_random_access() {
        let whole = pattern_vec(42, 0, 100);
        for start in 0..20 {
            assert_eq!(pattern_vec(42, start, 50), whole[start..start + 50]);
        }
        assert_ne!(pattern_vec(43, 0, 100), whole);
    }

    #[test]
    fn plans_fit_their_slots() {
        for mtu in [256, 1024, 4096] {
            for r in 0..2000 {
                let p = plan(7, mtu, 3, r);
                for x in [p.write, p.write_imm, p.send, p.read] {
                    assert!(x.len <= MAX_MSG);
                    assert!(x.local + x.len <= SLOT && x.remote + x.len <= SLOT);
                }
                assert!(p.read.len > 0);
            }
        }
        assert_eq!(plan(1, 1024, 0, 5).add, plan(1, 1024, 0, 5).add);
    }
}

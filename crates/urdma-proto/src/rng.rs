//! The project's one seeded pseudo-random generator: SplitMix64.
//!
//! The seeded streams the project writes itself draw from here: the
//! simulated network's per-device seeds (derived with [`mix`]), `urdma
//! check`'s sizes and contents, the end-to-end tests' data patterns. One
//! seed means the same stream in every process and every run. (The
//! simulator's fault choices and the engine's QPNs and keys use `rand`'s
//! seeded `StdRng`.)

/// The golden-ratio increment SplitMix64 adds per step.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a strong, bijective 64-bit mixer. Use it
/// to derive well-spread, distinct seeds from structured values.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small deterministic generator (SplitMix64): not for keys or anything
/// an attacker must not guess.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose stream is a function of `seed` alone.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let out = mix(self.0);
        self.0 = self.0.wrapping_add(GAMMA);
        out
    }

    /// A value in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (the values of
        // the algorithm's published reference implementation).
        let mut g = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..3).map(|_| g.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
    }

    #[test]
    fn below_stays_in_range() {
        let mut g = SplitMix64::new(7);
        assert!((0..1000).all(|_| g.below(3) < 3));
    }
}

//! Deterministic data patterns and a fast streaming digest. Both processes
//! run this same code, so a pattern or digest computed on one side can be
//! checked on the other.

/// Size of the blocks the checkers generate and compare at a time.
const BLOCK: usize = 64 * 1024;

use urdma::rng::mix;

/// The 8 bytes of pattern `seed` at positions `8 * idx .. 8 * idx + 8`.
fn word(seed: u64, idx: u64) -> [u8; 8] {
    mix(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ idx).to_le_bytes()
}

/// Byte at position `pos` of pattern `seed`.
pub fn byte_at(seed: u64, pos: u64) -> u8 {
    word(seed, pos / 8)[(pos % 8) as usize]
}

/// Fill `out` with positions `base .. base + out.len()` of pattern `seed`.
/// Any sub-range of a pattern can be produced (and checked) on its own.
pub fn fill(seed: u64, base: u64, out: &mut [u8]) {
    let mut p = base;
    let mut i = 0;
    while i < out.len() && p & 7 != 0 {
        out[i] = byte_at(seed, p);
        i += 1;
        p += 1;
    }
    let mut chunks = out[i..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, p / 8));
        p += 8;
    }
    for b in chunks.into_remainder() {
        *b = byte_at(seed, p);
        p += 1;
    }
}

/// Positions `base .. base + len` of pattern `seed` as a vector.
pub fn pattern(seed: u64, base: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(seed, base, &mut v);
    v
}

/// Index of the first byte of `data` that differs from positions
/// `base ..` of pattern `seed`, or None if all match.
pub fn first_mismatch(seed: u64, base: u64, data: &[u8]) -> Option<usize> {
    let mut expect = vec![0u8; BLOCK.min(data.len())];
    for (k, chunk) in data.chunks(BLOCK).enumerate() {
        let e = &mut expect[..chunk.len()];
        fill(seed, base + (k * BLOCK) as u64, e);
        if chunk != e {
            let i = chunk.iter().zip(e.iter()).position(|(a, b)| a != b);
            return i.map(|i| k * BLOCK + i);
        }
    }
    None
}

/// A fast non-cryptographic streaming hash (4 lanes over 32-byte blocks),
/// used to compare large buffers across processes.
pub struct Hasher {
    acc: [u64; 4],
    buf: [u8; 32],
    nbuf: usize,
    total: u64,
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher {
            acc: [
                0x243F_6A88_85A3_08D3,
                0x1319_8A2E_0370_7344,
                0xA409_3822_299F_31D0,
                0x082E_FA98_EC4E_6C89,
            ],
            buf: [0; 32],
            nbuf: 0,
            total: 0,
        }
    }
}

impl Hasher {
    fn block(&mut self, b: &[u8]) {
        for (lane, w) in self.acc.iter_mut().zip(b.chunks_exact(8)) {
            let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            *lane = (*lane ^ w)
                .wrapping_mul(0x9FB2_1C65_1E98_DF25)
                .rotate_left(29);
        }
    }

    /// Feed bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.nbuf > 0 {
            let n = (32 - self.nbuf).min(data.len());
            self.buf[self.nbuf..self.nbuf + n].copy_from_slice(&data[..n]);
            self.nbuf += n;
            data = &data[n..];
            if self.nbuf < 32 {
                return;
            }
            let b = self.buf;
            self.block(&b);
            self.nbuf = 0;
        }
        let mut blocks = data.chunks_exact(32);
        for b in &mut blocks {
            self.block(b);
        }
        let rest = blocks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.nbuf = rest.len();
    }

    /// The digest of everything fed.
    pub fn finish(mut self) -> u64 {
        if self.nbuf > 0 {
            let mut b = [0u8; 32];
            b[..self.nbuf].copy_from_slice(&self.buf[..self.nbuf]);
            self.block(&b);
        }
        let mut h = mix(self.total);
        for a in self.acc {
            h = mix(h ^ a);
        }
        h
    }
}

/// Digest of one buffer.
pub fn digest(data: &[u8]) -> u64 {
    let mut h = Hasher::default();
    h.update(data);
    h.finish()
}

/// Self-check of the helpers above (run as a trial).
pub fn selfcheck() {
    let v = pattern(7, 3, 1000);
    let mut h = Hasher::default();
    for c in v.chunks(13) {
        h.update(c);
    }
    assert_eq!(h.finish(), digest(&v));
    assert_eq!(first_mismatch(7, 3, &v), None);
    assert_eq!(&pattern(7, 0, 1003)[3..], &v[..]);
    let mut w = v.clone();
    w[777] ^= 1;
    assert_eq!(first_mismatch(7, 3, &w), Some(777));
    assert_ne!(digest(&w), digest(&v));
}

//! What a side verified, and how it is told: the mismatch notes, the
//! device counters and the summary line.

use super::pattern::pattern_vec;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use urdma::{Counter, Device, Mr};

/// Mismatch descriptions kept (the rest are only counted).
const MAX_NOTES: usize = 10;

/// What one side verified.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Tally {
    /// Work requests completed successfully.
    pub(super) ops: u64,
    /// Bytes compared with what was expected.
    pub(super) bytes: u64,
    /// Mismatches found.
    pub(super) errors: u64,
    /// Descriptions of the first mismatches.
    pub(super) notes: Vec<String>,
}

impl Tally {
    /// Count a mismatch, and keep its description if there is room.
    pub(super) fn mismatch(&mut self, what: String) {
        self.errors += 1;
        if self.notes.len() < MAX_NOTES {
            self.notes.push(what);
        }
    }

    /// Fold in what another QP or side verified.
    pub(super) fn add(&mut self, o: Tally) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        for n in o.notes {
            if self.notes.len() < MAX_NOTES {
                self.notes.push(n);
            }
        }
    }

    /// Compare `len` bytes at `off` of `mr` with bytes `start..` of stream `tag`.
    pub(super) fn verify(
        &mut self,
        mr: &Mr,
        off: usize,
        len: usize,
        tag: u64,
        start: usize,
        what: &str,
    ) {
        let mut got = vec![0; len];
        if let Err(e) = mr.read_at(off, &mut got) {
            self.mismatch(format!("{what}: cannot read the buffer: {e}"));
            return;
        }
        self.compare(&got, tag, start, what);
    }

    /// Compare `got` with bytes `start..` of stream `tag`.
    pub(super) fn compare(&mut self, got: &[u8], tag: u64, start: usize, what: &str) {
        let len = got.len();
        let want = pattern_vec(tag, start, len);
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => self.bytes += len as u64,
            Some(i) => {
                let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                self.mismatch(format!(
                    "{what}: {bad} of {len} bytes differ, the first at byte {i} \
                     (got {:#04x}, expected {:#04x})",
                    got[i], want[i]
                ));
            }
        }
    }

    /// Compare a 64-bit value.
    pub(super) fn expect_u64(&mut self, got: u64, want: u64, what: &str) {
        if got == want {
            self.bytes += 8;
        } else {
            self.mismatch(format!("{what}: got {got:#x}, expected {want:#x}"));
        }
    }
}

/// A device's packet counters, for the log.
pub(super) fn counters_line(dev: &Device) -> String {
    let k = dev.counters();
    format!(
        "{} packets sent, {} received, {} retransmitted, {} timeouts, \
         {} sequence NAKs received, {} RNR NAKs received, {} duplicates, \
         {} ICRC errors, {} dropped, {} send errors",
        k[Counter::TxPackets],
        k[Counter::RxPackets],
        k[Counter::Retransmits],
        k[Counter::Timeouts],
        k[Counter::SeqNaksReceived],
        k[Counter::RnrNaksReceived],
        k[Counter::Duplicates],
        k[Counter::IcrcErrors],
        k[Counter::Dropped],
        k[Counter::TxErrors]
    )
}

/// Print the summary line; fail on any error.
pub(super) fn finish(t: &Tally, fatal: &[String]) -> Result<()> {
    for n in &t.notes {
        eprintln!("urdma check: mismatch: {n}");
    }
    if t.errors as usize > t.notes.len() {
        eprintln!(
            "urdma check: ... and {} more mismatches",
            t.errors as usize - t.notes.len()
        );
    }
    let errors = t.errors + fatal.len() as u64;
    println!(
        "check: {} operations, {} bytes verified, {errors} errors",
        t.ops, t.bytes
    );
    if !fatal.is_empty() {
        bail!("{}", fatal.join("; "));
    }
    if t.errors > 0 {
        bail!("{} mismatches", t.errors);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_are_counted() {
        let mut t = Tally::default();
        let mut v = pattern_vec(9, 3, 100);
        t.compare(&v, 9, 3, "good");
        assert_eq!((t.bytes, t.errors), (100, 0));
        v[42] ^= 0x10;
        v[77] ^= 0x01;
        t.compare(&v, 9, 3, "bad");
        assert_eq!((t.bytes, t.errors), (100, 1));
        assert!(t.notes[0].contains("2 of 100 bytes differ, the first at byte 42"));
        t.expect_u64(5, 6, "word");
        assert_eq!(t.errors, 2);
    }
}

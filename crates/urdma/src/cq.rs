//! Completion queues: a bounded ring of work completions in shared memory,
//! with blocking waits and completion notification that work across
//! processes.
//!
//! One producer at a time (the engine, under its lock) pushes; consumers
//! (application threads, possibly in another process) poll without any
//! system call. Consumers of one [`CqShared`] are serialised by a local
//! mutex. Each side treats the other as untrusted: whatever the other
//! process writes into the ring, this side never panics and never accesses
//! memory outside the mapping; the worst outcome is wrong completions or
//! an overrun.
//!
//! # Memory layout
//!
//! The header holds native-endian atomics (both sides run on one host),
//! one cache line per writer (only `armed` is written by both sides):
//!
//! | offset | size | field     | written by |
//! |-------:|-----:|-----------|------------|
//! |      0 |    8 | `tail`    | producer: index of the next slot to fill |
//! |      8 |    4 | `overrun` | producer: 1 once a completion was lost |
//! |     12 |    4 | `seq`     | producer: futex word, bumped to wake waiters |
//! |     64 |    8 | `head`    | consumer: index of the next slot to take |
//! |     72 |    4 | `waiters` | consumer: threads sleeping on `seq` |
//! |    128 |    4 | `armed`   | consumer arms, producer disarms: 0 = no, 1 = any completion, 2 (or other) = solicited or error only |
//! |    192 | 64·N | slots     | producer: completion `i` lives in slot `i % N` |
//!
//! `head` and `tail` are free-running `u64` indices; the occupancy is
//! `tail - head` (wrapping), and a value above `N` (the capacity each side
//! knows from its own records, never read from the ring) means corrupted
//! indices: the producer treats it as full, the consumer as an overrun.
//!
//! A slot holds one [`WorkCompletion`]: `wr_id` u64 at 0, then u32s
//! `status`, `opcode`, `vendor_err`, `byte_len`, `imm_data`,
//! `invalidated_rkey`, `qp_num`, `src_qp`, `wc_flags` at 8..44, u16s
//! `pkey_index`, `slid` at 44 and 46, u8s `sl`, `dlid_path_bits` at 48 and
//! 49, zero up to 64. Unknown status values decode as
//! [`WcStatus::GeneralErr`]; an unknown opcode decodes as
//! [`WcOpcode::Send`] with status `GeneralErr`.
//!
//! # Protocol
//!
//! - push: fail (setting `overrun` and waking waiters) if `overrun` is set
//!   or the ring is full; else write the slot, store `tail + 1` (Release),
//!   then, after a SeqCst fence, bump `seq` and `FUTEX_WAKE` it if
//!   `waiters` is non-zero, and disarm `armed` if this completion fires
//!   it, running the notifier installed in the pushing process.
//! - poll: load `overrun`, then `tail` (Acquire), copy the slots from
//!   `head`, then store the new `head` (Release). Once the entries are
//!   gone, a set `overrun` yields [`Error::CqOverrun`].
//! - wait: read `seq`, increment `waiters`, re-check the ring (SeqCst, so
//!   either the waiter sees the new `tail` or the producer sees the
//!   waiter), `FUTEX_WAIT` on `seq`, decrement `waiters`, re-check.
//! - req_notify: store 1, or compare-exchange 0 -> 2 for solicited-only,
//!   then a SeqCst fence pairing with push's: either a poll after arming
//!   sees the completion or the producer sees the arming. push disarms
//!   with a swap (solicited or error completion) or a compare-exchange
//!   1 -> 0 (any other), so each arming fires at most once.

use crate::error::{Error, Result};
use crate::shm::{self, SharedMapping};
use crate::types::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{
    fence, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Callback run when an armed CQ receives a completion.
pub type CqNotifier = Box<dyn Fn() + Send + Sync>;

const TAIL: usize = 0;
const OVERRUN: usize = 8;
const SEQ: usize = 12;
const HEAD: usize = 64;
const WAITERS: usize = 72;
const ARMED: usize = 128;
const HEADER_LEN: usize = 192;
const SLOT_LEN: usize = 64;

const ARMED_NONE: u32 = 0;
const ARMED_ANY: u32 = 1;
const ARMED_SOLICITED: u32 = 2;

/// The header words of a ring.
struct Header<'a> {
    tail: &'a AtomicU64,
    overrun: &'a AtomicU32,
    seq: &'a AtomicU32,
    head: &'a AtomicU64,
    waiters: &'a AtomicU32,
    armed: &'a AtomicU32,
}

impl<'a> Header<'a> {
    fn of(map: &'a SharedMapping) -> Self {
        Header {
            tail: map.atomic_u64(TAIL),
            overrun: map.atomic_u32(OVERRUN),
            seq: map.atomic_u32(SEQ),
            head: map.atomic_u64(HEAD),
            waiters: map.atomic_u32(WAITERS),
            armed: map.atomic_u32(ARMED),
        }
    }
}

/// Bytes of shared memory a ring of `capacity` entries needs.
fn ring_len(capacity: usize) -> io::Result<usize> {
    capacity
        .checked_mul(SLOT_LEN)
        .and_then(|s| s.checked_add(HEADER_LEN))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "CQ capacity overflow"))
}

/// Every status and opcode, to decode their numbers without `unsafe`.
#[rustfmt::skip]
const STATUSES: [WcStatus; 14] = {
    use WcStatus::*;
    [Success, LocLenErr, LocQpOpErr, LocProtErr, WrFlushErr, BadRespErr, LocAccessErr,
     RemInvReqErr, RemAccessErr, RemOpErr, RetryExcErr, RnrRetryExcErr, FatalErr, GeneralErr]
};
#[rustfmt::skip]
const OPCODES: [WcOpcode; 7] = {
    use WcOpcode::*;
    [Send, RdmaWrite, RdmaRead, CompSwap, FetchAdd, Recv, RecvRdmaWithImm]
};

fn encode(wc: &WorkCompletion) -> [u8; SLOT_LEN] {
    let mut b = [0u8; SLOT_LEN];
    b[0..8].copy_from_slice(&wc.wr_id.to_le_bytes());
    let words = [
        wc.status as u32,
        wc.opcode as u32,
        wc.vendor_err,
        wc.byte_len,
        wc.imm_data,
        wc.invalidated_rkey,
        wc.qp_num,
        wc.src_qp,
        wc.wc_flags.bits(),
    ];
    for (i, w) in words.iter().enumerate() {
        b[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
    b[44..46].copy_from_slice(&wc.pkey_index.to_le_bytes());
    b[46..48].copy_from_slice(&wc.slid.to_le_bytes());
    b[48] = wc.sl;
    b[49] = wc.dlid_path_bits;
    b
}

fn decode(b: &[u8; SLOT_LEN]) -> WorkCompletion {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let mut wr_id = [0u8; 8];
    wr_id.copy_from_slice(&b[0..8]);
    let status = STATUSES.into_iter().find(|s| *s as u32 == u32_at(8));
    let (status, opcode) = match OPCODES.into_iter().find(|o| *o as u32 == u32_at(12)) {
        Some(op) => (status, op),
        None => (None, WcOpcode::Send),
    };
    WorkCompletion {
        wr_id: u64::from_le_bytes(wr_id),
        status: status.unwrap_or(WcStatus::GeneralErr),
        opcode,
        vendor_err: u32_at(16),
        byte_len: u32_at(20),
        imm_data: u32_at(24),
        invalidated_rkey: u32_at(28),
        qp_num: u32_at(32),
        src_qp: u32_at(36),
        wc_flags: WcFlags::from_bits_truncate(u32_at(40)),
        pkey_index: u16_at(44),
        slid: u16_at(46),
        sl: b[48],
        dlid_path_bits: b[49],
    }
}

/// A completion queue shared by the engine (producer) and the application,
/// possibly in different processes (see the module docs for the layout).
pub struct CqShared {
    /// CQ number.
    pub cqn: u32,
    capacity: usize,
    map: SharedMapping,
    consumer: Mutex<()>,
    notifier: Mutex<Option<CqNotifier>>,
}

impl std::fmt::Debug for CqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqShared")
            .field("cqn", &self.cqn)
            .field("capacity", &self.capacity)
            .field("fd", &self.map.fd())
            .finish()
    }
}

/// A completion could not be queued because the CQ is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqFull;

impl CqShared {
    /// A CQ holding at most `capacity` completions, in a memfd when
    /// possible (see [`CqShared::new_shared`]), else in anonymous shared
    /// memory.
    ///
    /// # Panics
    /// If the memory cannot be allocated at all.
    pub fn new(cqn: u32, capacity: usize) -> Self {
        let len = ring_len(capacity).expect("capacity overflow");
        let map = SharedMapping::create(c"urdma-cq", len)
            .or_else(|_| SharedMapping::anonymous(len))
            .unwrap_or_else(|e| panic!("cannot allocate a CQ of {capacity} entries: {e}"));
        Self::with_map(cqn, capacity, map)
    }

    /// A CQ holding at most `capacity` completions in a new sealed memfd,
    /// which [`CqShared::fd`] returns for another process.
    pub fn new_shared(cqn: u32, capacity: usize) -> io::Result<Self> {
        let map = SharedMapping::create(c"urdma-cq", ring_len(capacity)?)?;
        Ok(Self::with_map(cqn, capacity, map))
    }

    /// Map a CQ ring that another process made with
    /// [`CqShared::new_shared`]. `capacity` must come from the caller's own
    /// records. Fails with `InvalidInput` if the file is not sealed against
    /// shrinking or is too small for `capacity`.
    pub fn from_fd(cqn: u32, capacity: usize, fd: OwnedFd) -> io::Result<Self> {
        let map = SharedMapping::from_fd(fd, ring_len(capacity)?)?;
        Ok(Self::with_map(cqn, capacity, map))
    }

    fn with_map(cqn: u32, capacity: usize, map: SharedMapping) -> Self {
        CqShared {
            cqn,
            capacity,
            map,
            consumer: Mutex::new(()),
            notifier: Mutex::new(None),
        }
    }

    /// The memfd holding the ring, to pass to another process (None when
    /// the ring is in anonymous memory).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.map.fd()
    }

    /// Maximum number of completions held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn hdr(&self) -> Header<'_> {
        Header::of(&self.map)
    }

    /// Entries between `head` and `tail`; None for corrupted indices.
    fn occupancy(&self, head: u64, tail: u64) -> Option<u64> {
        let n = tail.wrapping_sub(head);
        (n <= self.capacity as u64).then_some(n)
    }

    /// Offset of the slot for index `idx` (capacity must be non-zero).
    fn slot_off(&self, idx: u64) -> usize {
        HEADER_LEN + (idx % self.capacity as u64) as usize * SLOT_LEN
    }

    fn lock_consumer(&self) -> MutexGuard<'_, ()> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a completion (engine side). A full CQ enters the overrun
    /// state and the completion is reported lost through [`CqFull`].
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqFull> {
        let h = self.hdr();
        if h.overrun.load(Acquire) != 0 {
            return self.set_overrun();
        }
        let tail = h.tail.load(Relaxed);
        let head = h.head.load(Acquire);
        match self.occupancy(head, tail) {
            Some(n) if n < self.capacity as u64 => {}
            _ => return self.set_overrun(),
        }
        let slot = encode(&wc);
        if self.map.write_bytes(self.slot_off(tail), &slot).is_err() {
            return self.set_overrun();
        }
        h.tail.store(tail.wrapping_add(1), Release);
        self.wake_waiters();
        if self.disarm(solicited || wc.status != WcStatus::Success) {
            self.notify_now();
        }
        Ok(())
    }

    /// The producer is gone (the NIC ended): put the CQ in the overrun
    /// state, so that waiters wake and polls report an error once the
    /// completions already queued are taken, and fire its notifier.
    pub fn fail(&self) {
        let _ = self.set_overrun();
        self.notify_now();
    }

    fn set_overrun(&self) -> Result<(), CqFull> {
        self.hdr().overrun.store(1, Release);
        self.wake_waiters();
        Err(CqFull)
    }

    fn wake_waiters(&self) {
        let h = self.hdr();
        fence(SeqCst);
        if h.waiters.load(SeqCst) != 0 {
            h.seq.fetch_add(1, SeqCst);
            shm::futex_wake(h.seq);
        }
    }

    /// Disarm if a completion (`solicited`: solicited or in error) fires
    /// the current arming; true when it fired.
    fn disarm(&self, solicited: bool) -> bool {
        let armed = self.hdr().armed;
        let cur = armed.load(SeqCst);
        if cur == ARMED_NONE || (cur != ARMED_ANY && !solicited) {
            return false;
        }
        if solicited {
            armed.swap(ARMED_NONE, SeqCst) != ARMED_NONE
        } else {
            armed
                .compare_exchange(ARMED_ANY, ARMED_NONE, SeqCst, SeqCst)
                .is_ok()
        }
    }

    /// Take up to `max` completions. After an overrun, the completions
    /// still held are returned first, then [`Error::CqOverrun`].
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let _g = self.lock_consumer();
        self.poll_locked(max, out)
    }

    fn poll_locked(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let h = self.hdr();
        // `overrun` before `tail`: once it is set, `tail` is final.
        let overrun = h.overrun.load(Acquire) != 0;
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Relaxed);
        let avail = self.occupancy(head, tail).ok_or(Error::CqOverrun)?;
        let n = avail.min(max as u64) as usize;
        if n == 0 {
            return if overrun {
                Err(Error::CqOverrun)
            } else {
                Ok(0)
            };
        }
        out.reserve(n);
        let mut buf = [0u8; SLOT_LEN];
        for i in 0..n as u64 {
            let off = self.slot_off(head.wrapping_add(i));
            self.map
                .read_bytes(off, &mut buf)
                .map_err(|_| Error::CqOverrun)?;
            out.push(decode(&buf));
        }
        h.head.store(head.wrapping_add(n as u64), Release);
        Ok(n)
    }

    /// Drop the completions of QP `qpn` still waiting (consumer side, as
    /// a QP moves to RESET; hardware drivers clean their CQs so too); the
    /// others keep their order. The producer only writes at `tail` and
    /// beyond, so the kept entries move toward it and `head` advances past
    /// the slots freed. Returns how many were dropped.
    pub fn discard_qp(&self, qpn: u32) -> usize {
        let _g = self.lock_consumer();
        let h = self.hdr();
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Relaxed);
        let Some(n) = self.occupancy(head, tail) else {
            return 0;
        };
        let mut buf = [0u8; SLOT_LEN];
        let mut dropped = 0u64;
        // Newest first: a kept entry moves up by the number dropped after it.
        for i in (0..n).rev() {
            let idx = head.wrapping_add(i);
            if self.map.read_bytes(self.slot_off(idx), &mut buf).is_err() {
                return 0;
            }
            if decode(&buf).qp_num == qpn {
                dropped += 1;
            } else if dropped > 0 {
                let to = self.slot_off(idx.wrapping_add(dropped));
                if self.map.write_bytes(to, &buf).is_err() {
                    return 0;
                }
            }
        }
        h.head.store(head.wrapping_add(dropped), Release);
        dropped as usize
    }

    /// Number of completions waiting.
    pub fn len(&self) -> usize {
        let h = self.hdr();
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Acquire);
        self.occupancy(head, tail).unwrap_or(0) as usize
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries, an overrun or corrupted indices: something for poll.
    fn ready(&self) -> bool {
        let h = self.hdr();
        h.overrun.load(SeqCst) != 0 || h.tail.load(SeqCst) != h.head.load(SeqCst)
    }

    /// Block until at least one completion is available (or the CQ
    /// overran), then take up to `max`. `None` waits forever.
    pub fn wait(
        &self,
        max: usize,
        timeout: Option<Duration>,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let h = self.hdr();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            {
                let _g = self.lock_consumer();
                if self.ready() {
                    return self.poll_locked(max, out);
                }
            }
            let remaining = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => return Err(Error::Timeout),
                },
            };
            let seq = h.seq.load(SeqCst);
            h.waiters.fetch_add(1, SeqCst);
            fence(SeqCst);
            let r = if self.ready() {
                Ok(())
            } else {
                shm::futex_wait(h.seq, seq, remaining)
            };
            h.waiters.fetch_sub(1, SeqCst);
            match r {
                Err(e) if e.kind() != io::ErrorKind::TimedOut => return Err(e.into()),
                _ => {}
            }
        }
    }

    /// Arm the CQ: the notifier runs on the next completion (or the next
    /// solicited or error completion with `solicited_only`). Arming for
    /// any completion wins over solicited-only.
    pub fn req_notify(&self, solicited_only: bool) {
        let armed = self.hdr().armed;
        if solicited_only {
            let _ = armed.compare_exchange(ARMED_NONE, ARMED_SOLICITED, SeqCst, SeqCst);
        } else {
            armed.store(ARMED_ANY, SeqCst);
        }
        // Pairs with the fence in push: either a later poll sees the new
        // tail or the producer sees the arming.
        fence(SeqCst);
    }

    /// Install the notification callback.
    pub fn set_notifier(&self, n: Option<CqNotifier>) {
        *self.notifier.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }

    /// Run the installed notifier now (the process that consumes the CQ
    /// calls this when the producing process reports that the armed CQ
    /// fired).
    pub fn notify_now(&self) {
        if let Some(n) = self
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            n();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, 1)
    }

    fn dup(fd: Option<BorrowedFd<'_>>) -> OwnedFd {
        fd.unwrap().try_clone_to_owned().unwrap()
    }

    fn counter(cq: &CqShared) -> Arc<AtomicUsize> {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        cq.set_notifier(Some(Box::new(move || {
            h.fetch_add(1, SeqCst);
        })));
        hits
    }

    #[test]
    fn full_cq_reports_overrun_after_remaining_entries() {
        let cq = CqShared::new(1, 2);
        cq.push(wc(1), false).unwrap();
        cq.push(wc(2), false).unwrap();
        assert_eq!(cq.push(wc(3), false), Err(CqFull));
        let mut out = Vec::new();
        assert_eq!(cq.poll(10, &mut out).unwrap(), 2);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(cq.poll(10, &mut out), Err(Error::CqOverrun)));
        assert_eq!(cq.push(wc(4), false), Err(CqFull));
    }

    #[test]
    fn notifier_fires_once_per_arm() {
        let cq = CqShared::new(1, 8);
        let hits = counter(&cq);
        cq.push(wc(1), false).unwrap();
        assert_eq!(hits.load(SeqCst), 0);
        cq.req_notify(true);
        cq.push(wc(2), false).unwrap();
        assert_eq!(hits.load(SeqCst), 0);
        cq.push(wc(3), true).unwrap();
        assert_eq!(hits.load(SeqCst), 1);
        cq.push(wc(4), true).unwrap();
        assert_eq!(hits.load(SeqCst), 1);
    }

    #[test]
    fn wait_times_out_and_wakes() {
        let cq = Arc::new(CqShared::new(1, 8));
        let mut out = Vec::new();
        assert!(matches!(
            cq.wait(1, Some(Duration::from_millis(5)), &mut out),
            Err(Error::Timeout)
        ));
        let c = cq.clone();
        let t = std::thread::spawn(move || c.push(wc(9), false));
        assert_eq!(
            cq.wait(4, Some(Duration::from_secs(10)), &mut out).unwrap(),
            1
        );
        assert_eq!(out[0].wr_id, 9);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn ring_wraps_many_times_in_order() {
        let cq = CqShared::new_shared(1, 3).unwrap();
        let (mut next_in, mut next_out, mut out) = (0u64, 0u64, Vec::new());
        for round in 0..1000usize {
            for _ in 0..round % 3 + 1 {
                cq.push(wc(next_in), false).unwrap();
                next_in += 1;
            }
            assert_eq!(cq.len() as u64, next_in - next_out);
            assert_eq!(cq.poll(0, &mut out).unwrap(), 0);
            while cq.poll(round % 2 + 1, &mut out).unwrap() > 0 {}
            for w in out.drain(..) {
                assert_eq!(w.wr_id, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, next_in);
        }
    }

    #[test]
    fn overrun_persists_and_wakes_a_waiter_in_another_mapping() {
        let a = CqShared::new_shared(1, 2).unwrap();
        let b = Arc::new(CqShared::from_fd(1, 2, dup(a.fd())).unwrap());
        let b2 = b.clone();
        // Push only once the waiter sleeps, so the futex wake is exercised.
        let t = std::thread::spawn(move || {
            while b2.hdr().waiters.load(SeqCst) == 0 {
                std::thread::yield_now();
            }
            b2.push(wc(1), false).unwrap();
        });
        let mut out = Vec::new();
        let long = Some(Duration::from_secs(30));
        assert_eq!(a.wait(8, long, &mut out).unwrap(), 1);
        t.join().unwrap();
        assert_eq!(a.hdr().waiters.load(SeqCst), 0);
        b.push(wc(2), false).unwrap();
        b.push(wc(3), false).unwrap();
        assert_eq!(b.push(wc(4), false), Err(CqFull));
        assert_eq!(a.len(), 2);
        // The entries still held come first, then the overrun, for good.
        assert_eq!(a.wait(1, long, &mut out).unwrap(), 1);
        assert_eq!(a.poll(8, &mut out).unwrap(), 1);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(matches!(a.wait(1, long, &mut out), Err(Error::CqOverrun)));
        assert!(matches!(a.poll(1, &mut out), Err(Error::CqOverrun)));
        assert_eq!(b.push(wc(5), false), Err(CqFull));
        assert!(a.is_empty());
        let z = CqShared::new(1, 0);
        assert_eq!(z.push(wc(1), false), Err(CqFull));
        assert!(matches!(z.poll(1, &mut out), Err(Error::CqOverrun)));
    }

    #[test]
    fn waits_across_mappings_lose_no_wakeup() {
        const N: u64 = 20_000;
        let a = CqShared::new_shared(1, 4).unwrap();
        let b = CqShared::from_fd(1, 4, dup(a.fd())).unwrap();
        let t = std::thread::spawn(move || {
            for i in 0..N {
                while b.len() == b.capacity() {
                    std::thread::yield_now();
                }
                b.push(wc(i), false).unwrap();
            }
        });
        let (mut out, long) = (Vec::new(), Some(Duration::from_secs(30)));
        while (out.len() as u64) < N {
            a.wait(3, long, &mut out).unwrap();
        }
        assert!(out.iter().zip(0..).all(|(w, i)| w.wr_id == i));
        t.join().unwrap();
    }

    #[test]
    fn from_fd_refuses_unsealed_or_small_files() {
        let fd = crate::shm::unsealed_memfd(ring_len(4).unwrap());
        let e = CqShared::from_fd(1, 4, fd).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let a = CqShared::new_shared(1, 4).unwrap();
        let e = CqShared::from_fd(1, 5, dup(a.fd())).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let b = CqShared::from_fd(1, 4, dup(a.fd())).unwrap();
        b.push(wc(7), false).unwrap();
        let mut out = Vec::new();
        assert_eq!(a.poll(4, &mut out).unwrap(), 1);
        assert_eq!(out[0].wr_id, 7);
    }

    #[test]
    fn notifier_fires_once_per_arm_across_mappings() {
        let a = CqShared::new_shared(1, 8).unwrap();
        let b = CqShared::from_fd(1, 8, dup(a.fd())).unwrap();
        let (hits_a, hits_b) = (counter(&a), counter(&b));
        a.req_notify(false);
        b.push(wc(1), false).unwrap();
        b.push(wc(2), false).unwrap();
        assert_eq!(hits_b.load(SeqCst), 1);
        a.req_notify(true);
        a.req_notify(true);
        b.push(wc(3), false).unwrap();
        assert_eq!(hits_b.load(SeqCst), 1);
        let err = WorkCompletion::new(4, WcStatus::RemOpErr, WcOpcode::Send, 1);
        b.push(err, false).unwrap();
        b.push(err, true).unwrap();
        assert_eq!(hits_b.load(SeqCst), 2);
        a.req_notify(true);
        a.req_notify(false);
        b.push(wc(5), false).unwrap();
        assert_eq!(hits_b.load(SeqCst), 3);
        assert_eq!(hits_a.load(SeqCst), 0);
        a.notify_now();
        assert_eq!(hits_a.load(SeqCst), 1);
    }

    #[test]
    fn codec_roundtrips_and_survives_garbage() {
        let mut w = WorkCompletion::new(u64::MAX - 3, WcStatus::Success, WcOpcode::Recv, 9);
        (w.vendor_err, w.byte_len, w.imm_data, w.invalidated_rkey) = (1, 2, 3, 4);
        (w.src_qp, w.wc_flags, w.pkey_index, w.slid) = (5, WcFlags::all(), 6, 7);
        (w.sl, w.dlid_path_bits) = (8, 9);
        for (s, o) in STATUSES.into_iter().zip(OPCODES.into_iter().cycle()) {
            (w.status, w.opcode) = (s, o);
            assert_eq!(decode(&encode(&w)), w);
        }
        let mut b = encode(&w);
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(decode(&b).status, WcStatus::GeneralErr);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            let d = decode(&b);
            assert!(OPCODES.contains(&d.opcode) && STATUSES.contains(&d.status));
        }
    }

    #[test]
    fn hostile_indices_and_slots_stay_in_bounds() {
        let cap = 5usize;
        let len = ring_len(cap).unwrap();
        // A larger file than the ring needs, with a guard area after it.
        let raw = SharedMapping::create(c"t", len + 4096).unwrap();
        raw.write_bytes(len, &[0xa5; 4096]).unwrap();
        raw.write_bytes(HEADER_LEN, &vec![0xff; cap * SLOT_LEN])
            .unwrap();
        let cq = CqShared::from_fd(1, cap, dup(raw.fd())).unwrap();
        let big = u64::MAX;
        let pairs = [
            (0, big),
            (big, 0),
            (big - 1, big),
            (3, 2),
            (big - 4, 0),
            (1 << 63, 7),
        ];
        let mut out = Vec::new();
        for (head, tail) in pairs {
            Header::of(&raw).head.store(head, SeqCst);
            Header::of(&raw).tail.store(tail, SeqCst);
            Header::of(&raw).overrun.store(0, SeqCst);
            Header::of(&raw).armed.store(0xdead, SeqCst);
            let pushed = cq.push(wc(head), true).is_ok();
            assert_eq!(pushed, tail.wrapping_sub(head) < cap as u64);
            let _ = cq.len();
            let _ = cq.poll(usize::MAX, &mut out);
            let _ = cq.wait(1, Some(Duration::ZERO), &mut out);
        }
        assert!(out.iter().any(|w| w.wr_id == big - 1));
        let mut guard = [0u8; 4096];
        raw.read_bytes(len, &mut guard).unwrap();
        assert!(guard.iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn a_qp_moved_to_reset_leaves_no_completion_behind() {
        let cq = CqShared::new(1, 4);
        let of =
            |id: u64, qpn: u32| WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, qpn);
        // Wrap the ring once first, so the kept entries move across its end.
        for id in 0..3 {
            cq.push(of(id, 9), false).unwrap();
        }
        let mut out = Vec::new();
        cq.poll(3, &mut out).unwrap();
        for (id, qpn) in [(10, 1), (11, 2), (12, 1), (13, 3)] {
            cq.push(of(id, qpn), false).unwrap();
        }
        assert_eq!(cq.discard_qp(1), 2);
        assert_eq!(cq.discard_qp(7), 0);
        out.clear();
        cq.poll(8, &mut out).unwrap();
        let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [11, 13]);
        for id in 20..24 {
            cq.push(of(id, 2), false).unwrap();
        }
        out.clear();
        cq.poll(8, &mut out).unwrap();
        assert_eq!(out.len(), 4, "the freed slots are usable again");
    }
}

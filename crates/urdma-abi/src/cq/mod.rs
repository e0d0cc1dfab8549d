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
//! [`WcOpcode::Send`](crate::types::WcOpcode::Send) with status `GeneralErr`.
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
//!
//! # Resizing
//!
//! A CQ's ring can be replaced by one of another size
//! ([`CqShared::replace_ring`]). The consumer process makes the new ring
//! and holds its consumers off ([`CqShared::consumer_pause`]); the
//! producing process moves the waiting completions, the overrun state and
//! the arming into it (head 0, tail the count) under its write lock, so
//! that no push runs meanwhile, and swaps; then the consumer swaps its own
//! mapping. Threads sleeping on the old ring are woken and find the new.

mod slot;

use crate::error::{Error, Result};
use crate::shm::{self, SharedMapping};
use crate::types::{WcStatus, WorkCompletion};
use slot::{decode, encode, SLOT_LEN};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{
    fence, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
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

/// One ring: its memory and how many completions it holds.
pub struct Ring {
    map: SharedMapping,
    capacity: usize,
}

impl Ring {
    /// A new ring of `capacity` entries: in a sealed memfd when `shared`
    /// (to pass to another process, [`Ring::fd`]), else in a memfd when
    /// possible or anonymous shared memory.
    pub fn new(capacity: usize, shared: bool) -> io::Result<Self> {
        let len = ring_len(capacity)?;
        let map = match shared {
            true => SharedMapping::create(c"urdma-cq", len)?,
            false => SharedMapping::create(c"urdma-cq", len)
                .or_else(|_| SharedMapping::anonymous(len))?,
        };
        Ok(Ring { map, capacity })
    }

    /// Map a ring another process made with [`Ring::new`]; `capacity`
    /// from the caller's own records. Fails with `InvalidInput` if the
    /// file is not sealed against shrinking or is too small.
    pub fn from_fd(capacity: usize, fd: OwnedFd) -> io::Result<Self> {
        let map = SharedMapping::from_fd(fd, ring_len(capacity)?)?;
        Ok(Ring { map, capacity })
    }

    /// A descriptor of the memfd holding the ring, to pass to another
    /// process (None when the ring is in anonymous memory).
    pub fn fd(&self) -> Option<io::Result<OwnedFd>> {
        self.map.fd().map(|fd| fd.try_clone_to_owned())
    }

    /// Completions the ring holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn hdr(&self) -> Header<'_> {
        Header::of(&self.map)
    }

    /// Offset of the slot for index `idx` (capacity must be non-zero).
    fn slot_off(&self, idx: u64) -> usize {
        HEADER_LEN + (idx % self.capacity as u64) as usize * SLOT_LEN
    }

    /// Entries between `head` and `tail`; None for corrupted indices.
    fn occupancy(&self, head: u64, tail: u64) -> Option<u64> {
        let n = tail.wrapping_sub(head);
        (n <= self.capacity as u64).then_some(n)
    }

    /// Bump `seq` and wake the threads sleeping on it, if any.
    fn wake_waiters(&self) {
        let h = self.hdr();
        fence(SeqCst);
        if h.waiters.load(SeqCst) != 0 {
            h.seq.fetch_add(1, SeqCst);
            shm::futex_wake(h.seq);
        }
    }

    /// Copy the waiting completions of `self` to the start of `to`, with
    /// the overrun state and the arming; `InvalidInput` if they do not fit.
    fn move_to(&self, to: &Ring) -> Result<()> {
        let (h, t) = (self.hdr(), to.hdr());
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Acquire);
        let n = self.occupancy(head, tail).ok_or(Error::CqOverrun)?;
        if n > to.capacity as u64 {
            return Err(Error::inval(format!(
                "{n} completions wait; the new ring holds {}",
                to.capacity
            )));
        }
        let mut buf = [0u8; SLOT_LEN];
        for i in 0..n {
            self.map
                .read_bytes(self.slot_off(head.wrapping_add(i)), &mut buf)
                .map_err(|_| Error::CqOverrun)?;
            to.map
                .write_bytes(to.slot_off(i), &buf)
                .map_err(|_| Error::CqOverrun)?;
        }
        t.head.store(0, Release);
        t.tail.store(n, Release);
        t.overrun.store(h.overrun.load(Acquire), Release);
        t.armed.store(h.armed.load(SeqCst), SeqCst);
        Ok(())
    }
}

/// A completion queue shared by the engine (producer) and the application,
/// possibly in different processes (see the module docs for the layout).
pub struct CqShared {
    /// CQ number.
    pub cqn: u32,
    ring: RwLock<Arc<Ring>>,
    consumer: Mutex<()>,
    notifier: Mutex<Option<CqNotifier>>,
}

impl std::fmt::Debug for CqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.ring();
        f.debug_struct("CqShared")
            .field("cqn", &self.cqn)
            .field("capacity", &r.capacity)
            .field("fd", &r.map.fd())
            .finish()
    }
}

pub use urdma_proto::sink::{CompletionSink, CqFull};

impl CompletionSink for CqShared {
    fn cqn(&self) -> u32 {
        self.cqn
    }

    fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqFull> {
        CqShared::push(self, wc, solicited)
    }
}

impl CqShared {
    /// A CQ holding at most `capacity` completions, in a memfd when
    /// possible (see [`CqShared::new_shared`]), else in anonymous shared
    /// memory.
    ///
    /// # Panics
    /// If the memory cannot be allocated at all.
    pub fn new(cqn: u32, capacity: usize) -> Self {
        let ring = Ring::new(capacity, false)
            .unwrap_or_else(|e| panic!("cannot allocate a CQ of {capacity} entries: {e}"));
        Self::with_ring(cqn, ring)
    }

    /// A CQ holding at most `capacity` completions in a new sealed memfd,
    /// which [`CqShared::fd`] returns for another process.
    pub fn new_shared(cqn: u32, capacity: usize) -> io::Result<Self> {
        Ok(Self::with_ring(cqn, Ring::new(capacity, true)?))
    }

    /// Map a CQ ring that another process made with
    /// [`CqShared::new_shared`]. `capacity` must come from the caller's own
    /// records. Fails with `InvalidInput` if the file is not sealed against
    /// shrinking or is too small for `capacity`.
    pub fn from_fd(cqn: u32, capacity: usize, fd: OwnedFd) -> io::Result<Self> {
        Ok(Self::with_ring(cqn, Ring::from_fd(capacity, fd)?))
    }

    fn with_ring(cqn: u32, ring: Ring) -> Self {
        CqShared {
            cqn,
            ring: RwLock::new(Arc::new(ring)),
            consumer: Mutex::new(()),
            notifier: Mutex::new(None),
        }
    }

    fn ring(&self) -> RwLockReadGuard<'_, Arc<Ring>> {
        self.ring.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A descriptor of the memfd holding the ring, to pass to another
    /// process (None when the ring is in anonymous memory).
    pub fn fd(&self) -> Option<io::Result<OwnedFd>> {
        self.ring().fd()
    }

    /// Maximum number of completions held.
    pub fn capacity(&self) -> usize {
        self.ring().capacity
    }

    /// Use `new` from now on. `moved`: the completions, overrun state and
    /// arming were already moved into it (by the producing process, whose
    /// mapping of it is the same memory); else they are moved here, and
    /// `InvalidInput` (with no change) says more completions wait than
    /// it holds. The producer side calls this with no push running (it
    /// takes the write lock); the consumer side while its consumers are
    /// held off ([`CqShared::consumer_pause`]). Threads sleeping on the
    /// old ring are woken to find the new one.
    pub fn replace_ring(&self, new: Ring, moved: bool) -> Result<()> {
        let mut cur = self.ring.write().unwrap_or_else(|e| e.into_inner());
        if !moved {
            cur.move_to(&new)?;
        }
        // An overrun or a NIC that ended (fail) while the rings were being
        // swapped is the new ring's too.
        if cur.hdr().overrun.load(Acquire) != 0 {
            new.hdr().overrun.store(1, Release);
        }
        let old = std::mem::replace(&mut *cur, Arc::new(new));
        drop(cur);
        let h = old.hdr();
        h.seq.fetch_add(1, SeqCst);
        shm::futex_wake(h.seq);
        Ok(())
    }

    /// Hold this process's consumers (poll, wait, arming) off while the
    /// ring is replaced (polls wait for the NIC's answer to the resize).
    pub fn consumer_pause(&self) -> MutexGuard<'_, ()> {
        self.lock_consumer()
    }

    fn lock_consumer(&self) -> MutexGuard<'_, ()> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a completion (engine side). A full CQ enters the overrun
    /// state and the completion is reported lost through [`CqFull`].
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> Result<(), CqFull> {
        let r = self.ring();
        let h = r.hdr();
        if h.overrun.load(Acquire) != 0 {
            return set_overrun(&r);
        }
        let tail = h.tail.load(Relaxed);
        let head = h.head.load(Acquire);
        match r.occupancy(head, tail) {
            Some(n) if n < r.capacity as u64 => {}
            _ => return set_overrun(&r),
        }
        let slot = encode(&wc);
        if r.map.write_bytes(r.slot_off(tail), &slot).is_err() {
            return set_overrun(&r);
        }
        h.tail.store(tail.wrapping_add(1), Release);
        r.wake_waiters();
        let fired = disarm(&r, solicited || wc.status != WcStatus::Success);
        drop(r);
        if fired {
            self.notify_now();
        }
        Ok(())
    }

    /// The producer is gone (the NIC ended): put the CQ in the overrun
    /// state, so that waiters wake and polls report an error once the
    /// completions already queued are taken, and fire its notifier.
    pub fn fail(&self) {
        let _ = set_overrun(&self.ring());
        self.notify_now();
    }

    /// Take up to `max` completions. After an overrun, the completions
    /// still held are returned first, then [`Error::CqOverrun`].
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let _g = self.lock_consumer();
        poll_ring(&self.ring(), max, out)
    }

    /// Drop the completions of QP `qpn` still waiting (consumer side, as
    /// a QP moves to RESET; hardware drivers clean their CQs so too); the
    /// others keep their order. The producer only writes at `tail` and
    /// beyond, so the kept entries move toward it and `head` advances past
    /// the slots freed. Returns how many were dropped.
    pub fn discard_qp(&self, qpn: u32) -> usize {
        let _g = self.lock_consumer();
        let r = self.ring();
        let h = r.hdr();
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Relaxed);
        let Some(n) = r.occupancy(head, tail) else {
            return 0;
        };
        let mut buf = [0u8; SLOT_LEN];
        let mut dropped = 0u64;
        // Newest first: a kept entry moves up by the number dropped after it.
        for i in (0..n).rev() {
            let idx = head.wrapping_add(i);
            if r.map.read_bytes(r.slot_off(idx), &mut buf).is_err() {
                return 0;
            }
            if decode(&buf).qp_num == qpn {
                dropped += 1;
            } else if dropped > 0 {
                let to = r.slot_off(idx.wrapping_add(dropped));
                if r.map.write_bytes(to, &buf).is_err() {
                    return 0;
                }
            }
        }
        h.head.store(head.wrapping_add(dropped), Release);
        dropped as usize
    }

    /// Number of completions waiting.
    pub fn len(&self) -> usize {
        let r = self.ring();
        let h = r.hdr();
        let tail = h.tail.load(Acquire);
        let head = h.head.load(Acquire);
        r.occupancy(head, tail).unwrap_or(0) as usize
    }

    /// True when no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block until at least one completion is available (or the CQ
    /// overran), then take up to `max`. `None` waits forever.
    pub fn wait(
        &self,
        max: usize,
        timeout: Option<Duration>,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            {
                let _g = self.lock_consumer();
                let r = self.ring();
                if ready(&r) {
                    return poll_ring(&r, max, out);
                }
            }
            let remaining = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => return Err(Error::Timeout),
                },
            };
            // Sleep on this ring; a replacement wakes it after the swap,
            // and one that came before is seen below.
            let ring = Arc::clone(&self.ring());
            let h = ring.hdr();
            let seq = h.seq.load(SeqCst);
            h.waiters.fetch_add(1, SeqCst);
            fence(SeqCst);
            let current = Arc::ptr_eq(&ring, &self.ring());
            let r = if !current || ready(&ring) {
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
        // With the consumers: not while the ring is being replaced.
        let _g = self.lock_consumer();
        let r = self.ring();
        let armed = r.hdr().armed;
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

fn set_overrun(r: &Ring) -> Result<(), CqFull> {
    r.hdr().overrun.store(1, Release);
    r.wake_waiters();
    Err(CqFull)
}

/// Disarm if a completion (`solicited`: solicited or in error) fires
/// the current arming; true when it fired.
fn disarm(r: &Ring, solicited: bool) -> bool {
    let armed = r.hdr().armed;
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

/// Entries, an overrun or corrupted indices: something for poll.
fn ready(r: &Ring) -> bool {
    let h = r.hdr();
    h.overrun.load(SeqCst) != 0 || h.tail.load(SeqCst) != h.head.load(SeqCst)
}

/// Take up to `max` completions of `r` (consumers held off by the caller).
fn poll_ring(r: &Ring, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
    let h = r.hdr();
    // `overrun` before `tail`: once it is set, `tail` is final.
    let overrun = h.overrun.load(Acquire) != 0;
    let tail = h.tail.load(Acquire);
    let head = h.head.load(Relaxed);
    let avail = r.occupancy(head, tail).ok_or(Error::CqOverrun)?;
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
        let off = r.slot_off(head.wrapping_add(i));
        r.map
            .read_bytes(off, &mut buf)
            .map_err(|_| Error::CqOverrun)?;
        out.push(decode(&buf));
    }
    h.head.store(head.wrapping_add(n as u64), Release);
    Ok(n)
}

#[cfg(test)]
mod tests;

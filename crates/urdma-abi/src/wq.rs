//! Work queues in shared memory: the rings through which a driver hands
//! send and receive work requests to the NIC, as a driver writes WQEs into
//! a hardware queue and rings its doorbell.
//!
//! One producer (the driver, serialised by a local mutex) writes requests;
//! one consumer (the NIC, under its engine lock) takes them. Each side
//! treats the other as untrusted: whatever the other process writes, this
//! side never panics and never accesses memory outside the mapping. The
//! worst a driver can do with its own ring is lose or corrupt its own work
//! requests; the NIC keeps its own copies of the indices it owns.
//!
//! # Memory layout
//!
//! Native-endian atomics, one cache line per writer:
//!
//! | offset | size | field      | written by |
//! |-------:|-----:|------------|------------|
//! |      0 |    8 | `prod`     | driver: index of the next slot to fill |
//! |     64 |    8 | `cons`     | NIC: index of the next slot to take |
//! |     72 |    8 | `retired`  | NIC: requests finished (completed, flushed or refused) |
//! |    128 |    4 | `doorbell` | NIC sets 1 to be told of the next post; the driver swaps it to 0 and tells |
//! |    192 | L·N | slots      | driver: request `i` lives in slot `i % N` |
//!
//! Indices are free-running `u64`s. A slot holds a `u32` length and that
//! many bytes of the bincode-encoded request. The driver may have at most
//! `N` requests between `retired` and `prod`, so a queue is full exactly
//! when `N` posted requests have not completed, as on hardware (for a
//! receive queue the NIC retires a request when it takes it).
//!
//! # Doorbells
//!
//! The NIC looks at a send ring whenever it works on the QP (a post, an
//! acknowledgement, a timer), so a QP whose queued work waits for the send
//! window needs no doorbell. When a new request could go out at once (all
//! queued work transmitted, or the QP in ERR) it arms the doorbell (store
//! 1, SeqCst) and checks the ring again; the driver publishes `prod` and then (SeqCst) swaps the
//! doorbell to 0, telling the NIC if it was 1. Either the NIC sees the new
//! request or the driver sees the armed doorbell, so no post is forgotten.
//!
//! While the NIC busy-polls a ring ([`WorkRing::start_polling`], its own
//! state, not in the mapping), arming leaves the doorbell down and marks
//! the ring as waiting for a post instead; the poller looks at `prod`
//! itself ([`WorkRing::poll_due`]), so the driver posts with no message.
//! When it stops polling it arms for real ([`WorkRing::stop_polling`]).

use serde::{de::DeserializeOwned, Serialize};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Mutex;

use crate::shm::SharedMapping;
use urdma_proto::engine::{RecvRequest, SendRequest};

const PROD: usize = 0;
const CONS: usize = 64;
const RETIRED: usize = 72;
const DOORBELL: usize = 128;
const SLOTS: usize = 192;
/// Bytes of a slot that precede the encoded request.
const LEN_PREFIX: usize = 4;
/// Room for everything of a request but its SGEs and inline bytes.
const FIXED_PART: usize = 160;
/// Room for one encoded SGE.
const SGE_PART: usize = 24;

/// Slot size of a send queue whose requests have at most `max_sge` SGEs
/// and `max_inline` inline bytes.
pub fn send_slot_len(max_sge: u32, max_inline: u32) -> usize {
    LEN_PREFIX + FIXED_PART + SGE_PART * (max_sge.max(1) as usize) + max_inline as usize
}

/// Slot size of a receive queue whose requests have at most `max_sge` SGEs.
pub fn recv_slot_len(max_sge: u32) -> usize {
    LEN_PREFIX + FIXED_PART + SGE_PART * (max_sge.max(1) as usize)
}

/// The encoding of requests: fixed-width integers, which decode with
/// fewer steps than variable-length ones and still fit the slot sizes
/// above.
fn options() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new().with_fixint_encoding()
}

/// Why a request could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// As many requests as the queue holds are outstanding.
    #[error("work queue full")]
    Full,
    /// The request does not fit a slot (larger than the queue's limits).
    #[error("work request larger than the queue's slots")]
    TooLarge,
}

pub use urdma_proto::work::{TakeError, WorkSource};

/// A work queue ring in a sealed memfd, mapped by the driver that fills it
/// and the NIC that drains it.
pub struct WorkRing {
    map: SharedMapping,
    capacity: u64,
    slot_len: usize,
    /// Serialises this process's producers.
    producer: Mutex<()>,
    /// The NIC's own consumer and retire indices (the shared copies are
    /// only published to the driver, never read back).
    cons: AtomicU64,
    retired: AtomicU64,
    /// The NIC watches `prod` itself (busy polling): arming leaves the
    /// doorbell down, so that the driver posts without telling it.
    polled: AtomicBool,
    /// The NIC, while polling, is to be told of the next post.
    wants_bell: AtomicBool,
}

impl WorkSource for WorkRing {
    fn capacity(&self) -> u32 {
        WorkRing::capacity(self)
    }

    fn pop_send(&self) -> Option<Result<SendRequest, TakeError>> {
        self.pop()
    }

    fn pop_recv(&self) -> Option<Result<RecvRequest, TakeError>> {
        self.pop()
    }

    fn pending(&self) -> Result<u64, TakeError> {
        WorkRing::pending(self)
    }

    fn retire(&self, n: u64) {
        WorkRing::retire(self, n)
    }

    fn arm(&self) -> bool {
        WorkRing::arm(self)
    }

    fn discard(&self) {
        WorkRing::discard(self)
    }
}

impl std::fmt::Debug for WorkRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkRing")
            .field("capacity", &self.capacity)
            .field("slot_len", &self.slot_len)
            .field("cons", &self.cons)
            .finish()
    }
}

fn ring_len(capacity: u32, slot_len: usize) -> io::Result<usize> {
    (capacity as usize)
        .checked_mul(slot_len)
        .and_then(|n| n.checked_add(SLOTS))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "work queue too large"))
}

impl WorkRing {
    /// A ring of `capacity` slots of `slot_len` bytes in a new sealed memfd,
    /// which [`WorkRing::fd`] returns for the NIC.
    pub fn new_shared(capacity: u32, slot_len: usize) -> io::Result<Self> {
        let map = SharedMapping::create(c"urdma-wq", ring_len(capacity, slot_len)?)?;
        Ok(Self::with_map(map, capacity, slot_len))
    }

    /// Map a ring another process made with [`WorkRing::new_shared`];
    /// `capacity` and `slot_len` come from the caller's own records. Fails
    /// with `InvalidInput` if the file is not sealed or is too small.
    pub fn from_fd(fd: OwnedFd, capacity: u32, slot_len: usize) -> io::Result<Self> {
        let mut map = SharedMapping::from_fd(fd, ring_len(capacity, slot_len)?)?;
        // The NIC's side never hands the ring on.
        map.close_fd();
        let ring = Self::with_map(map, capacity, slot_len);
        // Start where the driver is (a fresh ring: at zero).
        let prod = ring.prod().load(Acquire);
        ring.cons.store(prod, Relaxed);
        ring.retired.store(prod, Relaxed);
        ring.publish();
        Ok(ring)
    }

    fn with_map(map: SharedMapping, capacity: u32, slot_len: usize) -> Self {
        WorkRing {
            map,
            capacity: u64::from(capacity),
            slot_len,
            producer: Mutex::new(()),
            cons: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            polled: AtomicBool::new(false),
            wants_bell: AtomicBool::new(false),
        }
    }

    /// The memfd holding the ring.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.map.fd()
    }

    /// Close the ring's file once the NIC has it (see
    /// [`SharedMapping::close_fd`]).
    pub fn close_fd(&mut self) {
        self.map.close_fd();
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u32 {
        self.capacity as u32
    }

    fn prod(&self) -> &AtomicU64 {
        self.map.atomic_u64(PROD)
    }

    fn doorbell(&self) -> &AtomicU32 {
        self.map.atomic_u32(DOORBELL)
    }

    fn slot_off(&self, idx: u64) -> usize {
        SLOTS + (idx % self.capacity.max(1)) as usize * self.slot_len
    }

    // ---- driver side ----

    /// Queue `wr` (driver side). Ok(true): the NIC asked to be told of this
    /// post (send it a doorbell); Ok(false): it will find the request itself.
    pub fn push<T: Serialize>(&self, wr: &T) -> Result<bool, PushError> {
        use bincode::Options;
        thread_local! {
            /// The encoded request, kept from one post to the next.
            static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let encode = |bytes: &mut Vec<u8>| {
            bytes.clear();
            options()
                .serialize_into(&mut *bytes, wr)
                .map_err(|_| PushError::TooLarge)?;
            self.push_encoded(bytes)
        };
        // A post while the thread's locals are torn down (from a
        // destructor) encodes into a buffer of its own.
        ENCODED
            .try_with(|buf| encode(&mut buf.borrow_mut()))
            .unwrap_or_else(|_| encode(&mut Vec::new()))
    }

    fn push_encoded(&self, bytes: &[u8]) -> Result<bool, PushError> {
        if bytes.len() + LEN_PREFIX > self.slot_len {
            return Err(PushError::TooLarge);
        }
        let _g = self.producer.lock().unwrap_or_else(|e| e.into_inner());
        let prod = self.prod().load(Relaxed);
        let retired = self.map.atomic_u64(RETIRED).load(Acquire);
        if prod.wrapping_sub(retired) >= self.capacity {
            return Err(PushError::Full);
        }
        let off = self.slot_off(prod);
        let len = (bytes.len() as u32).to_ne_bytes();
        // In bounds: the slot was sized for `slot_len` bytes.
        self.map
            .write_bytes(off, &len)
            .and_then(|()| self.map.write_bytes(off + LEN_PREFIX, bytes))
            .map_err(|_| PushError::TooLarge)?;
        self.prod().store(prod.wrapping_add(1), SeqCst);
        let bell = self.doorbell();
        Ok(bell.load(SeqCst) != 0 && bell.swap(0, SeqCst) != 0)
    }

    /// Requests posted and not yet retired, as the driver sees them.
    pub fn outstanding(&self) -> u64 {
        let retired = self.map.atomic_u64(RETIRED).load(Acquire);
        self.prod().load(Acquire).wrapping_sub(retired)
    }

    // ---- NIC side ----

    /// Requests waiting in the ring (NIC side). A producer index that
    /// claims more than the ring holds is an error.
    pub fn pending(&self) -> Result<u64, TakeError> {
        let n = self
            .prod()
            .load(Acquire)
            .wrapping_sub(self.cons.load(Relaxed));
        if n > self.capacity {
            Err(TakeError::Corrupt)
        } else {
            Ok(n)
        }
    }

    /// Take the next request (NIC side): None if the ring is empty. A
    /// corrupted producer index skips everything posted (and retires it).
    pub fn pop<T: DeserializeOwned>(&self) -> Option<Result<T, TakeError>> {
        use bincode::Options;
        match self.pending() {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => {
                let prod = self.prod().load(Acquire);
                self.cons.store(prod, Relaxed);
                self.retired.store(prod, Relaxed);
                self.publish();
                return Some(Err(e));
            }
        }
        thread_local! {
            /// The request's bytes, copied out of the ring before they are
            /// decoded (the producer may write the slot meanwhile); kept
            /// from one request to the next.
            static SLOT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let idx = self.cons.load(Relaxed);
        let off = self.slot_off(idx);
        let decode = |buf: &mut Vec<u8>| {
            let mut len = [0u8; LEN_PREFIX];
            self.map.read_bytes(off, &mut len).ok()?;
            let n = u32::from_ne_bytes(len) as usize;
            if n + LEN_PREFIX > self.slot_len {
                return None;
            }
            buf.resize(n, 0);
            self.map.read_bytes(off + LEN_PREFIX, buf).ok()?;
            // Lengths inside the request are bounded by the slot.
            let decoder = options().with_limit(self.slot_len as u64);
            decoder.deserialize(buf).ok()
        };
        // A take while the thread's locals are torn down decodes in a
        // buffer of its own, as a post does.
        let decoded = SLOT
            .try_with(|slot| decode(&mut slot.borrow_mut()))
            .unwrap_or_else(|_| decode(&mut Vec::new()));
        self.cons.store(idx.wrapping_add(1), Relaxed);
        self.map
            .atomic_u64(CONS)
            .store(idx.wrapping_add(1), Release);
        Some(decoded.ok_or(TakeError::Malformed(idx)))
    }

    /// Mark `n` taken requests finished (NIC side), freeing their room.
    pub fn retire(&self, n: u64) {
        let cons = self.cons.load(Relaxed);
        let r = self.retired.load(Relaxed).wrapping_add(n);
        // Never past what was taken.
        let r = if cons.wrapping_sub(r) > self.capacity {
            cons
        } else {
            r
        };
        self.retired.store(r, Relaxed);
        self.map.atomic_u64(RETIRED).store(r, Release);
    }

    fn publish(&self) {
        self.map
            .atomic_u64(CONS)
            .store(self.cons.load(Relaxed), Release);
        self.map
            .atomic_u64(RETIRED)
            .store(self.retired.load(Relaxed), Release);
    }

    /// Ask to be told of the next post (NIC side). False if a request
    /// arrived meanwhile: the doorbell is left unarmed and the caller must
    /// look at the ring again.
    ///
    /// While the NIC polls the ring ([`WorkRing::start_polling`]) the
    /// doorbell stays down and [`WorkRing::poll_due`] tells the poller.
    pub fn arm(&self) -> bool {
        if self.polled.load(Relaxed) {
            if self.prod().load(SeqCst) != self.cons.load(Relaxed) {
                return false;
            }
            self.wants_bell.store(true, Relaxed);
            return true;
        }
        self.doorbell().store(1, SeqCst);
        // SeqCst, pairing with the driver's store of `prod` and load of
        // the doorbell: one side sees the other.
        if self.prod().load(SeqCst) == self.cons.load(Relaxed) {
            return true;
        }
        self.doorbell().store(0, SeqCst);
        false
    }

    /// Stop asking for doorbells (NIC side).
    pub fn disarm(&self) {
        self.doorbell().store(0, SeqCst);
        self.wants_bell.store(false, Relaxed);
    }

    /// Watch the ring instead of waiting for doorbells (NIC side, with the
    /// consumer's lock held, as every NIC-side call). An armed doorbell is
    /// taken down: the driver's next post then costs it no message, and
    /// the poller finds it with [`WorkRing::poll_due`].
    pub fn start_polling(&self) {
        if self.polled.swap(true, Relaxed) {
            return;
        }
        // The driver may be swapping it at the same moment: whoever takes
        // the 1 is the one who acts on the post.
        if self.doorbell().swap(0, SeqCst) != 0 {
            self.wants_bell.store(true, Relaxed);
        }
    }

    /// Whether the poller is to take new requests now: the NIC asked to be
    /// told of a post and one arrived. Needs no lock (a hint, confirmed by
    /// [`WorkRing::take_bell`] under it).
    pub fn poll_due(&self) -> bool {
        self.wants_bell.load(Relaxed) && self.prod().load(Acquire) != self.cons.load(Relaxed)
    }

    /// Take the doorbell the poller found due (NIC side): false if the
    /// NIC no longer waits for a post.
    pub fn take_bell(&self) -> bool {
        self.wants_bell.swap(false, Relaxed)
    }

    /// Wait for doorbells again (NIC side). False if a request was posted
    /// while the NIC asked to be told: the caller must take it.
    pub fn stop_polling(&self) -> bool {
        if !self.polled.swap(false, Relaxed) || !self.wants_bell.swap(false, Relaxed) {
            return true;
        }
        self.arm()
    }

    /// Drop everything posted, unread (NIC side; a QP back in RESET).
    pub fn discard(&self) {
        let prod = self.prod().load(Acquire);
        self.cons.store(prod, Relaxed);
        self.retired.store(prod, Relaxed);
        self.publish();
        self.disarm();
    }
}

#[cfg(test)]
mod tests;

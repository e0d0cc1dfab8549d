//! Where the engine takes work requests from: a [`WorkSource`] per send
//! queue, receive queue and shared receive queue.
//!
//! The NIC's work queues are rings in memory shared with the program that
//! posts to them; the engine sees only the trait.

use crate::engine::{RecvRequest, SendRequest};

/// A request the NIC could not take from the ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// The slot did not hold a well-formed request (it is consumed).
    #[error("malformed work request in slot {0}")]
    Malformed(u64),
    /// The driver's index claims more requests than the ring holds; the
    /// NIC skipped everything posted so far.
    #[error("work queue producer index corrupted")]
    Corrupt,
}

/// A work queue as the engine drains it.
pub trait WorkSource: Send + Sync + std::fmt::Debug {
    /// How many requests the queue holds at most.
    fn capacity(&self) -> u32;
    /// The next send request posted, if any.
    fn pop_send(&self) -> Option<Result<SendRequest, TakeError>>;
    /// The next receive request posted, if any.
    fn pop_recv(&self) -> Option<Result<RecvRequest, TakeError>>;
    /// How many requests are posted and not yet taken.
    fn pending(&self) -> Result<u64, TakeError>;
    /// Give `n` taken requests' slots back to the poster.
    fn retire(&self, n: u64);
    /// Ask to be told of the next post; false if requests were posted
    /// meanwhile (the caller takes them first).
    fn arm(&self) -> bool;
    /// Drop everything posted (the queue is destroyed or in error).
    fn discard(&self);
}

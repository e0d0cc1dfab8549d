//! The responder's state in each QP ([`crate::engine::qp::RespState`]):
//! the requests it holds out of sequence ([`Held`], charged to the
//! device's [`HeldBudget`]) and the responses waiting behind a READ
//! ([`Outbound`]). The logic that fills and drains them is in
//! `reorder.rs` and `outbound.rs`.

use crate::engine::dma::DmaSource;
use crate::engine::psn;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use urdma_wire::PacketRepr;

/// What a held packet costs the budget besides its payload: its headers
/// and its place in the table, so that packets without payload count too.
pub(super) const PACKET_COST: usize = 256;

/// The bytes every QP of a device holds, shared by their [`Held`] sets.
#[derive(Debug, Default)]
pub(crate) struct HeldBudget(AtomicUsize);

impl HeldBudget {
    /// Most bytes a device holds for all its QPs.
    pub(crate) const LIMIT: usize = 64 << 20;

    /// Take `n` bytes if the limit allows.
    pub(super) fn take(&self, n: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&u| u <= Self::LIMIT)
            })
            .is_ok()
    }

    pub(super) fn give_back(&self, n: usize) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(super) fn used(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// A request kept until its turn: its headers and a copy of its payload,
/// charged to the device's budget until dropped.
#[derive(Debug)]
pub(super) struct HeldPacket {
    pub(super) repr: PacketRepr,
    pub(super) payload: Box<[u8]>,
    /// What it is charged to the budget: its payload and [`PACKET_COST`].
    pub(super) cost: usize,
    pub(super) budget: Arc<HeldBudget>,
}

impl Drop for HeldPacket {
    fn drop(&mut self) {
        self.budget.give_back(self.cost);
    }
}

/// The out-of-sequence requests one QP keeps, by PSN.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(super) by_psn: HashMap<u32, HeldPacket>,
    /// The PSN after the highest one held (meaningful while any is).
    pub(super) high: u32,
    /// Missing PSNs that were NAKed, each with the serial of its last NAK
    /// (only PSNs between the expected one and `high`).
    pub(super) naked: HashMap<u32, u64>,
    /// Serial of the next NAK.
    pub(super) serial: u64,
}

impl Held {
    /// While the expected PSN `epsn` is missing and later requests are
    /// held: the PSN after the highest one held.
    pub(super) fn gap_reach(&self, epsn: u32) -> Option<u32> {
        let gap = !self.by_psn.is_empty() && !self.by_psn.contains_key(&epsn);
        gap.then_some(self.high)
    }

    /// True if nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_psn.is_empty()
    }

    /// Forget everything held.
    pub(crate) fn clear(&mut self) {
        self.by_psn.clear();
        self.naked.clear();
    }
}

/// The READ responses of one request still to send.
#[derive(Debug)]
pub(crate) struct PendingRead {
    /// The R_Key the request named.
    pub(super) rkey: u32,
    /// Address of the first byte of the run.
    pub(super) va: u64,
    /// Bytes of the run.
    pub(super) len: usize,
    /// PSN of the run's first response.
    pub(super) first: u32,
    /// Responses of the run.
    pub(super) n: u32,
    /// Responses sent so far.
    pub(super) sent: u32,
    /// MSN the responses carry.
    pub(super) msn: u32,
    /// First PSN of the request answered (a duplicate's original).
    pub(super) request: u32,
    /// The requester's buffer, filled already, which the responses name
    /// in place (a device of this NIC).
    pub(super) placed: Option<DmaSource>,
}

/// One response waiting.
#[derive(Debug)]
pub(crate) enum Queued {
    /// READ responses.
    Read(PendingRead),
    /// An ACK, NAK or atomic ACK; true for an atomic ACK.
    Packet(PacketRepr, bool),
}

impl Queued {
    /// PSN of the first packet.
    pub(super) fn psn(&self) -> u32 {
        match self {
            Queued::Read(r) => psn::add(r.first, r.sent),
            Queued::Packet(repr, _) => repr.bth.psn,
        }
    }
}

/// The responses of a QP waiting behind a READ in progress.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    pub(super) queue: VecDeque<Queued>,
}

impl Outbound {
    /// Nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// READ and atomic requests not yet fully answered.
    pub(crate) fn outstanding(&self) -> usize {
        (self.queue.iter())
            .filter(|q| matches!(q, Queued::Read(_) | Queued::Packet(_, true)))
            .count()
    }

    /// Forget every response waiting.
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use urdma_wire::{Bth, Opcode};

    fn held(budget: &Arc<HeldBudget>, len: usize) -> HeldPacket {
        assert!(budget.take(len));
        HeldPacket {
            repr: PacketRepr::new(Bth::new(Opcode::RcSendOnly, 1, 2)),
            payload: vec![0; len].into(),
            cost: len,
            budget: budget.clone(),
        }
    }

    #[test]
    fn the_budget_bounds_the_device_and_comes_back_with_the_packets() {
        let budget = Arc::new(HeldBudget::default());
        let a = held(&budget, 4096);
        let b = held(&budget, 100);
        assert_eq!(budget.used(), 4196);
        assert!(!budget.take(HeldBudget::LIMIT - 4196 + 1));
        assert!(budget.take(HeldBudget::LIMIT - 4196));
        budget.give_back(HeldBudget::LIMIT - 4196);
        drop(a);
        assert_eq!(budget.used(), 100);
        let mut set = Held::default();
        set.by_psn.insert(2, b);
        set.clear();
        assert!(set.is_empty());
        assert_eq!(budget.used(), 0);
    }
}

//! Completion queues.

use super::device::Device;
use crate::cq::CqShared;
use crate::error::{Error, Result};
use crate::nic::Link;
use crate::types::WorkCompletion;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The device's CQs: made, resized and bound here, where [`Cq`] lives.
impl Device {
    /// Create a completion queue holding up to `cqe` completions.
    pub fn create_cq(&self, cqe: usize) -> Result<Cq> {
        if cqe == 0 || cqe > self.inner.attr.max_cqe as usize {
            return Err(crate::Error::inval(format!(
                "cqe {cqe} outside 1..={}",
                self.inner.attr.max_cqe
            )));
        }
        let entries = ring_entries(cqe, self.inner.attr.max_cqe as usize);
        let shared = match &self.inner.link {
            Link::Embedded(_) => {
                let cqn = self.inner.next_cqn.fetch_add(1, Ordering::Relaxed);
                Arc::new(CqShared::new(cqn, entries))
            }
            Link::Agent(a) => a.create_cq(entries)?,
        };
        Ok(Cq::new(self.clone(), shared))
    }

    /// Give `cq` a ring for `cqe` completions (see [`Cq::resize`]).
    pub(crate) fn resize_cq(&self, cq: &CqShared, cqe: usize) -> Result<()> {
        let max = self.inner.attr.max_cqe as usize;
        if cqe == 0 || cqe > max {
            return Err(crate::Error::inval(format!("cqe {cqe} outside 1..={max}")));
        }
        let entries = ring_entries(cqe, max);
        match &self.inner.link {
            Link::Embedded(_) => {
                let ring = crate::cq::Ring::new(entries, false)?;
                let _paused = cq.consumer_pause();
                cq.replace_ring(ring, false)
            }
            Link::Agent(a) => a.resize_cq(cq, entries),
        }
    }

    /// Have the NIC raise `cq`'s completion events (if it has a completion
    /// channel) and its CQ errors (through the agent) on a CQ of the urdma
    /// kernel module made through uverbs by this process, instead of
    /// calling the CQ's own notifier. Needs the module's NIC file
    /// (`/dev/urdma`, root).
    pub fn bind_cq_to_kernel(
        &self,
        cq: &Cq,
        kernel: crate::nic::kernel::KernelObject,
    ) -> Result<()> {
        match &self.inner.link {
            Link::Embedded(_) => {
                let notify =
                    crate::nic::kernel::cq_notifier(kernel, std::process::id()).map_err(|e| {
                        crate::Error::NotSupported(format!("kernel completion events: {e}"))
                    })?;
                cq.shared().set_notifier(Some(notify));
                Ok(())
            }
            Link::Agent(a) => a.bind_cq(cq.cqn(), kernel),
        }
    }
}

/// Empty polls of one embedded device's CQs in a row by one thread after
/// which its next empty polls move the device's NIC on
/// ([`Cq::poll_into`]): a thread that spins on the device's CQs waits
/// for its NIC, while one that gets completions, or polls other devices
/// in between, leaves the datagrams to the device's receive thread.
const EMPTY_POLLS_BEFORE_PROGRESS: u32 = 2;

thread_local! {
    /// The embedded device this thread polled a CQ of last, and how
    /// many times in a row it found its CQs empty.
    static EMPTY_POLLS: std::cell::Cell<(usize, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Destroys the CQ at the NIC when the last handle goes.
#[derive(Debug)]
struct CqGuard {
    dev: Device,
    cqn: u32,
}

impl Drop for CqGuard {
    fn drop(&mut self) {
        self.dev.release_cq(self.cqn);
    }
}

/// A completion queue. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Cq {
    pub(crate) shared: Arc<CqShared>,
    _guard: Arc<CqGuard>,
}

impl Cq {
    pub(crate) fn new(dev: Device, shared: Arc<CqShared>) -> Self {
        let cqn = shared.cqn;
        Cq {
            shared,
            _guard: Arc::new(CqGuard { dev, cqn }),
        }
    }

    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.shared.cqn
    }

    /// The queue the engine fills, for layers that hand it to the engine
    /// themselves (the libibverbs C ABI).
    pub fn shared(&self) -> &Arc<CqShared> {
        &self.shared
    }

    /// Capacity: completions the CQ is guaranteed to hold (its ring
    /// holds one more, see `ring_entries`).
    pub fn capacity(&self) -> usize {
        self.shared.capacity() - 1
    }

    /// Resize the CQ to hold at least `cqe` completions (at most the
    /// device's `max_cqe`); the completions waiting stay, in order. Fails
    /// with [`Error::InvalidArgument`] (and changes nothing) if more wait
    /// than the new size holds. Answers the new capacity.
    pub fn resize(&self, cqe: usize) -> Result<usize> {
        self._guard.dev.resize_cq(&self.shared, cqe)?;
        Ok(self.capacity())
    }

    /// Take up to `max` completions without blocking. A CQ that overran
    /// returns [`Error::CqOverrun`] once its entries are taken.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut v = Vec::new();
        self.poll_into(max, &mut v)?;
        Ok(v)
    }

    /// As [`Cq::poll`], appending to `out`; answers how many it took.
    ///
    /// On an embedded device, a thread that keeps finding the device's
    /// CQs empty (more than `EMPTY_POLLS_BEFORE_PROGRESS` polls in a row)
    /// waits for its NIC: its polls then take and handle the datagrams
    /// that arrived for the device themselves, as the device's receive
    /// thread would once scheduled
    /// ([`crate::nic::LocalNic::progress`]). The shared NIC's
    /// own threads do its work.
    pub fn poll_into(&self, max: usize, out: &mut Vec<WorkCompletion>) -> Result<usize> {
        let n = self.shared.poll(max, out)?;
        let crate::nic::Link::Embedded(driver) = &self._guard.dev.inner.link else {
            return Ok(n);
        };
        if max == 0 {
            return Ok(n);
        }
        let id = Arc::as_ptr(driver) as *const () as usize;
        let count = |found: usize| {
            EMPTY_POLLS.with(|e| {
                let (last, count) = e.get();
                let count = match (found, last == id) {
                    (0, true) => count.saturating_add(1),
                    (0, false) => 1,
                    _ => 0,
                };
                e.set((id, count));
                count
            })
        };
        if count(n) <= EMPTY_POLLS_BEFORE_PROGRESS || !driver.progress() {
            return Ok(n);
        }
        let n = self.shared.poll(max, out)?;
        if n > 0 {
            count(n);
        }
        Ok(n)
    }

    /// Block until completions arrive (or `timeout` passes), then take up to `max`.
    pub fn wait(&self, max: usize, timeout: Option<Duration>) -> Result<Vec<WorkCompletion>> {
        let mut v = Vec::new();
        self.shared.wait(max, timeout, &mut v)?;
        Ok(v)
    }

    /// Block for exactly one completion.
    pub fn wait_one(&self, timeout: Option<Duration>) -> Result<WorkCompletion> {
        self.wait(1, timeout)?.pop().ok_or(Error::Timeout)
    }

    /// Arm completion notification (see [`CqShared::req_notify`]).
    pub fn req_notify(&self, solicited_only: bool) {
        self.shared.req_notify(solicited_only);
    }
}

/// Ring entries of a CQ asked for `cqe` completions: `cqe + 1` rounded up
/// to a power of two (at most `max_cqe + 1`); the CQ reports one fewer as
/// its capacity. As on common RNICs, the one entry beyond the reported
/// capacity lets a program that keeps one completion unpolled for a while
/// (a latency test waiting on events) run without an overrun.
pub fn ring_entries(cqe: usize, max_cqe: usize) -> usize {
    (cqe + 1).next_power_of_two().min(max_cqe + 1)
}

#[cfg(test)]
mod ring_tests {
    use super::ring_entries;

    #[test]
    fn rings_round_up_and_hold_one_more() {
        assert_eq!(ring_entries(1, 1 << 20), 2);
        assert_eq!(ring_entries(2, 1 << 20), 4);
        assert_eq!(ring_entries(3, 1 << 20), 4);
        assert_eq!(ring_entries(4, 1 << 20), 8);
        assert_eq!(ring_entries(1 << 20, 1 << 20), (1 << 20) + 1);
        assert_eq!(ring_entries((1 << 19) + 1, 1 << 20), 1 << 20);
        assert_eq!(ring_entries((1 << 20) - 1, 1 << 20), 1 << 20);
    }
}

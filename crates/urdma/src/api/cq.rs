//! Completion queues.

use super::device::Device;
use crate::cq::CqShared;
use crate::error::{Error, Result};
use crate::types::WorkCompletion;
use std::sync::Arc;
use std::time::Duration;

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

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Take up to `max` completions without blocking. A CQ that overran
    /// returns [`Error::CqOverrun`] once its entries are taken.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut v = Vec::new();
        self.shared.poll(max, &mut v)?;
        Ok(v)
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

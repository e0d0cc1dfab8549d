//! A NIC inside the program: what a driver asks of an engine it runs
//! itself (`URDMA_NIC=embedded`, `Device::open_embedded`) instead of the
//! shared agent. The NIC crate implements it; the driver sees only this
//! trait, so a driver built without the NIC links no fabric.

use crate::cm::{CmEvent, CmOp, ConnId};
use crate::engine::command::{Command, Reply};
use crate::engine::{Counters, RecvRequest, SendRequest, SrqAttr};
use crate::error::Result;
use crate::events::EventNotifier;
use crate::types::AsyncEvent;
use std::any::Any;
use std::net::SocketAddr;
use std::time::Duration;

/// A post that stopped at a work request: how many went before it, and why.
pub type PostError = (usize, crate::error::Error);

/// An engine in this process, with its own socket.
pub trait LocalNic: Send + Sync {
    /// Run an engine command.
    fn execute(&self, cmd: Command) -> Result<Reply>;

    /// Post send WRs to QP `qpn` in order, under one hold of the engine;
    /// stops at the first one refused.
    fn post_sends(&self, qpn: u32, wrs: Vec<SendRequest>) -> std::result::Result<(), PostError>;

    /// Post receive WRs to QP `n`, or to SRQ `n` when `srq`, in order.
    fn post_recvs(
        &self,
        n: u32,
        srq: bool,
        wrs: Vec<RecvRequest>,
    ) -> std::result::Result<(), PostError>;

    /// Create an SRQ and read back the attributes it got.
    fn create_srq(&self, pd: u32, attr: SrqAttr) -> Result<(u32, SrqAttr)>;

    /// Carry out a call on the device's communication manager.
    fn cm(&self, op: CmOp) -> Result<Option<ConnId>>;

    /// Next CM event, waiting up to `timeout` (None: forever).
    fn next_cm_event(&self, timeout: Option<Duration>) -> Option<CmEvent>;

    /// Install the callback run when asynchronous events were queued.
    fn set_event_notifier(&self, notifier: Option<EventNotifier>);

    /// Next asynchronous event, waiting up to `timeout` (None: forever).
    fn next_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent>;

    /// The socket's address.
    fn local(&self) -> SocketAddr;

    /// The address each entry of port 1's GID table stands for.
    fn gids(&self) -> Vec<SocketAddr>;

    /// The device's counters, or one QP's (None: no such QP).
    fn counters(&self, qpn: Option<u32>) -> Option<Counters>;

    /// Take and handle the datagrams that arrived, on the calling
    /// thread, if no other thread is taking them; true when it did.
    fn progress(&self) -> bool;

    /// The NIC itself, for its own tests.
    fn as_any(&self) -> &dyn Any;
}

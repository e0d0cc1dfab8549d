//! Work requests as a verbs caller posts them (`ibv_send_wr`,
//! `ibv_recv_wr`), before the engine checks them and turns them into its
//! WQEs ([`super::wqe`]).

use super::wqe::{SendOp, UdDest};

/// One scatter/gather element as a verbs caller gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SgEntry {
    /// Virtual address (in the MR's IOVA space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// Data of a send request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SendData {
    /// Gather list of registered memory.
    Sges(Vec<SgEntry>),
    /// Inline bytes (copied at post time).
    Inline(Vec<u8>),
}

/// A send work request (`ibv_send_wr`) as the engine takes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendRequest {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub data: SendData,
    /// Remote VA (WRITE, READ, atomics).
    pub remote_va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Generate a completion.
    pub signaled: bool,
    /// Solicited event.
    pub solicited: bool,
    /// Destination of a UD send.
    pub ud: Option<UdDest>,
    /// Start only once every READ and atomic posted before it has
    /// completed (`IBV_SEND_FENCE`).
    pub fence: bool,
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecvRequest {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: Vec<SgEntry>,
}

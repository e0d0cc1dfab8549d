//! Work queue entries as the engine holds them.

use super::mw::BindMw;
use crate::mr::SgeList;
use crate::types::WcOpcode;
use std::net::SocketAddr;
use urdma_wire::OpKind;

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SendOp {
    /// SEND
    Send,
    /// SEND with immediate data
    SendImm(u32),
    /// SEND that invalidates the peer's R_Key (RC only)
    SendInv(u32),
    /// RDMA WRITE
    Write,
    /// RDMA WRITE with immediate data
    WriteImm(u32),
    /// RDMA READ
    Read,
    /// Atomic compare and swap
    CompSwap {
        /// Value compared with the target.
        compare: u64,
        /// Value stored if equal.
        swap: u64,
    },
    /// Atomic fetch and add
    FetchAdd {
        /// Value added.
        add: u64,
    },
    /// Bind a memory window (a local operation: no packet).
    BindMw(BindMw),
    /// Take back the type 2 memory window of this R_Key (a local
    /// operation: no packet).
    LocalInv(u32),
}

impl SendOp {
    /// The completion opcode of this operation.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_) => WcOpcode::Send,
            SendOp::Write | SendOp::WriteImm(_) => WcOpcode::RdmaWrite,
            SendOp::Read => WcOpcode::RdmaRead,
            SendOp::CompSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::BindMw(_) => WcOpcode::BindMw,
            SendOp::LocalInv(_) => WcOpcode::LocalInv,
        }
    }

    /// True for the operations the NIC carries out itself, in order, with
    /// no packet: binds and local invalidations. They never enter the
    /// requester's queue.
    pub fn is_local(self) -> bool {
        matches!(self, SendOp::BindMw(_) | SendOp::LocalInv(_))
    }

    /// True for READ and atomics (responses carry data back).
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            SendOp::Read | SendOp::CompSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// True for atomics.
    pub fn is_atomic(self) -> bool {
        matches!(self, SendOp::CompSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// The wire operation this performs and its immediate data, if any
    /// (a local operation has none: see [`SendOp::is_local`]).
    pub fn wire_kind(self) -> (OpKind, Option<u32>) {
        match self {
            SendOp::Send | SendOp::BindMw(_) | SendOp::LocalInv(_) => (OpKind::Send, None),
            SendOp::SendImm(imm) => (OpKind::Send, Some(imm)),
            SendOp::SendInv(_) => (OpKind::Send, None),
            SendOp::Write => (OpKind::Write, None),
            SendOp::WriteImm(imm) => (OpKind::Write, Some(imm)),
            SendOp::Read => (OpKind::ReadRequest, None),
            SendOp::CompSwap { .. } => (OpKind::CompareSwap, None),
            SendOp::FetchAdd { .. } => (OpKind::FetchAdd, None),
        }
    }

    /// The atomic operands (compare, swap or add) of an atomic.
    pub fn atomic_operands(self) -> Option<(u64, u64)> {
        match self {
            SendOp::CompSwap { compare, swap } => Some((compare, swap)),
            SendOp::FetchAdd { add } => Some((0, add)),
            _ => None,
        }
    }

    /// True if the operation names remote memory.
    pub fn has_remote(self) -> bool {
        !matches!(
            self,
            SendOp::Send
                | SendOp::SendImm(_)
                | SendOp::SendInv(_)
                | SendOp::BindMw(_)
                | SendOp::LocalInv(_)
        )
    }

    /// The R_Key a SEND with invalidate names.
    pub fn invalidates(self) -> Option<u32> {
        match self {
            SendOp::SendInv(rkey) => Some(rkey),
            _ => None,
        }
    }
}

/// Where the payload of a send comes from.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Gathered from registered memory at transmit time.
    Sges(SgeList),
    /// Copied at post time.
    Inline(Vec<u8>),
}

/// Destination of a UD send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UdDest {
    /// Peer device address.
    pub addr: SocketAddr,
    /// Remote QP number.
    pub qpn: u32,
    /// Q_Key.
    pub qkey: u32,
}

/// A posted send work request.
#[derive(Debug)]
pub(crate) struct SendWqe {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data (source of SEND/WRITE, target of READ/atomic result).
    pub payload: Payload,
    /// Message length.
    pub len: usize,
    /// Remote virtual address.
    pub remote_va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Generate a completion on success.
    pub signaled: bool,
    /// Set the solicited event bit.
    pub solicited: bool,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// First PSN (RC/UC), assigned at post.
    pub first_psn: u32,
    /// Number of PSNs the message uses.
    pub npsn: u32,
    /// A local error found at post time, reported when the WQE is reached.
    pub local_error: Option<crate::types::WcStatus>,
    /// Start only once every READ and atomic before it has completed.
    pub fence: bool,
}

/// A posted receive work request.
#[derive(Debug)]
pub(crate) struct RecvWqe {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: SgeList,
    /// Total capacity.
    pub len: usize,
}

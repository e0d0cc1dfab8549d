//! The JSON-lines protocol between the test process and the peer agent:
//! one [`Cmd`] per line on the peer's stdin, one `Result<Value, String>`
//! per line on its stdout.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use urdma::{AccessFlags, ConnectOptions, Endpoint, Mtu, QpCap, WorkCompletion};

/// A scatter/gather element of a peer MR: (MR id, offset, length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sge {
    /// Peer MR id.
    pub mr: u32,
    /// Byte offset in the MR.
    pub off: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A send work request the peer should post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WrSpec {
    /// SEND.
    Send { sges: Vec<Sge> },
    /// SEND with immediate.
    SendImm { sges: Vec<Sge>, imm: u32 },
    /// Inline SEND.
    SendInline { data: Vec<u8> },
    /// RDMA WRITE.
    Write {
        sges: Vec<Sge>,
        raddr: u64,
        rkey: u32,
    },
    /// RDMA WRITE with immediate.
    WriteImm {
        sges: Vec<Sge>,
        raddr: u64,
        rkey: u32,
        imm: u32,
    },
    /// RDMA READ.
    Read {
        sges: Vec<Sge>,
        raddr: u64,
        rkey: u32,
    },
    /// Compare and swap.
    CompSwap {
        sge: Sge,
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// Fetch and add.
    FetchAdd {
        sge: Sge,
        raddr: u64,
        rkey: u32,
        add: u64,
    },
}

/// Connection options (a serde mirror of [`ConnectOptions`]); unset
/// fields keep the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnOpts {
    /// Path MTU in bytes (256 .. 4096).
    pub mtu: Option<usize>,
    /// QP access flags.
    pub access: Option<AccessFlags>,
    /// ACK timeout code.
    pub timeout: Option<u8>,
    /// Transport retries.
    pub retry_cnt: Option<u8>,
    /// RNR retries (7 = infinite).
    pub rnr_retry: Option<u8>,
    /// RNR NAK timer code this side's responder sends.
    pub min_rnr_timer: Option<u8>,
    /// Outstanding READ/atomic requests issued.
    pub max_rd_atomic: Option<u8>,
}

impl ConnOpts {
    /// The options with path MTU `mtu` bytes.
    pub fn mtu(mtu: usize) -> Self {
        ConnOpts {
            mtu: Some(mtu),
            ..Self::default()
        }
    }

    /// As [`ConnectOptions`].
    pub fn to_options(&self) -> ConnectOptions {
        let d = ConnectOptions::default();
        ConnectOptions {
            access: self.access.unwrap_or(d.access),
            mtu: self.mtu.and_then(Mtu::from_bytes).unwrap_or(d.mtu),
            timeout: self.timeout.unwrap_or(d.timeout),
            retry_cnt: self.retry_cnt.unwrap_or(d.retry_cnt),
            rnr_retry: self.rnr_retry.unwrap_or(d.rnr_retry),
            min_rnr_timer: self.min_rnr_timer.unwrap_or(d.min_rnr_timer),
            max_rd_atomic: self.max_rd_atomic.unwrap_or(d.max_rd_atomic),
            ..d
        }
    }
}

/// What the peer answers to [`Cmd::RegMr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrInfo {
    /// Peer MR id (for later commands).
    pub id: u32,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length.
    pub len: usize,
}

/// What the peer answers to [`Cmd::CreateQp`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInfo {
    /// Peer QP id (for later commands).
    pub id: u32,
    /// The QP's endpoint.
    pub endpoint: Endpoint,
}

/// What the peer answers to [`Cmd::Poll`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Polled {
    /// Completions taken, in CQ order.
    pub wcs: Vec<WorkCompletion>,
    /// The CQ reported an overrun.
    pub overrun: bool,
}

/// One command to the peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Cmd {
    /// Open the device at addr:port. Answer: null.
    Open { addr: IpAddr, port: u16 },
    /// Allocate a PD. Answer: its id.
    AllocPd,
    /// Register `len` zeroed bytes. Answer: [`MrInfo`].
    RegMr {
        pd: u32,
        len: usize,
        access: AccessFlags,
    },
    /// Create a CQ. Answer: its id.
    CreateCq { cqe: usize },
    /// Create an RC QP. Answer: [`QpInfo`].
    CreateQp {
        pd: u32,
        cq: u32,
        cap: Option<QpCap>,
    },
    /// Connect a QP to a remote endpoint. Answer: null.
    Connect {
        qp: u32,
        remote: Endpoint,
        opts: ConnOpts,
    },
    /// Post a receive. Answer: null.
    PostRecv { qp: u32, wr_id: u64, sges: Vec<Sge> },
    /// Post a send WR. Answer: null.
    PostSend {
        qp: u32,
        wr_id: u64,
        wr: WrSpec,
        signaled: bool,
    },
    /// Write positions `base..` of pattern `seed` at `off`. Answer: null.
    Fill {
        mr: u32,
        off: usize,
        len: usize,
        seed: u64,
        base: u64,
    },
    /// Compare bytes at `off` with pattern positions `base..`. Answer:
    /// index of the first mismatch or null.
    Check {
        mr: u32,
        off: usize,
        len: usize,
        seed: u64,
        base: u64,
    },
    /// Digest of a byte range. Answer: u64.
    Digest { mr: u32, off: usize, len: usize },
    /// Read bytes. Answer: the bytes.
    Peek { mr: u32, off: usize, len: usize },
    /// Write bytes. Answer: null.
    Poke { mr: u32, off: usize, data: Vec<u8> },
    /// Wait until `max` completions are taken or `timeout_ms` passes. Answer: [`Polled`].
    Poll {
        cq: u32,
        max: usize,
        timeout_ms: u64,
    },
    /// Query a QP. Answer: `QpAttr`.
    QueryQp { qp: u32 },
    /// Device counters. Answer: `Counters`.
    Counters,
    /// Destroy a QP. Answer: null.
    DestroyQp { qp: u32 },
    /// Exit the peer process (closing stdin does the same).
    Exit,
}

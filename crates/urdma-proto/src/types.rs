//! Plain verbs types: access flags, QP states, work completions.

use serde::{Deserialize, Serialize};

bitflags::bitflags! {
    /// Memory region and QP access flags (`ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (receive, READ response, atomic result).
        const LOCAL_WRITE = 1;
        /// Remote RDMA WRITE allowed.
        const REMOTE_WRITE = 1 << 1;
        /// Remote RDMA READ allowed.
        const REMOTE_READ = 1 << 2;
        /// Remote atomics allowed.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region.
        const MW_BIND = 1 << 4;
    }
}

bitflags::bitflags! {
    /// Which fields of [`crate::verbs::QpAttr`] a modify_qp call sets
    /// (`ibv_qp_attr_mask`). Serialized as its bits, unknown ones kept:
    /// a receiver checks them (`QpAttrMask::from_bits`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub struct QpAttrMask: u32 {
        /// qp_state
        const STATE = 1;
        /// cur_qp_state
        const CUR_STATE = 1 << 1;
        /// en_sqd_async_notify
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// qp_access_flags
        const ACCESS_FLAGS = 1 << 3;
        /// pkey_index
        const PKEY_INDEX = 1 << 4;
        /// port_num
        const PORT = 1 << 5;
        /// qkey
        const QKEY = 1 << 6;
        /// ah_attr
        const AV = 1 << 7;
        /// path_mtu
        const PATH_MTU = 1 << 8;
        /// timeout
        const TIMEOUT = 1 << 9;
        /// retry_cnt
        const RETRY_CNT = 1 << 10;
        /// rnr_retry
        const RNR_RETRY = 1 << 11;
        /// rq_psn
        const RQ_PSN = 1 << 12;
        /// max_rd_atomic
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// alt_ah_attr
        const ALT_PATH = 1 << 14;
        /// min_rnr_timer
        const MIN_RNR_TIMER = 1 << 15;
        /// sq_psn
        const SQ_PSN = 1 << 16;
        /// max_dest_rd_atomic
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// path_mig_state
        const PATH_MIG_STATE = 1 << 18;
        /// cap
        const CAP = 1 << 19;
        /// dest_qp_num
        const DEST_QPN = 1 << 20;
        /// rate_limit
        const RATE_LIMIT = 1 << 25;
    }
}

/// QP states (`ibv_qp_state`), numbered as in verbs.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpState {
    /// Reset
    Reset = 0,
    /// Initialized
    Init = 1,
    /// Ready to receive
    Rtr = 2,
    /// Ready to send
    Rts = 3,
    /// Send queue drained
    Sqd = 4,
    /// Send queue error
    Sqe = 5,
    /// Error
    Err = 6,
}

impl QpState {
    /// The state for a verbs.h `ibv_qp_state` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// QP transport service types (`ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpType {
    /// Reliable connection
    Rc = 2,
    /// Unreliable connection
    Uc = 3,
    /// Unreliable datagram
    Ud = 4,
}

/// Path MTU (`ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes
    Mtu256 = 1,
    /// 512 bytes
    Mtu512 = 2,
    /// 1024 bytes
    Mtu1024 = 3,
    /// 2048 bytes
    Mtu2048 = 4,
    /// 4096 bytes
    Mtu4096 = 5,
}

impl Mtu {
    /// Size in bytes.
    pub fn bytes(self) -> usize {
        128 << (self as usize)
    }
    /// From a byte count (256, 512, ... 4096).
    pub fn from_bytes(n: usize) -> Option<Self> {
        Self::from_raw(match n {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            4096 => 5,
            _ => return None,
        })
    }
    /// The active MTU of a RoCE port on an interface of MTU `netdev_mtu`
    /// bytes: the largest IB MTU that fits once the largest RoCE headers
    /// are taken off (GRH/IP 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC
    /// 4: 96 bytes), as Linux computes it for RoCE devices. None below 256.
    pub fn for_netdev(netdev_mtu: u32) -> Option<Self> {
        const ROCE_HEADROOM: u32 = 96;
        let room = netdev_mtu.saturating_sub(ROCE_HEADROOM);
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() as u32 <= room)
    }
    /// From the verbs.h enum value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

/// Work completion status (`ibv_wc_status`), numbered as in verbs.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WcStatus {
    /// Success
    Success = 0,
    /// Local length error
    LocLenErr = 1,
    /// Local QP operation error
    LocQpOpErr = 2,
    /// Local protection error
    LocProtErr = 4,
    /// Flushed
    WrFlushErr = 5,
    /// Memory window bind error
    MwBindErr = 6,
    /// Bad response
    BadRespErr = 7,
    /// Local access error
    LocAccessErr = 8,
    /// Remote invalid request
    RemInvReqErr = 9,
    /// Remote access error
    RemAccessErr = 10,
    /// Remote operational error
    RemOpErr = 11,
    /// Transport retry counter exceeded
    RetryExcErr = 12,
    /// RNR retry counter exceeded
    RnrRetryExcErr = 13,
    /// Fatal error
    FatalErr = 19,
    /// General error
    GeneralErr = 21,
}

/// Work completion opcode (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WcOpcode {
    /// SEND (with or without immediate)
    Send = 0,
    /// RDMA WRITE
    RdmaWrite = 1,
    /// RDMA READ
    RdmaRead = 2,
    /// Compare and swap
    CompSwap = 3,
    /// Fetch and add
    FetchAdd = 4,
    /// Memory window bind
    BindMw = 5,
    /// Local invalidate
    LocalInv = 6,
    /// Receive of a SEND
    Recv = 128,
    /// Receive of an RDMA WRITE with immediate
    RecvRdmaWithImm = 129,
}

bitflags::bitflags! {
    /// Work completion flags (`ibv_wc_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
    pub struct WcFlags: u32 {
        /// A GRH is present (UD receives)
        const GRH = 1;
        /// imm_data is valid
        const WITH_IMM = 1 << 1;
        /// invalidated_rkey is valid
        const WITH_INV = 1 << 3;
    }
}

/// A work completion: every field a verbs program reads from `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkCompletion {
    /// The wr_id of the work request.
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// Operation that completed.
    pub opcode: WcOpcode,
    /// Vendor error (the NAK syndrome or internal reason; 0 on success).
    pub vendor_err: u32,
    /// Bytes transferred (receives and READ).
    pub byte_len: u32,
    /// Immediate data, host order (valid with [`WcFlags::WITH_IMM`]).
    pub imm_data: u32,
    /// Invalidated rkey (valid with [`WcFlags::WITH_INV`]).
    pub invalidated_rkey: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number.
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Path bits.
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// A completion with only the identifying fields set.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            invalidated_rkey: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::empty(),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }
}

/// Asynchronous events (`ibv_event_type`) that urdma raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AsyncEventKind {
    /// CQ overrun (IBV_EVENT_CQ_ERR).
    CqErr = 0,
    /// QP went to the error state because of a fatal error (IBV_EVENT_QP_FATAL).
    QpFatal = 1,
    /// Invalid request on a QP (IBV_EVENT_QP_REQ_ERR).
    QpReqErr = 2,
    /// Remote access violation on a QP (IBV_EVENT_QP_ACCESS_ERR).
    QpAccessErr = 3,
    /// Send queue drained (IBV_EVENT_SQ_DRAINED).
    SqDrained = 5,
    /// An SRQ fell below its limit (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached = 15,
    /// The last WQE of a QP attached to an SRQ was consumed (IBV_EVENT_QP_LAST_WQE_REACHED).
    QpLastWqeReached = 16,
}

/// An asynchronous event on a QP or CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// QP or CQ number it concerns.
    pub object: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_sizes_match_verbs_enum() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        for n in [256, 512, 1024, 2048, 4096] {
            assert_eq!(Mtu::from_bytes(n).unwrap().bytes(), n);
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_raw(0), None);
    }

    #[test]
    fn qp_state_raw_roundtrip() {
        for v in 0..7 {
            assert_eq!(QpState::from_raw(v).unwrap() as u32, v);
        }
        assert_eq!(QpState::from_raw(7), None);
    }
}

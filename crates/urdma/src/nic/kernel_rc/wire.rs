//! The kernel channel's RC messages (`kernel/urdma_abi.h`): their types
//! and constants, parsing of the kernel's requests, posts and MR notes, and
//! the layout of replies and completions.

use crate::engine::SgEntry;
use crate::nic::kernel_chan::{gid_at, header, u16_at, u32_at, u64_at, BadMessage};
use crate::types::{AccessFlags, Mtu, QpState, WcOpcode, WcStatus};
use crate::verbs::{QpAttr, QpCap};

/// Message types (`enum urdma_msg_type`).
pub const MSG_REQUEST: u16 = 4;
pub(super) const MSG_REPLY: u16 = 5;
pub const MSG_POST: u16 = 6;
pub(super) const MSG_WC: u16 = 7;
pub const MSG_MR: u16 = 8;
pub(super) const MSG_QP_EVENT: u16 = 9;
/// Lengths of the fixed parts.
pub(super) const REQUEST_LEN: usize = 100;
pub(super) const REPLY_LEN: usize = 24;
pub(super) const POST_LEN: usize = 32;
pub(super) const SGE_LEN: usize = 16;
pub(super) const WC_LEN: usize = 40;
pub(super) const MR_LEN: usize = 40;
/// `enum urdma_request_op`.
pub(super) const REQ_CREATE_QP: u32 = 1;
pub(super) const REQ_MODIFY_QP: u32 = 2;
pub(super) const REQ_DESTROY_QP: u32 = 3;
/// `enum urdma_post_op`.
pub(super) const OP_SEND: u8 = 0;
pub(super) const OP_SEND_IMM: u8 = 1;
pub(super) const OP_SEND_INV: u8 = 2;
pub(super) const OP_WRITE: u8 = 3;
pub(super) const OP_WRITE_IMM: u8 = 4;
pub(super) const OP_READ: u8 = 5;
/// `URDMA_POST_*`.
pub(super) const POST_RECV: u16 = 1;
pub(super) const POST_SOLICITED: u16 = 2;
/// `URDMA_WC_*`.
pub(super) const WC_IMM: u32 = 1;
pub(super) const WC_INV: u32 = 2;
/// `enum urdma_mr_op`.
pub(super) const MR_DMA: u32 = 1;
pub(super) const MR_FAST: u32 = 2;
pub(super) const MR_REGISTER: u32 = 3;
pub(super) const MR_INVALIDATE: u32 = 4;
pub(super) const MR_REMOVE: u32 = 5;
/// Most SGEs of a kernel work request (`URDMA_MAX_SGE`).
pub(super) const MAX_SGE: usize = 32;
/// A receive's work request ID carries this bit, so its completion is told
/// from a send's.
pub(super) const RECV_BIT: u64 = 1 << 32;
/// CQ numbers of kernel QPs (out of the range sessions use).
pub(super) const KERNEL_CQN_BASE: u32 = 0x8000_0000;

/// A request of the kernel (`struct urdma_msg_request`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub(super) qpn: u32,
    pub(super) seq: u32,
    pub(super) op: u32,
    pub(super) pd: u32,
    pub(super) cap: QpCap,
    pub(super) mask: u32,
    pub(super) attr: QpAttr,
    /// The state, current state and path MTU as sent (checked when used).
    pub(super) raw_state: u32,
    pub(super) raw_cur_state: u32,
    pub(super) raw_mtu: u32,
}

/// A work request of a kernel QP (`struct urdma_msg_post`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub(super) qpn: u32,
    pub(super) seq: u32,
    pub(super) recv: bool,
    pub(super) solicited: bool,
    pub(super) opcode: u8,
    pub(super) remote_addr: u64,
    pub(super) rkey: u32,
    pub(super) ex: u32,
    pub(super) sges: Vec<SgEntry>,
}

/// A kernel MR's change (`struct urdma_msg_mr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrNote {
    pub(super) op: u32,
    pub(super) key: u32,
    pub(super) pd: u32,
    pub(super) access: u32,
    pub(super) iova: u64,
    pub(super) length: u64,
}

/// A message of the kernel about RC QPs or MRs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RcMessage {
    /// A command, to answer.
    Request(Request),
    /// A work request.
    Post(Post),
    /// An MR's change.
    Mr(MrNote),
}

/// Parse one message of type `kind` (its whole bytes `m`, length checked
/// against the header by the caller).
pub fn parse(kind: u16, m: &[u8], at: usize) -> Result<RcMessage, BadMessage> {
    let bad = |why| BadMessage::new(at, why);
    let qpn = u32_at(m, 4);
    match kind {
        MSG_REQUEST => {
            if m.len() < REQUEST_LEN {
                return Err(bad("short request"));
            }
            let state = |at| QpState::from_raw(u32_at(m, at)).unwrap_or(QpState::Reset);
            let attr = QpAttr {
                qp_state: state(40),
                cur_qp_state: state(44),
                path_mtu: Mtu::from_raw(u32_at(m, 48)).unwrap_or(Mtu::Mtu1024),
                qkey: u32_at(m, 52),
                rq_psn: u32_at(m, 56),
                sq_psn: u32_at(m, 60),
                dest_qp_num: u32_at(m, 64),
                qp_access_flags: AccessFlags::from_bits_truncate(u32_at(m, 68)),
                max_rd_atomic: m[76],
                max_dest_rd_atomic: m[77],
                min_rnr_timer: m[78],
                timeout: m[79],
                retry_cnt: m[80],
                rnr_retry: m[81],
                ..QpAttr::default()
            };
            let mut attr = attr;
            attr.ah_attr.dgid = gid_at(m, 84);
            attr.ah_attr.flow_label = u32_at(m, 72);
            attr.ah_attr.hop_limit = m[82];
            attr.ah_attr.traffic_class = m[83];
            Ok(RcMessage::Request(Request {
                qpn,
                seq: u32_at(m, 8),
                op: u32_at(m, 12),
                pd: u32_at(m, 16),
                cap: QpCap {
                    max_send_wr: u32_at(m, 20),
                    max_recv_wr: u32_at(m, 24),
                    max_send_sge: u32_at(m, 28),
                    max_recv_sge: u32_at(m, 32),
                    max_inline_data: 0,
                },
                mask: u32_at(m, 36),
                attr,
                raw_state: u32_at(m, 40),
                raw_cur_state: u32_at(m, 44),
                raw_mtu: u32_at(m, 48),
            }))
        }
        MSG_POST => {
            if m.len() < POST_LEN {
                return Err(bad("short work request"));
            }
            let n = usize::from(m[15]);
            if n > MAX_SGE || POST_LEN + n * SGE_LEN > m.len() {
                return Err(bad("bad SGE count"));
            }
            let flags = u16_at(m, 12);
            let sges = (0..n)
                .map(|i| {
                    let at = POST_LEN + i * SGE_LEN;
                    SgEntry {
                        addr: u64_at(m, at),
                        length: u32_at(m, at + 8),
                        lkey: u32_at(m, at + 12),
                    }
                })
                .collect();
            Ok(RcMessage::Post(Post {
                qpn,
                seq: u32_at(m, 8),
                recv: flags & POST_RECV != 0,
                solicited: flags & POST_SOLICITED != 0,
                opcode: m[14],
                remote_addr: u64_at(m, 16),
                rkey: u32_at(m, 24),
                ex: u32_at(m, 28),
                sges,
            }))
        }
        MSG_MR => {
            if m.len() < MR_LEN {
                return Err(bad("short MR message"));
            }
            Ok(RcMessage::Mr(MrNote {
                op: u32_at(m, 8),
                key: u32_at(m, 12),
                pd: u32_at(m, 16),
                access: u32_at(m, 20),
                iova: u64_at(m, 24),
                length: u64_at(m, 32),
            }))
        }
        _ => Err(bad("unknown type")),
    }
}

/// `struct urdma_msg_reply`.
pub(super) fn reply(qpn: u32, seq: u32, status: i32, value: u32) -> Vec<u8> {
    let mut m = header(MSG_REPLY, REPLY_LEN, qpn);
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&(status as u32).to_ne_bytes());
    m.extend_from_slice(&value.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m
}

/// `struct urdma_msg_wc` for work request `seq` of `qpn`.
#[allow(clippy::too_many_arguments)]
pub(super) fn wc_message(
    qpn: u32,
    seq: u32,
    recv: bool,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    vendor_err: u32,
    ex: u32,
    flags: u32,
) -> Vec<u8> {
    let mut m = header(MSG_WC, WC_LEN, qpn);
    for v in [
        seq,
        u32::from(recv),
        status as u32,
        opcode as u32,
        byte_len,
        vendor_err,
        ex,
        flags,
    ] {
        m.extend_from_slice(&v.to_ne_bytes());
    }
    m
}

//! The kernel channel's RC messages (`kernel/urdma_abi.h`, generated in
//! `urdma_abi`): their types and constants, parsing of the kernel's
//! requests, posts and MR notes, and the layout of replies and
//! completions.

use crate::engine::SgEntry;
use crate::nic::kernel_msg::{gid_at, header, put, u16_at, u32_at, u64_at, BadMessage};
use crate::types::{AccessFlags, Mtu, QpState, WcOpcode, WcStatus};
use crate::verbs::{QpAttr, QpCap};
use std::mem::{offset_of, size_of};
use urdma_abi as abi;
use urdma_abi::{
    urdma_msg_hdr, urdma_msg_mr, urdma_msg_post, urdma_msg_qp_event, urdma_msg_reply,
    urdma_msg_request, urdma_msg_sge, urdma_msg_wc,
};

/// Message types (`enum urdma_msg_type`).
pub const MSG_REQUEST: u16 = abi::URDMA_MSG_REQUEST as u16;
pub(super) const MSG_REPLY: u16 = abi::URDMA_MSG_REPLY as u16;
pub const MSG_POST: u16 = abi::URDMA_MSG_POST as u16;
pub(super) const MSG_WC: u16 = abi::URDMA_MSG_WC as u16;
pub const MSG_MR: u16 = abi::URDMA_MSG_MR as u16;
pub(super) const MSG_QP_EVENT: u16 = abi::URDMA_MSG_QP_EVENT as u16;
/// Lengths of the fixed parts.
pub(super) const REQUEST_LEN: usize = size_of::<urdma_msg_request>();
pub(super) const REPLY_LEN: usize = size_of::<urdma_msg_reply>();
pub(super) const POST_LEN: usize = size_of::<urdma_msg_post>();
pub(super) const SGE_LEN: usize = size_of::<urdma_msg_sge>();
pub(super) const WC_LEN: usize = size_of::<urdma_msg_wc>();
pub(super) const MR_LEN: usize = size_of::<urdma_msg_mr>();
pub(super) const QP_EVENT_LEN: usize = size_of::<urdma_msg_qp_event>();
/// `enum urdma_request_op`.
pub(super) const REQ_CREATE_QP: u32 = abi::URDMA_REQ_CREATE_QP;
pub(super) const REQ_MODIFY_QP: u32 = abi::URDMA_REQ_MODIFY_QP;
pub(super) const REQ_DESTROY_QP: u32 = abi::URDMA_REQ_DESTROY_QP;
/// `enum urdma_post_op`.
pub(super) const OP_SEND: u8 = abi::URDMA_OP_SEND as u8;
pub(super) const OP_SEND_IMM: u8 = abi::URDMA_OP_SEND_IMM as u8;
pub(super) const OP_SEND_INV: u8 = abi::URDMA_OP_SEND_INV as u8;
pub(super) const OP_WRITE: u8 = abi::URDMA_OP_WRITE as u8;
pub(super) const OP_WRITE_IMM: u8 = abi::URDMA_OP_WRITE_IMM as u8;
pub(super) const OP_READ: u8 = abi::URDMA_OP_READ as u8;
/// `URDMA_POST_*`.
pub(super) const POST_RECV: u16 = abi::URDMA_POST_RECV as u16;
pub(super) const POST_SOLICITED: u16 = abi::URDMA_POST_SOLICITED as u16;
/// `URDMA_WC_*`.
pub(super) const WC_IMM: u32 = abi::URDMA_WC_IMM;
pub(super) const WC_INV: u32 = abi::URDMA_WC_INV;
/// `enum urdma_mr_op`.
pub(super) const MR_DMA: u32 = abi::URDMA_MR_DMA;
pub(super) const MR_FAST: u32 = abi::URDMA_MR_FAST;
pub(super) const MR_REGISTER: u32 = abi::URDMA_MR_REGISTER;
pub(super) const MR_INVALIDATE: u32 = abi::URDMA_MR_INVALIDATE;
pub(super) const MR_REMOVE: u32 = abi::URDMA_MR_REMOVE;
// The keys of kernel MRs carry the module's tag, which the engine keeps
// apart from the keys it gives.
const _: () = assert!(crate::engine::KERNEL_KEY_TAG == abi::URDMA_KERNEL_KEY_TAG);
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
    let qpn = u32_at(m, offset_of!(urdma_msg_hdr, qpn));
    match kind {
        MSG_REQUEST => {
            type M = urdma_msg_request;
            if m.len() < REQUEST_LEN {
                return Err(bad("short request"));
            }
            let u32_of = |at| u32_at(m, at);
            let state = |at| QpState::from_raw(u32_of(at)).unwrap_or(QpState::Reset);
            let attr = QpAttr {
                qp_state: state(offset_of!(M, qp_state)),
                cur_qp_state: state(offset_of!(M, cur_qp_state)),
                path_mtu: Mtu::from_raw(u32_of(offset_of!(M, path_mtu))).unwrap_or(Mtu::Mtu1024),
                qkey: u32_of(offset_of!(M, qkey)),
                rq_psn: u32_of(offset_of!(M, rq_psn)),
                sq_psn: u32_of(offset_of!(M, sq_psn)),
                dest_qp_num: u32_of(offset_of!(M, dest_qp_num)),
                qp_access_flags: AccessFlags::from_bits_truncate(u32_of(offset_of!(M, access))),
                max_rd_atomic: m[offset_of!(M, max_rd_atomic)],
                max_dest_rd_atomic: m[offset_of!(M, max_dest_rd_atomic)],
                min_rnr_timer: m[offset_of!(M, min_rnr_timer)],
                timeout: m[offset_of!(M, timeout)],
                retry_cnt: m[offset_of!(M, retry_cnt)],
                rnr_retry: m[offset_of!(M, rnr_retry)],
                ..QpAttr::default()
            };
            let mut attr = attr;
            attr.ah_attr.dgid = gid_at(m, offset_of!(M, dgid));
            attr.ah_attr.flow_label = u32_of(offset_of!(M, flow_label));
            attr.ah_attr.hop_limit = m[offset_of!(M, hop_limit)];
            attr.ah_attr.traffic_class = m[offset_of!(M, traffic_class)];
            Ok(RcMessage::Request(Request {
                qpn,
                seq: u32_of(offset_of!(M, seq)),
                op: u32_of(offset_of!(M, op)),
                pd: u32_of(offset_of!(M, pd)),
                cap: QpCap {
                    max_send_wr: u32_of(offset_of!(M, max_send_wr)),
                    max_recv_wr: u32_of(offset_of!(M, max_recv_wr)),
                    max_send_sge: u32_of(offset_of!(M, max_send_sge)),
                    max_recv_sge: u32_of(offset_of!(M, max_recv_sge)),
                    max_inline_data: 0,
                },
                mask: u32_of(offset_of!(M, mask)),
                attr,
                raw_state: u32_of(offset_of!(M, qp_state)),
                raw_cur_state: u32_of(offset_of!(M, cur_qp_state)),
                raw_mtu: u32_of(offset_of!(M, path_mtu)),
            }))
        }
        MSG_POST => {
            type M = urdma_msg_post;
            type S = urdma_msg_sge;
            if m.len() < POST_LEN {
                return Err(bad("short work request"));
            }
            let n = usize::from(m[offset_of!(M, num_sge)]);
            if n > MAX_SGE || POST_LEN + n * SGE_LEN > m.len() {
                return Err(bad("bad SGE count"));
            }
            let flags = u16_at(m, offset_of!(M, flags));
            let sges = (0..n)
                .map(|i| {
                    let at = offset_of!(M, sge) + i * SGE_LEN;
                    SgEntry {
                        addr: u64_at(m, at + offset_of!(S, addr)),
                        length: u32_at(m, at + offset_of!(S, length)),
                        lkey: u32_at(m, at + offset_of!(S, lkey)),
                    }
                })
                .collect();
            Ok(RcMessage::Post(Post {
                qpn,
                seq: u32_at(m, offset_of!(M, seq)),
                recv: flags & POST_RECV != 0,
                solicited: flags & POST_SOLICITED != 0,
                opcode: m[offset_of!(M, opcode)],
                remote_addr: u64_at(m, offset_of!(M, remote_addr)),
                rkey: u32_at(m, offset_of!(M, rkey)),
                ex: u32_at(m, offset_of!(M, ex)),
                sges,
            }))
        }
        MSG_MR => {
            type M = urdma_msg_mr;
            if m.len() < MR_LEN {
                return Err(bad("short MR message"));
            }
            Ok(RcMessage::Mr(MrNote {
                op: u32_at(m, offset_of!(M, op)),
                key: u32_at(m, offset_of!(M, key)),
                pd: u32_at(m, offset_of!(M, pd)),
                access: u32_at(m, offset_of!(M, access)),
                iova: u64_at(m, offset_of!(M, iova)),
                length: u64_at(m, offset_of!(M, length)),
            }))
        }
        _ => Err(bad("unknown type")),
    }
}

/// `struct urdma_msg_reply`.
pub(super) fn reply(qpn: u32, seq: u32, status: i32, value: u32) -> Vec<u8> {
    type M = urdma_msg_reply;
    let mut m = header(MSG_REPLY, REPLY_LEN, qpn);
    put(&mut m, offset_of!(M, seq), &seq.to_ne_bytes());
    put(
        &mut m,
        offset_of!(M, status),
        &(status as u32).to_ne_bytes(),
    );
    put(&mut m, offset_of!(M, value), &value.to_ne_bytes());
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
    type M = urdma_msg_wc;
    let mut m = header(MSG_WC, WC_LEN, qpn);
    for (at, v) in [
        (offset_of!(M, seq), seq),
        (offset_of!(M, recv), u32::from(recv)),
        (offset_of!(M, status), status as u32),
        (offset_of!(M, opcode), opcode as u32),
        (offset_of!(M, byte_len), byte_len),
        (offset_of!(M, vendor_err), vendor_err),
        (offset_of!(M, ex), ex),
        (offset_of!(M, flags), flags),
    ] {
        put(&mut m, at, &v.to_ne_bytes());
    }
    m
}

/// `struct urdma_msg_qp_event`: the asynchronous event `event` of `qpn`.
pub(super) fn qp_event(qpn: u32, event: u32) -> Vec<u8> {
    let mut m = header(MSG_QP_EVENT, QP_EVENT_LEN, qpn);
    put(
        &mut m,
        offset_of!(urdma_msg_qp_event, event),
        &event.to_ne_bytes(),
    );
    m
}

//! The 64-byte slot a completion takes in a CQ ring (layout in the
//! module docs of [`super`]).

use crate::types::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Bytes of one slot.
pub(super) const SLOT_LEN: usize = 64;

/// Every status and opcode, to decode their numbers without `unsafe`.
#[rustfmt::skip]
pub(super) const STATUSES: [WcStatus; 15] = {
    use WcStatus::*;
    [Success, LocLenErr, LocQpOpErr, LocProtErr, WrFlushErr, MwBindErr, BadRespErr, LocAccessErr,
     RemInvReqErr, RemAccessErr, RemOpErr, RetryExcErr, RnrRetryExcErr, FatalErr, GeneralErr]
};
#[rustfmt::skip]
pub(super) const OPCODES: [WcOpcode; 9] = {
    use WcOpcode::*;
    [Send, RdmaWrite, RdmaRead, CompSwap, FetchAdd, BindMw, LocalInv, Recv, RecvRdmaWithImm]
};

pub(super) fn encode(wc: &WorkCompletion) -> [u8; SLOT_LEN] {
    let mut b = [0u8; SLOT_LEN];
    b[0..8].copy_from_slice(&wc.wr_id.to_le_bytes());
    let words = [
        wc.status as u32,
        wc.opcode as u32,
        wc.vendor_err,
        wc.byte_len,
        wc.imm_data,
        wc.invalidated_rkey,
        wc.qp_num,
        wc.src_qp,
        wc.wc_flags.bits(),
    ];
    for (i, w) in words.iter().enumerate() {
        b[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
    b[44..46].copy_from_slice(&wc.pkey_index.to_le_bytes());
    b[46..48].copy_from_slice(&wc.slid.to_le_bytes());
    b[48] = wc.sl;
    b[49] = wc.dlid_path_bits;
    b
}

pub(super) fn decode(b: &[u8; SLOT_LEN]) -> WorkCompletion {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let mut wr_id = [0u8; 8];
    wr_id.copy_from_slice(&b[0..8]);
    let status = STATUSES.into_iter().find(|s| *s as u32 == u32_at(8));
    let (status, opcode) = match OPCODES.into_iter().find(|o| *o as u32 == u32_at(12)) {
        Some(op) => (status, op),
        None => (None, WcOpcode::Send),
    };
    WorkCompletion {
        wr_id: u64::from_le_bytes(wr_id),
        status: status.unwrap_or(WcStatus::GeneralErr),
        opcode,
        vendor_err: u32_at(16),
        byte_len: u32_at(20),
        imm_data: u32_at(24),
        invalidated_rkey: u32_at(28),
        qp_num: u32_at(32),
        src_qp: u32_at(36),
        wc_flags: WcFlags::from_bits_truncate(u32_at(40)),
        pkey_index: u16_at(44),
        slid: u16_at(46),
        sl: b[48],
        dlid_path_bits: b[49],
    }
}

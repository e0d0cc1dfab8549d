//! Kernel RC QPs and kernel MRs, served on the kernel channel (see
//! `kernel/urdma_abi.h`): the kernel asks for QPs (`URDMA_MSG_REQUEST`),
//! posts their work requests (`URDMA_MSG_POST`) and tells of its MRs
//! (`URDMA_MSG_MR`); the NIC answers (`URDMA_MSG_REPLY`) and completes
//! every work request (`URDMA_MSG_WC`). The engine holds the QPs like any
//! other; the memory of kernel MRs is reached through the channel
//! ([`MemRegion::in_kernel`]), which the kernel checks access by access.

use super::kernel_chan::{gid_at, header, u16_at, u32_at, u64_at, BadMessage};
use crate::cq::CqShared;
use crate::engine::command::{
    AllocPd, CreateQp, DeallocPd, DeregMr, DestroyQp, ModifyQp, PostRecv, PostSend,
};
use crate::engine::{RecvRequest, SendData, SendOp, SendRequest, SgEntry};
use crate::fabric::udp::UdpDriver;
use crate::mem::MemRegion;
use crate::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use crate::types::{AsyncEvent, AsyncEventKind};
use crate::verbs::{QpAttr, QpCap};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Message types (`enum urdma_msg_type`).
pub const MSG_REQUEST: u16 = 4;
const MSG_REPLY: u16 = 5;
pub const MSG_POST: u16 = 6;
const MSG_WC: u16 = 7;
pub const MSG_MR: u16 = 8;
const MSG_QP_EVENT: u16 = 9;
/// Lengths of the fixed parts.
const REQUEST_LEN: usize = 100;
const REPLY_LEN: usize = 24;
const POST_LEN: usize = 32;
const SGE_LEN: usize = 16;
const WC_LEN: usize = 40;
const MR_LEN: usize = 40;
/// `enum urdma_request_op`.
const REQ_CREATE_QP: u32 = 1;
const REQ_MODIFY_QP: u32 = 2;
const REQ_DESTROY_QP: u32 = 3;
/// `enum urdma_post_op`.
const OP_SEND: u8 = 0;
const OP_SEND_IMM: u8 = 1;
const OP_SEND_INV: u8 = 2;
const OP_WRITE: u8 = 3;
const OP_WRITE_IMM: u8 = 4;
const OP_READ: u8 = 5;
/// `URDMA_POST_*`.
const POST_RECV: u16 = 1;
const POST_SOLICITED: u16 = 2;
/// `URDMA_WC_*`.
const WC_IMM: u32 = 1;
const WC_INV: u32 = 2;
/// `enum urdma_mr_op`.
const MR_DMA: u32 = 1;
const MR_FAST: u32 = 2;
const MR_REGISTER: u32 = 3;
const MR_INVALIDATE: u32 = 4;
const MR_REMOVE: u32 = 5;
/// Most SGEs of a kernel work request (`URDMA_MAX_SGE`).
const MAX_SGE: usize = 32;
/// A receive's work request ID carries this bit, so its completion is told
/// from a send's.
const RECV_BIT: u64 = 1 << 32;
/// CQ numbers of kernel QPs (out of the range sessions use).
const KERNEL_CQN_BASE: u32 = 0x8000_0000;

/// A request of the kernel (`struct urdma_msg_request`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    qpn: u32,
    seq: u32,
    op: u32,
    pd: u32,
    cap: QpCap,
    mask: u32,
    attr: QpAttr,
    /// The state, current state and path MTU as sent (checked when used).
    raw_state: u32,
    raw_cur_state: u32,
    raw_mtu: u32,
}

/// A work request of a kernel QP (`struct urdma_msg_post`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    qpn: u32,
    seq: u32,
    recv: bool,
    solicited: bool,
    opcode: u8,
    remote_addr: u64,
    rkey: u32,
    ex: u32,
    sges: Vec<SgEntry>,
}

/// A kernel MR's change (`struct urdma_msg_mr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrNote {
    op: u32,
    key: u32,
    pd: u32,
    access: u32,
    iova: u64,
    length: u64,
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
fn reply(qpn: u32, seq: u32, status: i32, value: u32) -> Vec<u8> {
    let mut m = header(MSG_REPLY, REPLY_LEN, qpn);
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&(status as u32).to_ne_bytes());
    m.extend_from_slice(&value.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m
}

/// `struct urdma_msg_wc` for work request `seq` of `qpn`.
#[allow(clippy::too_many_arguments)]
fn wc_message(
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

/// The kernel RC QPs of a device and the channel their events go to, for
/// the device's event routing (which runs apart from the channel's
/// thread).
#[derive(Debug, Default)]
pub struct KernelQps {
    inner: Mutex<(Option<Arc<File>>, HashSet<u32>)>,
}

impl KernelQps {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Arc<File>>, HashSet<u32>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hand `ev` to the kernel if it is an event of a kernel QP (`struct
    /// urdma_msg_qp_event`); false if it is not one.
    pub fn raise(&self, ev: &AsyncEvent) -> bool {
        use AsyncEventKind as K;
        if matches!(ev.kind, K::CqErr | K::SrqLimitReached) {
            return false;
        }
        let g = self.lock();
        let (Some(chan), true) = (&g.0, g.1.contains(&ev.object)) else {
            return false;
        };
        let mut m = header(MSG_QP_EVENT, 16, ev.object);
        m.extend_from_slice(&(ev.kind as u32).to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        if let Err(e) = (&**chan).write_all(&m) {
            tracing::debug!(?ev, error = %e, "kernel QP event lost");
        }
        true
    }
}

/// A kernel RC QP as the NIC keeps it.
struct KernelQp {
    /// The one CQ of both queues (the kernel sorts completions out).
    cq: Arc<CqShared>,
}

/// The kernel's QPs, PDs and MRs the NIC holds for one channel.
pub struct KernelRc {
    chan: Arc<File>,
    /// Kernel PD number to engine PD.
    pds: HashMap<u32, u32>,
    qps: HashMap<u32, KernelQp>,
    /// Kernel MR index to the key the engine holds it under (MRs the
    /// engine has: DMA MRs and registered fast MRs).
    mrs: HashMap<u32, u32>,
    next_cqn: u32,
    wake: Arc<dyn Fn() + Send + Sync>,
    events: Arc<KernelQps>,
}

impl KernelRc {
    /// State for the channel `chan`; `wake` runs when a kernel QP's CQ
    /// has completions to forward; `events` routes the QPs' events.
    pub fn new(chan: Arc<File>, wake: Arc<dyn Fn() + Send + Sync>, events: Arc<KernelQps>) -> Self {
        *events.lock() = (Some(chan.clone()), HashSet::new());
        KernelRc {
            chan,
            pds: HashMap::new(),
            qps: HashMap::new(),
            mrs: HashMap::new(),
            next_cqn: KERNEL_CQN_BASE,
            wake,
            events,
        }
    }

    /// The engine PD of kernel PD `kpd`, made on first use.
    fn pd(&mut self, driver: &UdpDriver, kpd: u32) -> crate::Result<u32> {
        if let Some(&pd) = self.pds.get(&kpd) {
            return Ok(pd);
        }
        let pd = driver.call(AllocPd {})?;
        self.pds.insert(kpd, pd);
        Ok(pd)
    }

    /// Carry out one message; returns what to write back to the kernel.
    pub fn handle(&mut self, driver: &UdpDriver, msg: RcMessage) -> Vec<u8> {
        match msg {
            RcMessage::Request(r) => {
                let (status, value) = match self.request(driver, &r) {
                    Ok(v) => (0, v),
                    Err(e) => {
                        tracing::debug!(op = r.op, qpn = r.qpn, error = %e, "kernel request refused");
                        (e.errno(), 0)
                    }
                };
                // Request 0 wants no answer (a QP the kernel failed).
                if r.seq == 0 {
                    return Vec::new();
                }
                reply(r.qpn, r.seq, status, value)
            }
            RcMessage::Post(p) => self.post(driver, p),
            RcMessage::Mr(n) => {
                if let Err(e) = self.mr(driver, &n) {
                    tracing::debug!(?n, error = %e, "kernel MR change refused");
                }
                Vec::new()
            }
        }
    }

    fn request(&mut self, driver: &UdpDriver, r: &Request) -> crate::Result<u32> {
        match r.op {
            REQ_CREATE_QP => {
                // Checked before the CQ is sized from them.
                let max_wr = driver.inspect(|e| e.attr().max_qp_wr);
                if r.cap.max_send_wr > max_wr || r.cap.max_recv_wr > max_wr {
                    return Err(crate::Error::inval("queue depth above max_qp_wr"));
                }
                let pd = self.pd(driver, r.pd)?;
                let depth = (r.cap.max_send_wr as usize + r.cap.max_recv_wr as usize) * 2;
                let cqn = self.next_cqn;
                self.next_cqn = self.next_cqn.wrapping_add(1) | KERNEL_CQN_BASE;
                let cq = Arc::new(CqShared::new_shared(cqn, depth.max(16))?);
                let wake = self.wake.clone();
                cq.set_notifier(Some(Box::new(move || wake())));
                cq.req_notify(false);
                let qpn = driver.call(CreateQp {
                    pd,
                    qp_type: QpType::Rc,
                    cap: r.cap,
                    sq_sig_all: true,
                    send_cq: cq.clone(),
                    recv_cq: cq.clone(),
                    srq: None,
                })?;
                self.qps.insert(qpn, KernelQp { cq });
                self.events.lock().1.insert(qpn);
                Ok(qpn)
            }
            REQ_MODIFY_QP => {
                self.known(r.qpn)?;
                let mask = QpAttrMask::from_bits_truncate(r.mask);
                let bad = |m, ok: bool| mask.contains(m) && !ok;
                if bad(QpAttrMask::STATE, QpState::from_raw(r.raw_state).is_some())
                    || bad(
                        QpAttrMask::CUR_STATE,
                        QpState::from_raw(r.raw_cur_state).is_some(),
                    )
                    || bad(QpAttrMask::PATH_MTU, Mtu::from_raw(r.raw_mtu).is_some())
                {
                    return Err(crate::Error::inval("unknown QP state or path MTU"));
                }
                let mut attr = r.attr;
                attr.pkey_index = 0;
                attr.port_num = 1;
                driver.call(ModifyQp {
                    qpn: r.qpn,
                    attr,
                    mask,
                })?;
                if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset {
                    // What the QP completed before is not the kernel's to see.
                    if let Some(qp) = self.qps.get(&r.qpn) {
                        qp.cq.discard_qp(r.qpn);
                    }
                }
                Ok(0)
            }
            REQ_DESTROY_QP => {
                self.known(r.qpn)?;
                driver.call(DestroyQp { qpn: r.qpn })?;
                self.qps.remove(&r.qpn);
                self.events.lock().1.remove(&r.qpn);
                Ok(0)
            }
            _ => Err(crate::Error::NotSupported(format!("request {}", r.op))),
        }
    }

    fn known(&self, qpn: u32) -> crate::Result<()> {
        if self.qps.contains_key(&qpn) {
            Ok(())
        } else {
            Err(crate::Error::NotFound(format!("kernel qp {qpn}")))
        }
    }

    /// Post a work request; one the engine refuses completes in error.
    fn post(&mut self, driver: &UdpDriver, p: Post) -> Vec<u8> {
        let refused = |why: crate::Error, opcode| {
            tracing::debug!(qpn = p.qpn, seq = p.seq, error = %why, "kernel work request refused");
            wc_message(
                p.qpn,
                p.seq,
                p.recv,
                WcStatus::LocQpOpErr,
                opcode,
                0,
                0,
                0,
                0,
            )
        };
        if !self.qps.contains_key(&p.qpn) {
            // Every kernel work request completes, even on no QP.
            let op = if p.recv {
                WcOpcode::Recv
            } else {
                WcOpcode::Send
            };
            return refused(crate::Error::NotFound(format!("kernel qp {}", p.qpn)), op);
        }
        if p.recv {
            let wr = RecvRequest {
                wr_id: u64::from(p.seq) | RECV_BIT,
                sges: p.sges,
            };
            return match driver.call(PostRecv { qpn: p.qpn, wr }) {
                Ok(()) => Vec::new(),
                Err(e) => refused(e, WcOpcode::Recv),
            };
        }
        let op = match p.opcode {
            OP_SEND => SendOp::Send,
            OP_SEND_IMM => SendOp::SendImm(p.ex),
            OP_SEND_INV => SendOp::SendInv(p.ex),
            OP_WRITE => SendOp::Write,
            OP_WRITE_IMM => SendOp::WriteImm(p.ex),
            OP_READ => SendOp::Read,
            _ => return refused(crate::Error::inval("unknown operation"), WcOpcode::Send),
        };
        let wr = SendRequest {
            wr_id: u64::from(p.seq),
            op,
            data: SendData::Sges(p.sges),
            remote_va: p.remote_addr,
            rkey: p.rkey,
            signaled: true,
            solicited: p.solicited,
            ud: None,
            // Kernel consumers' requests run in order; the channel carries
            // no fence.
            fence: false,
        };
        match driver.call(PostSend { qpn: p.qpn, wr }) {
            Ok(()) => Vec::new(),
            Err(e) => refused(e, op.wc_opcode()),
        }
    }

    fn mr(&mut self, driver: &UdpDriver, n: &MrNote) -> crate::Result<()> {
        let index = (n.key >> 8) & 0xffff;
        let access = AccessFlags::from_bits_truncate(n.access);
        if ![MR_DMA, MR_FAST, MR_INVALIDATE, MR_REGISTER, MR_REMOVE].contains(&n.op) {
            return Err(crate::Error::inval("unknown MR operation"));
        }
        // What the engine holds for the MR now ends.
        if let Some(key) = self.mrs.remove(&index) {
            let _ = driver.call(DeregMr { key });
        }
        let (pd, iova, len, invalidatable) = match n.op {
            MR_DMA => (self.pd(driver, n.pd)?, 0, usize::MAX, false),
            MR_REGISTER => {
                let len = usize::try_from(n.length)
                    .map_err(|_| crate::Error::inval("registration too long"))?;
                (self.pd(driver, n.pd)?, n.iova, len, true)
            }
            MR_REMOVE => {
                // A PD's DMA MR goes when the PD does (the kernel names
                // no other end of a PD): once nothing of it is left, the
                // engine's PD goes too (the engine refuses while MRs or
                // QPs remain, and a later use makes it again).
                if let Some(&pd) = self.pds.get(&n.pd) {
                    if driver.call(DeallocPd { pd }).is_ok() {
                        self.pds.remove(&n.pd);
                    }
                }
                return Ok(());
            }
            // Fast MRs made or invalidated: nothing for the engine.
            _ => return Ok(()),
        };
        let mem = MemRegion::in_kernel(self.chan.clone(), n.key, iova, len);
        driver
            .with_engine(|e, _| e.insert_kernel_mr(n.key, pd, access, iova, mem, invalidatable))?;
        self.mrs.insert(index, n.key);
        Ok(())
    }

    /// The completions of kernel QPs, as messages for the kernel. Each
    /// CQ is armed again first, so that a completion after this poll
    /// wakes the channel.
    pub fn completions(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut wcs = Vec::new();
        for (&qpn, qp) in &self.qps {
            qp.cq.req_notify(false);
            wcs.clear();
            if let Err(e) = qp.cq.poll(usize::MAX, &mut wcs) {
                tracing::warn!(qpn, error = %e, "kernel QP's completions lost");
            }
            for wc in &wcs {
                let recv = wc.wr_id & RECV_BIT != 0;
                let (ex, flags) = if wc.wc_flags.contains(WcFlags::WITH_IMM) {
                    (wc.imm_data, WC_IMM)
                } else if wc.wc_flags.contains(WcFlags::WITH_INV) {
                    (wc.invalidated_rkey, WC_INV)
                } else {
                    (0, 0)
                };
                out.extend(wc_message(
                    qpn,
                    wc.wr_id as u32,
                    recv,
                    wc.status,
                    wc.opcode,
                    wc.byte_len,
                    wc.vendor_err,
                    ex,
                    flags,
                ));
            }
        }
        out
    }

    /// The channel closes: the kernel's QPs and MRs end in the engine.
    pub fn close(&mut self, driver: &UdpDriver) {
        *self.events.lock() = (None, HashSet::new());
        for (qpn, _) in self.qps.drain() {
            let _ = driver.call(DestroyQp { qpn });
        }
        for (_, key) in self.mrs.drain() {
            let _ = driver.call(DeregMr { key });
        }
        for (_, pd) in self.pds.drain() {
            let _ = driver.call(DeallocPd { pd });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::Gid;

    fn post_bytes(seq: u32, flags: u16, opcode: u8, sges: &[(u64, u32, u32)]) -> Vec<u8> {
        let mut m = header(MSG_POST, POST_LEN + sges.len() * SGE_LEN, 0x123);
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.push(opcode);
        m.push(sges.len() as u8);
        m.extend_from_slice(&0x1000u64.to_ne_bytes());
        m.extend_from_slice(&0xfe00_0105u32.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        for &(a, l, k) in sges {
            m.extend_from_slice(&a.to_ne_bytes());
            m.extend_from_slice(&l.to_ne_bytes());
            m.extend_from_slice(&k.to_ne_bytes());
        }
        m
    }

    #[test]
    fn work_requests_parse_field_by_field() {
        let m = post_bytes(
            9,
            POST_SOLICITED,
            OP_SEND_INV,
            &[(0xffff_8880_0000_1000, 64, 0xfe00_0100)],
        );
        let RcMessage::Post(p) = parse(MSG_POST, &m, 0).unwrap() else {
            panic!("not a post")
        };
        assert_eq!((p.qpn, p.seq, p.recv, p.solicited), (0x123, 9, false, true));
        assert_eq!(
            (p.opcode, p.remote_addr, p.rkey, p.ex),
            (OP_SEND_INV, 0x1000, 0xfe00_0105, 7)
        );
        assert_eq!(
            p.sges,
            [SgEntry {
                addr: 0xffff_8880_0000_1000,
                length: 64,
                lkey: 0xfe00_0100
            }]
        );
    }

    #[test]
    fn malformed_kernel_messages_are_refused() {
        let mut m = post_bytes(1, POST_RECV, 0, &[(0, 1, 2)]);
        m[15] = 2;
        assert!(parse(MSG_POST, &m, 0).is_err());
        m[15] = 200;
        assert!(parse(MSG_POST, &m, 0).is_err());
        assert!(parse(MSG_REQUEST, &m[..40], 0).is_err());
        assert!(parse(MSG_MR, &m[..16], 0).is_err());
        assert!(parse(99, &m, 0).is_err());
    }

    #[test]
    fn requests_carry_the_path_and_the_attributes() {
        let mut m = header(MSG_REQUEST, 104, 0x55);
        m.resize(104, 0);
        m[8..12].copy_from_slice(&3u32.to_ne_bytes());
        m[12..16].copy_from_slice(&REQ_MODIFY_QP.to_ne_bytes());
        m[40..44].copy_from_slice(&2u32.to_ne_bytes());
        m[48..52].copy_from_slice(&5u32.to_ne_bytes());
        m[64..68].copy_from_slice(&0x77u32.to_ne_bytes());
        m[76] = 4;
        m[84..100].copy_from_slice(&Gid::from_ip("169.254.0.9".parse().unwrap()).0);
        let RcMessage::Request(r) = parse(MSG_REQUEST, &m, 0).unwrap() else {
            panic!("not a request")
        };
        assert_eq!((r.qpn, r.seq, r.op), (0x55, 3, REQ_MODIFY_QP));
        assert_eq!(r.attr.qp_state, QpState::Rtr);
        assert_eq!(r.attr.path_mtu, Mtu::Mtu4096);
        assert_eq!((r.attr.dest_qp_num, r.attr.max_rd_atomic), (0x77, 4));
        assert_eq!(
            r.attr.ah_attr.dgid.to_ip(),
            "169.254.0.9".parse::<std::net::IpAddr>().unwrap()
        );
    }

    #[test]
    fn completions_and_replies_have_the_module_layout() {
        let w = wc_message(
            5,
            6,
            true,
            WcStatus::Success,
            WcOpcode::Recv,
            100,
            0,
            9,
            WC_INV,
        );
        assert_eq!(w.len(), WC_LEN);
        assert_eq!(
            (u16_at(&w, 0), u32_at(&w, 8), u32_at(&w, 12)),
            (MSG_WC, 6, 1)
        );
        assert_eq!(
            (u32_at(&w, 20), u32_at(&w, 24), u32_at(&w, 32)),
            (128, 100, 9)
        );
        let r = reply(5, 6, libc::EINVAL, 0);
        assert_eq!(r.len(), REPLY_LEN);
        assert_eq!(
            (u16_at(&r, 0), u32_at(&r, 12)),
            (MSG_REPLY, libc::EINVAL as u32)
        );
    }
}

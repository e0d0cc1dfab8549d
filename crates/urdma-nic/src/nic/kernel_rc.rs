//! Kernel RC QPs and kernel MRs, served on the kernel channel (see
//! `kernel/urdma_abi.h`): the kernel asks for QPs (`URDMA_MSG_REQUEST`),
//! posts their work requests (`URDMA_MSG_POST`) and tells of its MRs
//! (`URDMA_MSG_MR`); the NIC answers (`URDMA_MSG_REPLY`) and completes
//! every work request (`URDMA_MSG_WC`). The engine holds the QPs like any
//! other; the memory of kernel MRs is reached through the channel
//! ([`MemRegion::in_kernel`]), which the kernel checks access by access.

mod wire;

use crate::cq::CqShared;
use crate::engine::command::{
    AllocPd, CreateQp, DeallocPd, DeregMr, DestroyQp, ModifyQp, PostRecv, PostSend,
};
use crate::engine::{RecvRequest, SendData, SendOp, SendRequest};
use crate::fabric::udp::UdpDriver;
use crate::mem::MemRegion;
use crate::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use crate::types::{AsyncEvent, AsyncEventKind};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};
use wire::*;
pub use wire::{parse, MrNote, Post, RcMessage, Request, MSG_MR, MSG_POST, MSG_REQUEST};

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
        let m = qp_event(ev.object, ev.kind as u32);
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
        driver.with_engine(|e, _| {
            e.insert_kernel_mr(n.key, pd, access, iova, Box::new(mem), invalidatable)
        })?;
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
mod tests;

//! One direction of traffic of a QP pair: its buffers, its planned work
//! requests and receives, and the model of what they leave in memory.

use rand::rngs::StdRng;
use rand::Rng;
use urdma_proto::engine::{SendData, SendOp, SendRequest};
use urdma_proto::sim::SimNet;
use urdma_proto::types::WcOpcode;

use crate::buf::{gather, scatter, split, Buf, Bump, Parts};
use crate::workload::{Ep, Shape};

/// The operation of a planned work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

/// A planned send work request.
#[derive(Debug, Clone)]
pub(crate) struct PlannedWr {
    pub(crate) wr_id: u64,
    pub(crate) kind: Kind,
    pub(crate) op: SendOp,
    pub(crate) len: usize,
    /// Source parts in `src` (SEND/WRITE) or result parts in `sink`.
    pub(crate) local: Parts,
    pub(crate) inline: bool,
    /// Offset in the responder's region (WRITE target, READ source, slot).
    pub(crate) remote_off: usize,
    /// Atomic on the device-wide shared counter.
    pub(crate) shared: bool,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) post_at: u64,
}

/// A planned receive work request.
#[derive(Debug, Clone)]
pub(crate) struct PlannedRecv {
    pub(crate) wr_id: u64,
    pub(crate) parts: Parts,
    pub(crate) post_at: u64,
    /// What it should receive: (opcode, byte_len, imm, data of a SEND).
    pub(crate) expect: (WcOpcode, usize, Option<u32>, Vec<u8>),
}

/// Traffic in one direction of a QP pair.
pub(crate) struct Flow {
    pub(crate) req: usize,
    pub(crate) resp: usize,
    /// Requester: gather source (read-only) and READ/atomic result sink.
    pub(crate) src: Buf,
    pub(crate) sink: Buf,
    /// Responder: receive buffers, WRITE target, READ source, atomic slots.
    pub(crate) recv: Buf,
    pub(crate) wtarget: Buf,
    pub(crate) rsrc: Buf,
    pub(crate) slots: Buf,
    pub(crate) wrs: Vec<PlannedWr>,
    pub(crate) recvs: Vec<PlannedRecv>,
}

/// Offsets of the FETCH_ADD and CMP_AND_SWP words in a flow's atomic slots.
const SLOT_FADD: usize = 0;
const SLOT_CAS: usize = 8;

/// A message length within what is left of `budget` (taken from it).
fn random_len(rng: &mut StdRng, mtu: usize, budget: &mut usize) -> usize {
    let want = match rng.gen_range(0..100) {
        0..=4 => 0,
        5..=39 => rng.gen_range(1..=64),
        40..=69 => rng.gen_range(1..=2 * mtu + 1),
        70..=89 => rng.gen_range(1..=16 * 1024),
        _ => rng.gen_range(16 * 1024..=64 * 1024),
    };
    let len = want.min(*budget);
    *budget -= len;
    len
}

/// Register the buffers of a flow from `req` to `resp` and plan its
/// work requests and receives.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_flow(
    net: &mut SimNet,
    rng: &mut StdRng,
    eps: &[Ep],
    pds: &[u32; 2],
    req: usize,
    resp: usize,
    mtu: usize,
    shape: Shape,
    next_wr_id: &mut u64,
) -> Flow {
    let rdev = eps[req].dev;
    let tdev = eps[resp].dev;
    let iova = |rng: &mut StdRng| rng.gen_range(0..1u64 << 40);
    let src_len = 64 * 1024 + rng.gen_range(64..4096);
    let src = Buf::new(net, rdev, pds[rdev], src_len, iova(rng), Some(rng));
    let wt_len = 64 * 1024 + rng.gen_range(64..8192);
    let wtarget = Buf::new(net, tdev, pds[tdev], wt_len, iova(rng), Some(rng));
    let rs_len = 64 * 1024 + rng.gen_range(64..4096);
    let rsrc = Buf::new(net, tdev, pds[tdev], rs_len, iova(rng), Some(rng));
    let mut slots = Buf::new(net, tdev, pds[tdev], 16, iova(rng) & !7, Some(rng));
    let mut slot_fadd = u64::from_ne_bytes(
        slots.model[SLOT_FADD..SLOT_FADD + 8]
            .try_into()
            .unwrap_or_default(),
    );
    let mut slot_cas = u64::from_ne_bytes(
        slots.model[SLOT_CAS..SLOT_CAS + 8]
            .try_into()
            .unwrap_or_default(),
    );

    let mut sink_bump = Bump(0);
    let mut recv_bump = Bump(0);
    let mut sink_writes: Vec<(Parts, Vec<u8>)> = Vec::new();
    let mut recv_writes: Vec<(Parts, Vec<u8>)> = Vec::new();
    let mut wt_model = wtarget.model.clone();

    let n = rng.gen_range(1..=shape.max_wrs);
    let mut budget = rng.gen_range(0..=shape.max_budget);
    let sig_all = eps[req].sig_all;
    let p_signaled = [0.2, 0.6, 1.0][rng.gen_range(0..3)];
    let spread_sends = rng.gen_bool(0.5);
    let late_recvs = rng.gen_bool(0.35);
    let mut t_send = 0u64;
    let mut wrs = Vec::new();
    let mut recv_expect: Vec<(WcOpcode, usize, Option<u32>, Vec<u8>)> = Vec::new();
    for i in 0..n {
        let kind = match rng.gen_range(0..100) {
            0..=21 => Kind::Send,
            22..=31 => Kind::SendImm,
            32..=51 => Kind::Write,
            52..=61 => Kind::WriteImm,
            62..=81 => Kind::Read,
            82..=91 => Kind::FetchAdd,
            _ => Kind::CmpSwap,
        };
        let wr_id = *next_wr_id;
        *next_wr_id += 1;
        let imm: u32 = rng.gen();
        let atomic = matches!(kind, Kind::FetchAdd | Kind::CmpSwap);
        let len = if atomic {
            8
        } else {
            random_len(rng, mtu, &mut budget)
        };
        let mut w = PlannedWr {
            wr_id,
            kind,
            op: SendOp::Send,
            len,
            local: Vec::new(),
            inline: false,
            remote_off: 0,
            shared: false,
            signaled: sig_all || i + 1 == n || rng.gen_bool(p_signaled),
            solicited: rng.gen_bool(0.2),
            post_at: t_send,
        };
        if spread_sends {
            t_send += rng.gen_range(0..200_000);
        }
        match kind {
            Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                w.op = match kind {
                    Kind::Send => SendOp::Send,
                    Kind::SendImm => SendOp::SendImm(imm),
                    Kind::Write => SendOp::Write,
                    _ => SendOp::WriteImm(imm),
                };
                w.inline = len <= 256 && rng.gen_bool(0.3);
                w.local = split(rng, len, 4)
                    .into_iter()
                    .map(|l| (rng.gen_range(0..=src_len - l), l))
                    .collect();
                let data = gather(&src.model, &w.local);
                match kind {
                    Kind::Send | Kind::SendImm => {
                        let imm = (kind == Kind::SendImm).then_some(imm);
                        recv_expect.push((WcOpcode::Recv, len, imm, data));
                    }
                    _ => {
                        w.remote_off = rng.gen_range(0..=wt_len - len);
                        wt_model[w.remote_off..w.remote_off + len].copy_from_slice(&data);
                        if kind == Kind::WriteImm {
                            recv_expect.push((
                                WcOpcode::RecvRdmaWithImm,
                                len,
                                Some(imm),
                                Vec::new(),
                            ));
                        }
                    }
                }
            }
            Kind::Read => {
                w.op = SendOp::Read;
                let lens = split(rng, len, 4);
                w.local = sink_bump.parts(rng, &lens);
                w.remote_off = rng.gen_range(0..=rs_len - len);
                let data = rsrc.model[w.remote_off..w.remote_off + len].to_vec();
                sink_writes.push((w.local.clone(), data));
            }
            Kind::FetchAdd | Kind::CmpSwap => {
                let lens = if rng.gen_bool(0.2) {
                    let a = rng.gen_range(1..8);
                    vec![a, 8 - a]
                } else {
                    vec![8]
                };
                w.local = sink_bump.parts(rng, &lens);
                if kind == Kind::FetchAdd {
                    let add = rng.gen_range(1..=1_000_000u64);
                    w.op = SendOp::FetchAdd { add };
                    w.shared = rng.gen_bool(0.5);
                    if w.shared {
                        // Result checked against a serial order at the end.
                        sink_writes.push((w.local.clone(), Vec::new()));
                    } else {
                        w.remote_off = SLOT_FADD;
                        sink_writes.push((w.local.clone(), slot_fadd.to_ne_bytes().to_vec()));
                        slot_fadd = slot_fadd.wrapping_add(add);
                    }
                } else {
                    let compare = if rng.gen_bool(0.6) {
                        slot_cas
                    } else {
                        rng.gen()
                    };
                    let swap: u64 = rng.gen();
                    w.op = SendOp::CompSwap { compare, swap };
                    w.remote_off = SLOT_CAS;
                    sink_writes.push((w.local.clone(), slot_cas.to_ne_bytes().to_vec()));
                    if slot_cas == compare {
                        slot_cas = swap;
                    }
                }
            }
        }
        wrs.push(w);
    }
    // Receives: one per SEND and WRITE_WITH_IMM, in the same order.
    let mut recvs = Vec::new();
    let mut t_recv = 0u64;
    for (opc, len, imm, data) in recv_expect {
        let cap = if opc == WcOpcode::Recv {
            len + if rng.gen_bool(0.5) {
                0
            } else {
                rng.gen_range(0..64)
            }
        } else {
            rng.gen_range(0..16)
        };
        let lens = split(rng, cap, 4);
        let parts = recv_bump.parts(rng, &lens);
        if opc == WcOpcode::Recv {
            recv_writes.push((parts.clone(), data.clone()));
        }
        if late_recvs {
            t_recv += rng.gen_range(0..300_000);
        }
        recvs.push(PlannedRecv {
            wr_id: *next_wr_id,
            parts,
            post_at: t_recv,
            expect: (opc, len, imm, data),
        });
        *next_wr_id += 1;
    }
    let mut sink = Buf::new(net, rdev, pds[rdev], sink_bump.0.max(1), iova(rng), None);
    for (parts, data) in sink_writes {
        scatter(&mut sink.model, &parts, &data);
    }
    let mut recv = Buf::new(net, tdev, pds[tdev], recv_bump.0.max(1), iova(rng), None);
    for (parts, data) in recv_writes {
        scatter(&mut recv.model, &parts, &data);
    }
    let mut wtarget = wtarget;
    wtarget.model = wt_model;
    slots.model[SLOT_FADD..SLOT_FADD + 8].copy_from_slice(&slot_fadd.to_ne_bytes());
    slots.model[SLOT_CAS..SLOT_CAS + 8].copy_from_slice(&slot_cas.to_ne_bytes());
    Flow {
        req,
        resp,
        src,
        sink,
        recv,
        wtarget,
        rsrc,
        slots,
        wrs,
        recvs,
    }
}

/// The request that posts `w` of flow `f` (whose responder is on device
/// `resp_dev`).
pub(crate) fn send_request(
    f: &Flow,
    w: &PlannedWr,
    shared: &[(Buf, u64)],
    resp_dev: usize,
) -> SendRequest {
    let data = match w.kind {
        Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
            if w.inline {
                SendData::Inline(gather(&f.src.model, &w.local))
            } else {
                SendData::Sges(w.local.iter().map(|&(o, l)| f.src.sge(o, l)).collect())
            }
        }
        _ => SendData::Sges(w.local.iter().map(|&(o, l)| f.sink.sge(o, l)).collect()),
    };
    let (remote_va, rkey) = match w.kind {
        Kind::Send | Kind::SendImm => (0, 0),
        Kind::Write | Kind::WriteImm => {
            (f.wtarget.mr.iova + w.remote_off as u64, f.wtarget.mr.rkey)
        }
        Kind::Read => (f.rsrc.mr.iova + w.remote_off as u64, f.rsrc.mr.rkey),
        Kind::FetchAdd | Kind::CmpSwap => {
            if w.shared {
                let b = &shared[resp_dev].0;
                (b.mr.iova, b.mr.rkey)
            } else {
                (f.slots.mr.iova + w.remote_off as u64, f.slots.mr.rkey)
            }
        }
    };
    SendRequest {
        wr_id: w.wr_id,
        op: w.op,
        data,
        remote_va,
        rkey,
        signaled: w.signaled,
        solicited: w.solicited,
        ud: None,
        fence: false,
    }
}

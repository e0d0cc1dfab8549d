//! The model of expected results and the checker: every completion in
//! order with the right fields, the shared counters a serial execution,
//! every byte of every buffer as the model says.

use std::collections::BTreeMap;

use urdma_abi::cq::CqShared;
use urdma_proto::engine::{Counters, SendOp};
use urdma_proto::sim::SimStats;
use urdma_proto::types::{QpState, WcFlags, WcOpcode, WcStatus, WorkCompletion};

use crate::buf::{gather, scatter, Parts};
use crate::flow::{Flow, Kind, PlannedRecv, PlannedWr};
use crate::report::pending_summary;
use crate::workload::{Ep, Workload};
/// Every completion waiting on `cq`.
pub(crate) fn poll_all(cq: &CqShared) -> Result<Vec<WorkCompletion>, String> {
    let mut v = Vec::new();
    loop {
        match cq.poll(256, &mut v) {
            Ok(0) => return Ok(v),
            Ok(_) => {}
            Err(e) => return Err(format!("CQ {}: {e}", cq.cqn)),
        }
    }
}

/// Per-run numbers, for reporting and the determinism test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) seed: u64,
    pub(crate) done_at: u64,
    pub(crate) stats: SimStats,
    pub(crate) counters: Vec<Counters>,
    pub(crate) qp_counters: Vec<Option<Counters>>,
    pub(crate) completions: Vec<WorkCompletion>,
}

/// How many completions the workload should give.
pub(crate) fn expected_counts(wl: &Workload) -> usize {
    let mut n = 0;
    for f in &wl.flows {
        let all = wl.eps[f.req].sig_all;
        n += f.wrs.iter().filter(|w| all || w.signaled).count();
        n += f.recvs.len();
    }
    n
}

/// Completions waiting on the CQs of `eps`.
pub(crate) fn total_completions(eps: &[Ep]) -> usize {
    eps.iter().map(|e| e.scq.len() + e.rcq.len()).sum()
}

/// The completion opcode of a send of kind `k`.
pub(crate) fn wc_opcode(k: Kind) -> WcOpcode {
    match k {
        Kind::Send | Kind::SendImm => WcOpcode::Send,
        Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
        Kind::Read => WcOpcode::RdmaRead,
        Kind::CmpSwap => WcOpcode::CompSwap,
        Kind::FetchAdd => WcOpcode::FetchAdd,
    }
}

/// The first offset where `a` and `b` differ.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Check a workload that completed at `done_at` against its model.
pub(crate) fn check(wl: &mut Workload, done_at: u64) -> Result<Outcome, String> {
    let mut errs: Vec<String> = Vec::new();
    let mut all_wcs = Vec::new();
    // Completions per QP.
    let mut scqs = Vec::new();
    let mut rcqs = Vec::new();
    for ep in &wl.eps {
        scqs.push(poll_all(&ep.scq)?);
        rcqs.push(poll_all(&ep.rcq)?);
        match wl.net.engine(ep.dev).query_qp(ep.qpn) {
            Ok(a) if a.qp_state == QpState::Rts => {}
            Ok(a) => errs.push(format!("qp {:#x} ended in {:?}", ep.qpn, a.qp_state)),
            Err(e) => errs.push(format!("qp {:#x}: {e}", ep.qpn)),
        }
    }
    for (i, ep) in wl.eps.iter().enumerate() {
        let sends_of = wl.flows.iter().find(|f| f.req == i);
        let recvs_of = wl.flows.iter().find(|f| f.resp == i);
        // Send completions: exactly the signaled WRs, in posting order.
        let expect: Vec<&PlannedWr> = sends_of
            .map(|f| f.wrs.iter().filter(|w| ep.sig_all || w.signaled).collect())
            .unwrap_or_default();
        let got = &scqs[i];
        if got.len() != expect.len() {
            errs.push(format!(
                "qp {:#x}: {} send completions, expected {}",
                ep.qpn,
                got.len(),
                expect.len()
            ));
        }
        for (k, (wc, w)) in got.iter().zip(&expect).enumerate() {
            let mut bad = wc.wr_id != w.wr_id
                || wc.status != WcStatus::Success
                || wc.opcode != wc_opcode(w.kind)
                || wc.qp_num != ep.qpn;
            if matches!(w.kind, Kind::Read | Kind::FetchAdd | Kind::CmpSwap) {
                bad |= wc.byte_len as usize != w.len;
            }
            if bad {
                errs.push(format!(
                    "qp {:#x} send completion #{k}: got wr_id {} {:?} {:?} byte_len {}, expected wr_id {} {:?} len {}",
                    ep.qpn, wc.wr_id, wc.status, wc.opcode, wc.byte_len, w.wr_id, w.kind, w.len
                ));
                break;
            }
        }
        // Receive completions: every posted receive, in order.
        let expect: Vec<&PlannedRecv> = recvs_of
            .map(|f| f.recvs.iter().collect())
            .unwrap_or_default();
        let got = &rcqs[i];
        if got.len() != expect.len() {
            errs.push(format!(
                "qp {:#x}: {} receive completions, expected {}",
                ep.qpn,
                got.len(),
                expect.len()
            ));
        }
        for (k, (wc, r)) in got.iter().zip(&expect).enumerate() {
            let (opc, len, imm, _) = &r.expect;
            let imm_ok = match imm {
                Some(v) => wc.wc_flags.contains(WcFlags::WITH_IMM) && wc.imm_data == *v,
                None => !wc.wc_flags.contains(WcFlags::WITH_IMM),
            };
            if wc.wr_id != r.wr_id
                || wc.status != WcStatus::Success
                || wc.opcode != *opc
                || wc.byte_len as usize != *len
                || !imm_ok
                || wc.qp_num != ep.qpn
            {
                errs.push(format!(
                    "qp {:#x} receive completion #{k}: got wr_id {} {:?} {:?} byte_len {} imm {:?}, expected wr_id {} {:?} len {len} imm {imm:?}",
                    ep.qpn, wc.wr_id, wc.status, wc.opcode, wc.byte_len,
                    wc.wc_flags.contains(WcFlags::WITH_IMM).then_some(wc.imm_data),
                    r.wr_id, opc
                ));
                break;
            }
        }
        all_wcs.extend(scqs[i].iter().copied());
        all_wcs.extend(rcqs[i].iter().copied());
    }

    // Shared counters: a serial order consistent with each QP's order.
    for (dev, (buf, init)) in wl.shared.iter_mut().enumerate() {
        let mut ops: Vec<(u64, u64, usize, usize)> = Vec::new(); // (orig, add, flow, idx)
        for (fi, f) in wl.flows.iter_mut().enumerate() {
            if wl.eps[f.resp].dev != dev {
                continue;
            }
            let actual = f.sink.actual();
            for (wi, w) in f.wrs.iter().enumerate() {
                if let (true, SendOp::FetchAdd { add }) = (w.shared, w.op) {
                    let bytes = gather(&actual, &w.local);
                    let orig = u64::from_ne_bytes(bytes.try_into().unwrap_or_default());
                    ops.push((orig, add, fi, wi));
                    // The model takes whatever came back; checked here.
                    scatter(&mut f.sink.model, &w.local, &orig.to_ne_bytes());
                }
            }
        }
        ops.sort_by_key(|o| o.0);
        let mut v = *init;
        let mut last_idx: BTreeMap<usize, usize> = BTreeMap::new();
        for &(orig, add, fi, wi) in &ops {
            if orig != v {
                errs.push(format!(
                    "shared counter on device {dev}: returned originals {:?} are not a serial execution from {init} (expected {v}, got {orig} for wr {})",
                    ops.iter().map(|o| o.0).collect::<Vec<_>>(),
                    wl.flows[fi].wrs[wi].wr_id
                ));
                break;
            }
            if last_idx.get(&fi).is_some_and(|&p| p > wi) {
                errs.push(format!(
                    "shared counter on device {dev}: fetch-adds of one QP executed out of order"
                ));
            }
            last_idx.insert(fi, wi);
            v = v.wrapping_add(add);
        }
        buf.model.copy_from_slice(&v.to_ne_bytes());
        if buf.actual() != buf.model {
            let got = u64::from_ne_bytes(buf.actual().try_into().unwrap_or_default());
            errs.push(format!(
                "shared counter on device {dev}: final {got}, expected {v} = {init} + sum of {} adds",
                ops.len()
            ));
        }
    }

    // Memory, byte for byte.
    for f in &wl.flows {
        let names = [
            ("requester source", &f.src),
            ("requester READ/atomic sink", &f.sink),
            ("responder receive buffers", &f.recv),
            ("responder WRITE target", &f.wtarget),
            ("responder READ source", &f.rsrc),
            ("responder atomic slots", &f.slots),
        ];
        for (name, b) in names {
            let actual = b.actual();
            if let Some(at) = first_diff(&actual, &b.model) {
                let culprit = describe_offset(f, name, at);
                errs.push(format!(
                    "flow {:#x}->{:#x}: {name} differs at offset {at} (got {:#04x}, expected {:#04x}){culprit}",
                    wl.eps[f.req].qpn, wl.eps[f.resp].qpn, actual[at], b.model[at]
                ));
            }
        }
    }
    if !errs.is_empty() {
        errs.truncate(8);
        return Err(format!("{}; {}", errs.join("; "), pending_summary(wl)));
    }
    let net = &wl.net;
    Ok(Outcome {
        seed: net.seed(),
        done_at,
        stats: net.stats(),
        counters: (0..net.device_count()).map(|d| net.counters(d)).collect(),
        qp_counters: wl
            .eps
            .iter()
            .map(|e| net.engine(e.dev).qp_counters(e.qpn))
            .collect(),
        completions: all_wcs,
    })
}

/// Name the WRs whose data covers `at` in a buffer of a flow.
fn describe_offset(f: &Flow, name: &str, at: usize) -> String {
    let hit = |parts: &Parts| parts.iter().any(|&(o, l)| o <= at && at < o + l);
    let mut v = Vec::new();
    match name {
        "requester READ/atomic sink" => {
            for w in &f.wrs {
                if matches!(w.kind, Kind::Read | Kind::FetchAdd | Kind::CmpSwap) && hit(&w.local) {
                    v.push(format!("wr {} {:?} len {}", w.wr_id, w.kind, w.len));
                }
            }
        }
        "responder receive buffers" => {
            for r in &f.recvs {
                if hit(&r.parts) {
                    v.push(format!("recv {} len {}", r.wr_id, r.expect.1));
                }
            }
        }
        "responder WRITE target" => {
            for w in &f.wrs {
                if matches!(w.kind, Kind::Write | Kind::WriteImm)
                    && w.remote_off <= at
                    && at < w.remote_off + w.len
                {
                    v.push(format!(
                        "wr {} {:?} off {} len {}",
                        w.wr_id, w.kind, w.remote_off, w.len
                    ));
                }
            }
        }
        _ => {}
    }
    if v.is_empty() {
        " (no WR covers it)".to_string()
    } else {
        format!(" (covered by {})", v.join(", "))
    }
}

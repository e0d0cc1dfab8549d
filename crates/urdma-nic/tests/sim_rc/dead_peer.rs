//! A peer that stops answering: the link dies under a running workload,
//! and the requester must fail every outstanding WR in order, within the
//! time its ACK timeout and retry count imply.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use urdma_proto::engine::command::PostSend;
use urdma_proto::engine::{Counter, SendData, SendOp, SendRequest};
use urdma_proto::sim::{FaultConfig, RunOutcome};
use urdma_proto::types::{QpState, WcOpcode, WcStatus};

use crate::model::{poll_all, wc_opcode};
use crate::report::{pending_summary, run_traced};
use crate::workload::{build, post_all, Shape, Workload};
/// Workloads of the dead-peer test: one flow over clean links, any
/// timeout and retry count.
const DEAD_SHAPE: Shape = Shape {
    max_budget: 64 * 1024,
    max_wrs: 12,
    perfect: true,
    single_flow: true,
    timeouts: (8, 14),
    retry_cnts: (0, 7),
};

/// Build and run the dead-peer scenario of `seed`; returns how long after
/// the link died the QP failed (ns).
pub(crate) fn run_dead_peer(seed: u64, trace: bool) -> Result<u64, String> {
    let mut wl = build(seed, DEAD_SHAPE);
    let r = run_traced(&mut wl, trace, |wl| dead_peer_check(wl, seed));
    r.map_err(|e| format!("{e}\n    workload: {}", wl.desc))
}

/// Kill the link under the workload and check how the QP fails.
fn dead_peer_check(wl: &mut Workload, seed: u64) -> Result<u64, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xDEAD_BEEF);
    post_all(wl)?;
    let kill_at = wl.net.now() + rng.gen_range(0..=300_000);
    match wl.net.advance_to(kill_at) {
        RunOutcome::TimeLimit | RunOutcome::Idle | RunOutcome::Satisfied => {}
        o => return Err(format!("before the kill: {o:?}; {}", pending_summary(wl))),
    }
    let (a, b) = (wl.flows[0].req, wl.flows[0].resp);
    let (da, db) = (wl.eps[a].dev, wl.eps[b].dev);
    let (qpn, qpn_b) = (wl.eps[a].qpn, wl.eps[b].qpn);
    let fwd = wl.net.link(da, db);
    let back = wl.net.link(db, da);
    let rtt = fwd.delay_ns + fwd.jitter_ns + back.delay_ns + back.jitter_ns;
    // Nothing reaches the peer from now on (and, half the time, nothing
    // comes back either). Packets already on the wire still arrive.
    wl.net.set_link(da, db, FaultConfig::dead());
    let both = rng.gen_bool(0.5);
    if both {
        wl.net.set_link(db, da, FaultConfig::dead());
    }
    let timeouts_before = wl.net.engine(da).qp_counters(qpn).unwrap_or_default()[Counter::Timeouts];

    // Every WR in posting order: (wr_id, opcode, reported on success).
    let sig_all = wl.eps[a].sig_all;
    let mut all: Vec<(u64, WcOpcode, bool)> = wl.flows[0]
        .wrs
        .iter()
        .map(|w| (w.wr_id, wc_opcode(w.kind), sig_all || w.signaled))
        .collect();
    // A few WRITEs after the kill: something is surely outstanding.
    for k in 0..rng.gen_range(1..=3u64) {
        let f = &wl.flows[0];
        let len = rng.gen_range(0..=3000usize);
        let off = rng.gen_range(0..=f.src.model.len() - len);
        let toff = rng.gen_range(0..=f.wtarget.model.len() - len);
        let signaled = rng.gen_bool(0.5);
        let req = SendRequest {
            wr_id: 1_000_000 + k,
            op: SendOp::Write,
            data: SendData::Sges(if len == 0 {
                Vec::new()
            } else {
                vec![f.src.sge(off, len)]
            }),
            remote_va: f.wtarget.mr.iova + toff as u64,
            rkey: f.wtarget.mr.rkey,
            signaled,
            solicited: false,
            ud: None,
            fence: false,
        };
        wl.net
            .with_engine(da, |e, now| e.call(now, PostSend { qpn, wr: req }))
            .map_err(|e| format!("post_send after the kill: {e}"))?;
        all.push((1_000_000 + k, WcOpcode::RdmaWrite, sig_all || signaled));
    }

    let attr = wl.net.engine(da).query_qp(qpn).map_err(|e| e.to_string())?;
    let peer = wl
        .net
        .engine(db)
        .query_qp(qpn_b)
        .map_err(|e| e.to_string())?;
    let t = (4096u64 << attr.timeout).max(urdma_proto::engine::MIN_ACK_TIMEOUT_NS);
    let retries = u64::from(attr.retry_cnt);
    // The last sign of life can come one round trip after the kill, and
    // an RNR back-off can delay the retransmission timer once more.
    let rnr = urdma_wire::rnr_timer_micros(peer.min_rnr_timer) * 1000;
    let bound = kill_at + rtt + rnr + t * (retries + 1) + 10_000;
    let out = wl.net.run_until(
        |n| {
            n.engine(da)
                .query_qp(qpn)
                .map(|q| q.qp_state == QpState::Err)
                .unwrap_or(true)
        },
        bound,
    );
    let failed_at = wl.net.now();
    if out != RunOutcome::Satisfied {
        return Err(format!(
            "QP {qpn:#x} not in ERR {} ns after the link died (timeout {} retry_cnt {}: bound {} ns): {out:?}; {}",
            failed_at - kill_at,
            attr.timeout,
            attr.retry_cnt,
            bound - kill_at,
            pending_summary(wl)
        ));
    }
    let mut errs = Vec::new();
    if failed_at < kill_at + retries * t {
        errs.push(format!(
            "gave up {} ns after the link died, before {} retries of {} ns",
            failed_at - kill_at,
            retries,
            t
        ));
    }
    let timeouts =
        wl.net.engine(da).qp_counters(qpn).unwrap_or_default()[Counter::Timeouts] - timeouts_before;
    if timeouts != retries + 1 {
        errs.push(format!(
            "{timeouts} retransmission timeouts after the kill, expected retry_cnt + 1 = {}",
            retries + 1
        ));
    }
    // Completions: successes of the WRs done before, RETRY_EXC_ERR for
    // the oldest outstanding one, WR_FLUSH_ERR for every later one.
    let wcs = poll_all(&wl.eps[a].scq)?;
    let got: Vec<(u64, WcOpcode, WcStatus)> =
        wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    match wcs.iter().position(|w| w.status != WcStatus::Success) {
        None => errs.push(format!("no error completion: {got:?}")),
        Some(i) => {
            let head = all.iter().position(|w| w.0 == wcs[i].wr_id);
            match head {
                None => errs.push(format!("error completion for unknown wr {}", wcs[i].wr_id)),
                Some(h) => {
                    let mut want: Vec<(u64, WcOpcode, WcStatus)> = all[..h]
                        .iter()
                        .filter(|w| w.2)
                        .map(|w| (w.0, w.1, WcStatus::Success))
                        .collect();
                    want.push((all[h].0, all[h].1, WcStatus::RetryExcErr));
                    want.extend(
                        all[h + 1..]
                            .iter()
                            .map(|w| (w.0, w.1, WcStatus::WrFlushErr)),
                    );
                    if got != want {
                        errs.push(format!("completions {got:?}, expected {want:?}"));
                    }
                }
            }
        }
    }
    // A QP in ERR flushes new work at once; the peer saw nothing wrong.
    let req = SendRequest {
        wr_id: 2_000_000,
        op: SendOp::Write,
        data: SendData::Sges(Vec::new()),
        remote_va: wl.flows[0].wtarget.mr.iova,
        rkey: wl.flows[0].wtarget.mr.rkey,
        signaled: false,
        solicited: false,
        ud: None,
        fence: false,
    };
    wl.net
        .with_engine(da, |e, now| e.call(now, PostSend { qpn, wr: req }))
        .map_err(|e| format!("post_send in ERR: {e}"))?;
    let late = poll_all(&wl.eps[a].scq)?;
    if late.len() != 1 || late[0].wr_id != 2_000_000 || late[0].status != WcStatus::WrFlushErr {
        errs.push(format!("post_send in ERR gave {late:?}"));
    }
    match wl.net.engine(db).query_qp(qpn_b) {
        Ok(q) if q.qp_state == QpState::Rts => {}
        other => errs.push(format!("peer QP {qpn_b:#x}: {other:?}")),
    }
    if !errs.is_empty() {
        return Err(format!(
            "{} (link died at {kill_at} ns, {} way, failed at {failed_at} ns; timeout {} retry_cnt {}); {}",
            errs.join("; "),
            if both { "both" } else { "one" },
            attr.timeout,
            attr.retry_cnt,
            pending_summary(wl)
        ));
    }
    Ok(failed_at - kill_at)
}

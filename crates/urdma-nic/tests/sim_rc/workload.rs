//! Random workload generation: the net and its links, the QP pairs, the
//! flows of traffic, and posting every request at its time.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use urdma_abi::cq::CqShared;
use urdma_proto::engine::command::{AllocPd, CreateQp, PostRecv, PostSend};
use urdma_proto::engine::RecvRequest;
use urdma_proto::sim::{FaultConfig, QpEnd, RunOutcome, SimNet};
use urdma_proto::types::{Mtu, QpType};
use urdma_proto::verbs::{ConnectOptions, QpCap};

use crate::buf::Buf;
use crate::flow::{plan_flow, send_request, Flow};
use crate::report::pending_summary;
use crate::{MAX_IN_FLIGHT, MAX_STEPS};
/// One QP's view: device, number and CQs.
pub(crate) struct Ep {
    pub(crate) dev: usize,
    pub(crate) qpn: u32,
    pub(crate) scq: Arc<CqShared>,
    pub(crate) rcq: Arc<CqShared>,
    pub(crate) sig_all: bool,
}

/// A built workload, ready to post.
pub(crate) struct Workload {
    pub(crate) net: SimNet,
    pub(crate) eps: Vec<Ep>,
    pub(crate) flows: Vec<Flow>,
    /// Per device: the shared fetch-and-add counter and its initial value.
    pub(crate) shared: Vec<(Buf, u64)>,
    pub(crate) desc: String,
    pub(crate) last_post: u64,
}

/// Faults of one direction of a link.
fn random_faults(rng: &mut StdRng) -> FaultConfig {
    let delay_ns = rng.gen_range(1_000..=20_000);
    let jitter_ns = if rng.gen_bool(0.5) {
        rng.gen_range(0..=5_000)
    } else {
        0
    };
    // Now and then, jitter that shuffles bursts (heavy reordering).
    let fifo = !rng.gen_bool(0.1);
    if rng.gen_bool(0.2) {
        return FaultConfig {
            delay_ns,
            jitter_ns,
            fifo,
            ..FaultConfig::perfect()
        };
    }
    FaultConfig {
        drop: rng.gen_range(0.0..=0.10),
        duplicate: if rng.gen_bool(0.7) {
            rng.gen_range(0.0..=0.05)
        } else {
            0.0
        },
        reorder: if rng.gen_bool(0.7) {
            rng.gen_range(0.0..=0.10)
        } else {
            0.0
        },
        reorder_delay_ns: rng.gen_range(1_000..=100_000),
        delay_ns,
        jitter_ns,
        fifo,
        corrupt: if rng.gen_bool(0.6) {
            rng.gen_range(0.0..=0.02)
        } else {
            0.0
        },
    }
}

/// A short description of a link's faults.
fn short(f: &FaultConfig) -> String {
    format!(
        "drop={:.3} dup={:.3} reorder={:.3}/{}us delay={}us+{}us{} corrupt={:.3}",
        f.drop,
        f.duplicate,
        f.reorder,
        f.reorder_delay_ns / 1000,
        f.delay_ns / 1000,
        f.jitter_ns / 1000,
        if f.fifo { "" } else { " shuffled" },
        f.corrupt
    )
}

/// Options of a workload beyond what the seed picks.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    /// Per-direction byte budget upper bound.
    pub(crate) max_budget: usize,
    /// Most WRs per direction.
    pub(crate) max_wrs: usize,
    /// Fault-free links (latency and jitter only).
    pub(crate) perfect: bool,
    /// One QP pair with traffic one way (device 0 to device 1), instead
    /// of 1-4 pairs with traffic either way or both.
    pub(crate) single_flow: bool,
    /// ACK timeout codes to pick from.
    pub(crate) timeouts: (u8, u8),
    /// Transport retry counts to pick from.
    pub(crate) retry_cnts: (u8, u8),
}

/// Workloads of the main test.
pub(crate) const MAIN_SHAPE: Shape = Shape {
    max_budget: 192 * 1024,
    max_wrs: 32,
    perfect: false,
    single_flow: false,
    timeouts: (10, 14),
    retry_cnts: (7, 7),
};

/// The net, QPs and flows of `seed`.
pub(crate) fn build(seed: u64, shape: Shape) -> Workload {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x05EE_D0F5_7A7E);
    let mut net = SimNet::new(seed, 2);
    let perfect = |rng: &mut StdRng| FaultConfig {
        delay_ns: rng.gen_range(1_000..=20_000),
        jitter_ns: rng.gen_range(0..=5_000),
        ..FaultConfig::perfect()
    };
    let f01 = if shape.perfect {
        perfect(&mut rng)
    } else {
        random_faults(&mut rng)
    };
    let f10 = if shape.perfect {
        perfect(&mut rng)
    } else {
        random_faults(&mut rng)
    };
    net.set_link(0, 1, f01);
    net.set_link(1, 0, f10);
    net.set_max_steps(MAX_STEPS);
    net.set_max_in_flight(MAX_IN_FLIGHT);

    let mtu = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ][rng.gen_range(0..5)];
    let mtu_b = mtu.bytes();
    let npairs = if shape.single_flow {
        1
    } else {
        rng.gen_range(1..=4)
    };
    let pds = [
        net.engine_mut(0).call(0, AllocPd {}).expect("pd"),
        net.engine_mut(1).call(0, AllocPd {}).expect("pd"),
    ];
    let mut shared = Vec::new();
    for (dev, &pd) in pds.iter().enumerate() {
        let mut b = Buf::new(&mut net, dev, pd, 8, 0x7000_0000 + 8 * dev as u64, None);
        let init: u64 = rng.gen_range(0..1u64 << 40);
        b.model.copy_from_slice(&init.to_ne_bytes());
        b.mr.mem.write(0, &b.model).expect("init");
        shared.push((b, init));
    }

    let mut eps = Vec::new();
    let mut desc = format!(
        "mtu={} pairs={npairs} link0->1[{}] link1->0[{}]",
        mtu_b,
        short(&f01),
        short(&f10)
    );
    let mut cqn = 1;
    let mut pairs = Vec::new();
    for _ in 0..npairs {
        let timeout = rng.gen_range(shape.timeouts.0..=shape.timeouts.1);
        let retry_cnt = match shape.retry_cnts {
            (lo, hi) if lo == hi => lo,
            (lo, hi) => rng.gen_range(lo..=hi),
        };
        let mut pair = Vec::new();
        for (dev, &pd) in pds.iter().enumerate() {
            let scq = Arc::new(CqShared::new(cqn, 1 << 14));
            let rcq = Arc::new(CqShared::new(cqn + 1, 1 << 14));
            cqn += 2;
            let sig_all = rng.gen_bool(0.1);
            let cap = QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            };
            let qpn = net
                .engine_mut(dev)
                .call(
                    0,
                    CreateQp {
                        pd,
                        qp_type: QpType::Rc,
                        cap,
                        sq_sig_all: sig_all,
                        send_cq: scq.clone(),
                        recv_cq: rcq.clone(),
                        srq: None,
                    },
                )
                .expect("create_qp");
            let psn = if rng.gen_bool(0.2) {
                0xFF_FFFF - rng.gen_range(0..64)
            } else {
                rng.gen_range(0..=0xFF_FFFF)
            };
            pair.push((
                QpEnd { dev, qpn, psn },
                ConnectOptions {
                    mtu,
                    timeout,
                    retry_cnt,
                    rnr_retry: 7,
                    min_rnr_timer: rng.gen_range(1..=8),
                    max_rd_atomic: rng.gen_range(1..=16),
                    max_dest_rd_atomic: 16,
                    ..ConnectOptions::default()
                },
            ));
            eps.push(Ep {
                dev,
                qpn,
                scq,
                rcq,
                sig_all,
            });
        }
        let ((a, oa), (b, ob)) = (pair[0].clone(), pair[1].clone());
        net.connect(QpType::Rc, a, b, &oa).expect("connect a");
        net.connect(QpType::Rc, b, a, &ob).expect("connect b");
        desc.push_str(&format!(
            " | qp {:#x}<->{:#x} psn {:#x}/{:#x} timeout={} retry_cnt={} rd_atomic={}/{} rnr_timer={}/{}",
            a.qpn,
            b.qpn,
            a.psn,
            b.psn,
            timeout,
            retry_cnt,
            oa.max_rd_atomic,
            ob.max_rd_atomic,
            oa.min_rnr_timer,
            ob.min_rnr_timer
        ));
        pairs.push((eps.len() - 2, eps.len() - 1));
    }

    let mut flows = Vec::new();
    let mut last_post = 0;
    let mut next_wr_id = 1u64;
    for &(a, b) in &pairs {
        let dirs: &[(usize, usize)] = match rng.gen_range(0..10) {
            _ if shape.single_flow => &[(a, b)],
            0..=5 => &[(a, b)],
            6..=7 => &[(b, a)],
            _ => &[(a, b), (b, a)],
        };
        for &(req, resp) in dirs {
            let f = plan_flow(
                &mut net,
                &mut rng,
                &eps,
                &pds,
                req,
                resp,
                mtu_b,
                shape,
                &mut next_wr_id,
            );
            for w in &f.wrs {
                last_post = last_post.max(w.post_at);
            }
            for r in &f.recvs {
                last_post = last_post.max(r.post_at);
            }
            desc.push_str(&format!(
                " | flow {:#x}->{:#x}: {} wrs {} recvs",
                eps[req].qpn,
                eps[resp].qpn,
                f.wrs.len(),
                f.recvs.len()
            ));
            flows.push(f);
        }
    }
    Workload {
        net,
        eps,
        flows,
        shared,
        desc,
        last_post,
    }
}

/// A post of the workload: send or receive `.1` of flow `.0`.
#[derive(Debug, Clone, Copy)]
enum Action {
    Send(usize, usize),
    Recv(usize, usize),
}

/// Post every planned request at its time, driving the net in between.
pub(crate) fn post_all(wl: &mut Workload) -> Result<(), String> {
    let mut actions: Vec<(u64, Action)> = Vec::new();
    for (fi, f) in wl.flows.iter().enumerate() {
        for (i, r) in f.recvs.iter().enumerate() {
            actions.push((r.post_at, Action::Recv(fi, i)));
        }
        for (i, w) in f.wrs.iter().enumerate() {
            actions.push((w.post_at, Action::Send(fi, i)));
        }
    }
    // Stable: per queue, posting order is kept.
    actions.sort_by_key(|a| a.0);
    for (t, a) in actions {
        match wl.net.advance_to(t) {
            RunOutcome::TimeLimit | RunOutcome::Satisfied | RunOutcome::Idle => {}
            o => {
                return Err(format!(
                    "while posting at {t} ns: {o:?}; {}",
                    pending_summary(wl)
                ))
            }
        }
        match a {
            Action::Recv(fi, i) => {
                let f = &wl.flows[fi];
                let r = &f.recvs[i];
                let ep = &wl.eps[f.resp];
                let req = RecvRequest {
                    wr_id: r.wr_id,
                    sges: r.parts.iter().map(|&(o, l)| f.recv.sge(o, l)).collect(),
                };
                let (dev, qpn) = (ep.dev, ep.qpn);
                wl.net
                    .with_engine(dev, |e, now| e.call(now, PostRecv { qpn, wr: req }))
                    .map_err(|e| format!("post_recv {}: {e}", r.wr_id))?;
            }
            Action::Send(fi, i) => {
                let f = &wl.flows[fi];
                let w = &f.wrs[i];
                let ep = &wl.eps[f.req];
                let resp_dev = wl.eps[f.resp].dev;
                let req = send_request(f, w, &wl.shared, resp_dev);
                let (dev, qpn) = (ep.dev, ep.qpn);
                wl.net
                    .with_engine(dev, |e, now| e.call(now, PostSend { qpn, wr: req }))
                    .map_err(|e| format!("post_send {}: {e}", w.wr_id))?;
            }
        }
    }
    Ok(())
}

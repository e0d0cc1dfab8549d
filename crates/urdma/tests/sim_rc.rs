//! Property tests of RC reliability over the simulated network.
//!
//! Each seed builds a random workload (1-4 RC QP pairs between two devices,
//! random MTU, a random mix of SEND, SEND_WITH_IMM, RDMA WRITE (+imm), READ,
//! CMP_AND_SWP and FETCH_ADD of random sizes and offsets, signaled or not,
//! receives posted early or late) over links with random loss, duplication,
//! reordering and corruption, runs it to completion in virtual time and
//! checks the result against a model: every byte, every atomic executed
//! exactly once, every completion in order with the right fields, and
//! nothing left pending.
//!
//! Environment:
//! - `URDMA_SIM_SEEDS=N`: number of seeds (default [`DEFAULT_SEEDS`]);
//! - `URDMA_SIM_SEED_BASE=B`: first seed (default 0);
//! - `URDMA_SIM_SEED=S`: run only seed S (replay);
//! - `URDMA_SIM_TRACE=1`: with `URDMA_SIM_SEED`, print the packet trace
//!   (needs `-- --nocapture`);
//! - `URDMA_SIM_HANG_SECS=N`: wall-clock seconds after which a seed counts
//!   as hung and the process ends (default [`HANG_SECS`]);
//! - `URDMA_SIM_INCLUDE_KNOWN=1`: also run the seeds of [`KNOWN_FAILING`].
//!
//! Every failing seed is printed with its replay command. With retry_cnt 7
//! a run can fail legitimately when all eight attempts of one packet lose
//! the request or its response (about once in 10^6 stalls at 10% loss per
//! link); the trace of the replay tells (seed 59056 is such a case).

use std::collections::BTreeMap;
use std::env;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use urdma::cq::CqShared;
use urdma::engine::command::{AllocPd, CreateQp, PostRecv, PostSend, RegMr};
use urdma::engine::SendOp;
use urdma::engine::{Counter, Counters, RecvRequest, SendData, SendRequest, SgEntry};
use urdma::fabric::sim::{FaultConfig, QpEnd, RunOutcome, SimNet, SimStats};
use urdma::mem::MemRegion;
use urdma::mr::MrEntry;
use urdma::{
    AccessFlags, ConnectOptions, Mtu, QpCap, QpState, QpType, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

/// Seeds run by default: a few thousand within the time budget of the
/// test profile.
const DEFAULT_SEEDS: u64 = 8000;

/// Seeds of [`rc_random_workloads_survive_faults`] excluded from the
/// default run because they expose a known engine bug that is not fixed
/// yet, grouped by bug. TEMPORARY: each group is to be deleted when its fix
/// lands. `URDMA_SIM_SEED=S` still replays any of them, and
/// `URDMA_SIM_INCLUDE_KNOWN=1` runs them with the rest.
const KNOWN_FAILING: &[(&str, &[u64])] = &[];

/// True if `seed` is in one of the groups of `known`.
fn is_known(known: &[(&str, &[u64])], seed: u64) -> bool {
    known.iter().any(|(_, seeds)| seeds.contains(&seed))
}

/// Virtual time allowed for a workload to complete after its last post.
const COMPLETION_BOUND_NS: u64 = 10_000_000_000;
/// Virtual time the network must go quiet in once everything completed.
const QUIESCE_NS: u64 = 2_000_000_000;
/// Steps allowed per run (a guard against livelocks that keep time moving
/// in tiny increments).
const MAX_STEPS: u64 = 2_000_000;
/// Datagrams allowed in flight at once (a guard against packet storms:
/// a healthy run stays far below; each QP's send window is 256 packets).
const MAX_IN_FLIGHT: usize = 100_000;
/// Wall-clock seconds after which one seed counts as hung (an endless
/// loop inside an engine call, or a packet storm).
const HANG_SECS: u64 = 60;

const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

// ---------------------------------------------------------------------------
// Seeds and reporting
// ---------------------------------------------------------------------------

fn env_u64(name: &str) -> Option<u64> {
    let v = env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// The seeds to run and whether this is a single-seed replay. A test
/// runs `1 / share` of `URDMA_SIM_SEEDS` (at least one seed), without
/// the `known` failing ones unless `URDMA_SIM_INCLUDE_KNOWN` is set.
fn seeds(share: u64, known: &[(&str, &[u64])]) -> (Vec<u64>, bool, usize) {
    if let Some(s) = env_u64("URDMA_SIM_SEED") {
        return (vec![s], true, 0);
    }
    let n = (env_u64("URDMA_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS) / share.max(1)).max(1);
    let base = env_u64("URDMA_SIM_SEED_BASE").unwrap_or(0);
    let include = env::var_os("URDMA_SIM_INCLUDE_KNOWN").is_some();
    let list: Vec<u64> = (base..base.saturating_add(n))
        .filter(|&s| include || !is_known(known, s))
        .collect();
    let skipped = n as usize - list.len();
    (list, false, skipped)
}

fn replay_cmd(seed: u64, test: &str) -> String {
    format!(
        "URDMA_SIM_SEED={seed} cargo test -p urdma --test sim_rc {test}   \
         (add URDMA_SIM_TRACE=1 -- --nocapture for the packet trace)"
    )
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Run `f` for every seed on all cores; panics listing every failing seed
/// with its replay command.
fn for_seeds<T: Send>(
    test: &str,
    share: u64,
    known: &[(&str, &[u64])],
    f: impl Fn(u64, bool) -> Result<T, String> + Sync,
) -> Vec<T> {
    let (list, replay, skipped) = seeds(share, known);
    run_seeds(test, &list, replay, skipped, f)
}

/// Run `f` for each seed of `list` on all cores (see [`for_seeds`]).
fn run_seeds<T: Send>(
    test: &str,
    list: &[u64],
    replay: bool,
    skipped: usize,
    f: impl Fn(u64, bool) -> Result<T, String> + Sync,
) -> Vec<T> {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let failures = Mutex::new(BTreeMap::new());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(list.len().max(1));
    // What each worker runs and since when, for the hang watchdog.
    let running: Mutex<Vec<Option<(u64, Instant)>>> = Mutex::new(vec![None; threads]);
    let finished = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for w in 0..threads {
            let (next, results, failures, running, finished, f) =
                (&next, &results, &failures, &running, &finished, &f);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                    let Some(&seed) = list.get(i) else { break };
                    running.lock().unwrap()[w] = Some((seed, Instant::now()));
                    let r = catch_unwind(AssertUnwindSafe(|| f(seed, replay)))
                        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&*p))));
                    running.lock().unwrap()[w] = None;
                    match r {
                        Ok(v) => results.lock().unwrap().push(v),
                        Err(e) => {
                            // Straight to stderr, at once: visible even if
                            // a later seed hangs and ends the process.
                            let _ = writeln!(
                                std::io::stderr(),
                                "\n=== seed {seed} FAILED: {e}\n    replay: {}",
                                replay_cmd(seed, test)
                            );
                            failures.lock().unwrap().insert(seed, e);
                        }
                    }
                }
                finished.fetch_add(1, AtomicOrdering::SeqCst);
            });
        }
        // A call into the engine that never returns cannot be interrupted:
        // report the seed and end the process.
        let hang_secs = env_u64("URDMA_SIM_HANG_SECS").unwrap_or(HANG_SECS);
        while finished.load(AtomicOrdering::SeqCst) < threads {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let hung = running
                .lock()
                .unwrap()
                .iter()
                .flatten()
                .find(|(_, t)| t.elapsed().as_secs() >= hang_secs)
                .copied();
            if let Some((seed, _)) = hung {
                // Straight to stderr: the test harness's capture would be
                // lost with the process.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n=== seed {seed} HUNG: still running after {hang_secs} s of wall-clock time \
                     (an endless loop inside an engine call, or a packet storm)\n    replay: {}",
                    replay_cmd(seed, test)
                );
                std::process::exit(101);
            }
        }
    });
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "{test}: {} seeds, {} failed, {:.1} s ({skipped} known-failing seeds skipped)",
        list.len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        let seeds: Vec<String> = failures.keys().map(|s| s.to_string()).collect();
        let first = *failures.keys().next().unwrap_or(&0);
        panic!(
            "{} of {} seeds failed: {}\nreplay one with: {}",
            failures.len(),
            list.len(),
            seeds.join(", "),
            replay_cmd(first, test)
        );
    }
    results.into_inner().unwrap()
}

// ---------------------------------------------------------------------------
// Memory helpers
// ---------------------------------------------------------------------------

/// A registered region and the model of its expected content.
struct Buf {
    mr: Arc<MrEntry>,
    model: Vec<u8>,
}

impl Buf {
    fn new(
        net: &mut SimNet,
        dev: usize,
        pd: u32,
        len: usize,
        iova: u64,
        fill: Option<&mut StdRng>,
    ) -> Buf {
        let mem = MemRegion::allocate(len).expect("allocate");
        let mut model = vec![0u8; len];
        if let Some(rng) = fill {
            rng.fill_bytes(&mut model);
            mem.write(0, &model).expect("fill");
        }
        let mr = net
            .engine_mut(dev)
            .call(
                0,
                RegMr {
                    pd,
                    access: ALL_ACCESS,
                    iova,
                    mem,
                },
            )
            .expect("reg_mr");
        Buf { mr, model }
    }

    fn actual(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.model.len()];
        self.mr.mem.read(0, &mut v).expect("read back");
        v
    }

    fn sge(&self, off: usize, len: usize) -> SgEntry {
        SgEntry {
            addr: self.mr.iova + off as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }
}

/// Where the parts of a message lie in a buffer: (offset, length).
type Parts = Vec<(usize, usize)>;

fn gather(buf: &[u8], parts: &Parts) -> Vec<u8> {
    let mut v = Vec::new();
    for &(o, l) in parts {
        v.extend_from_slice(&buf[o..o + l]);
    }
    v
}

fn scatter(buf: &mut [u8], parts: &Parts, mut data: &[u8]) {
    for &(o, l) in parts {
        let n = l.min(data.len());
        buf[o..o + n].copy_from_slice(&data[..n]);
        data = &data[n..];
    }
}

/// Split `len` into 1..=max_parts positive lengths (none for 0).
fn split(rng: &mut StdRng, len: usize, max_parts: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let k = rng.gen_range(1..=max_parts.min(len));
    let mut cuts: Vec<usize> = (0..k - 1).map(|_| rng.gen_range(1..len)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts {
        out.push(c - prev);
        prev = c;
    }
    out.push(len - prev);
    out
}

/// A bump allocator of disjoint ranges with random gaps.
struct Bump(usize);

impl Bump {
    fn parts(&mut self, rng: &mut StdRng, lens: &[usize]) -> Parts {
        lens.iter()
            .map(|&l| {
                self.0 += rng.gen_range(0..8);
                let o = self.0;
                self.0 += l;
                (o, l)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
struct PlannedWr {
    wr_id: u64,
    kind: Kind,
    op: SendOp,
    len: usize,
    /// Source parts in `src` (SEND/WRITE) or result parts in `sink`.
    local: Parts,
    inline: bool,
    /// Offset in the responder's region (WRITE target, READ source, slot).
    remote_off: usize,
    /// Atomic on the device-wide shared counter.
    shared: bool,
    signaled: bool,
    solicited: bool,
    post_at: u64,
}

/// A planned receive work request.
#[derive(Debug, Clone)]
struct PlannedRecv {
    wr_id: u64,
    parts: Parts,
    post_at: u64,
    /// What it should receive: (opcode, byte_len, imm, data of a SEND).
    expect: (WcOpcode, usize, Option<u32>, Vec<u8>),
}

/// One QP's view: device, number and CQs.
struct Ep {
    dev: usize,
    qpn: u32,
    scq: Arc<CqShared>,
    rcq: Arc<CqShared>,
    sig_all: bool,
}

/// Traffic in one direction of a QP pair.
struct Flow {
    req: usize,
    resp: usize,
    /// Requester: gather source (read-only) and READ/atomic result sink.
    src: Buf,
    sink: Buf,
    /// Responder: receive buffers, WRITE target, READ source, atomic slots.
    recv: Buf,
    wtarget: Buf,
    rsrc: Buf,
    slots: Buf,
    wrs: Vec<PlannedWr>,
    recvs: Vec<PlannedRecv>,
}

const SLOT_FADD: usize = 0;
const SLOT_CAS: usize = 8;

struct Workload {
    net: SimNet,
    eps: Vec<Ep>,
    flows: Vec<Flow>,
    /// Per device: the shared fetch-and-add counter and its initial value.
    shared: Vec<(Buf, u64)>,
    desc: String,
    last_post: u64,
}

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

/// Options of a workload beyond what the seed picks.
#[derive(Clone, Copy)]
struct Shape {
    /// Per-direction byte budget upper bound.
    max_budget: usize,
    /// Most WRs per direction.
    max_wrs: usize,
    /// Fault-free links (latency and jitter only).
    perfect: bool,
    /// One QP pair with traffic one way (device 0 to device 1), instead
    /// of 1-4 pairs with traffic either way or both.
    single_flow: bool,
    /// ACK timeout codes to pick from.
    timeouts: (u8, u8),
    /// Transport retry counts to pick from.
    retry_cnts: (u8, u8),
}

const MAIN_SHAPE: Shape = Shape {
    max_budget: 192 * 1024,
    max_wrs: 32,
    perfect: false,
    single_flow: false,
    timeouts: (10, 14),
    retry_cnts: (7, 7),
};

fn build(seed: u64, shape: Shape) -> Workload {
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

#[allow(clippy::too_many_arguments)]
fn plan_flow(
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

fn send_request(f: &Flow, w: &PlannedWr, shared: &[(Buf, u64)], resp_dev: usize) -> SendRequest {
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
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Send(usize, usize),
    Recv(usize, usize),
}

/// Post every planned request at its time, driving the net in between.
fn post_all(wl: &mut Workload) -> Result<(), String> {
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

fn poll_all(cq: &CqShared) -> Result<Vec<WorkCompletion>, String> {
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
struct Outcome {
    seed: u64,
    done_at: u64,
    stats: SimStats,
    counters: Vec<Counters>,
    qp_counters: Vec<Option<Counters>>,
    completions: Vec<WorkCompletion>,
}

fn expected_counts(wl: &Workload) -> usize {
    let mut n = 0;
    for f in &wl.flows {
        let all = wl.eps[f.req].sig_all;
        n += f.wrs.iter().filter(|w| all || w.signaled).count();
        n += f.recvs.len();
    }
    n
}

fn total_completions(eps: &[Ep]) -> usize {
    eps.iter().map(|e| e.scq.len() + e.rcq.len()).sum()
}

/// Build, run and check the workload of `seed`.
fn run_seed(seed: u64, trace: bool) -> Result<Outcome, String> {
    let mut wl = build(seed, MAIN_SHAPE);
    if trace {
        wl.net.set_trace(true);
    }
    let r = catch_unwind(AssertUnwindSafe(|| run_and_check(&mut wl)))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&*p))));
    if trace {
        for ev in wl.net.take_trace() {
            eprintln!("{ev}");
        }
    }
    r.map_err(|e| {
        let note = if e.contains("RetryExcErr") {
            "\n    note: RETRY_EXC_ERR is legitimate if every one of the retry_cnt + 1 \
             attempts lost the request or its response (see the trace); with 10% loss \
             per link that happens about once in 10^6 stalls (seed 59056 is such a case)"
        } else {
            ""
        };
        format!("{e}\n    workload: {}{note}", wl.desc)
    })
}

fn run_and_check(wl: &mut Workload) -> Result<Outcome, String> {
    post_all(wl)?;
    let want = expected_counts(wl);
    let limit = wl.last_post + COMPLETION_BOUND_NS;
    let eps = &wl.eps;
    let out = wl.net.run_until(|_| total_completions(eps) >= want, limit);
    let done_at = wl.net.now();
    if out != RunOutcome::Satisfied {
        return Err(format!(
            "not complete ({out:?}) at {} ns: {} of {want} completions; {}",
            done_at,
            total_completions(&wl.eps),
            pending_summary(wl)
        ));
    }
    // Everything completed: the network must go quiet and nothing more
    // may complete.
    let quiet = wl.net.run_until(|_| false, done_at + QUIESCE_NS);
    if quiet != RunOutcome::Idle {
        return Err(format!(
            "network not quiet {} ns after completion ({quiet:?}); next event at {:?}; {}",
            QUIESCE_NS,
            wl.net.next_event_time(),
            pending_summary(wl)
        ));
    }
    check(wl, done_at)
}

fn pending_summary(wl: &Workload) -> String {
    let mut s = format!(
        "net at {} ns: {:?}, {} in flight; ",
        wl.net.now(),
        wl.net.stats(),
        wl.net.in_flight()
    );
    for ep in &wl.eps {
        let st = wl.net.engine(ep.dev).query_qp(ep.qpn).map(|a| a.qp_state);
        let c = wl
            .net
            .engine(ep.dev)
            .qp_counters(ep.qpn)
            .unwrap_or_default();
        s.push_str(&format!(
            "[qp {:#x}: {:?} scq={} rcq={} tx={} rx={} retx={} timeouts={} seqnak={}/{} rnr={}/{} dup={} drop={}] ",
            ep.qpn,
            st,
            ep.scq.len(),
            ep.rcq.len(),
            c[Counter::TxPackets],
            c[Counter::RxPackets],
            c[Counter::Retransmits],
            c[Counter::Timeouts],
            c[Counter::SeqNaksSent],
            c[Counter::SeqNaksReceived],
            c[Counter::RnrNaksSent],
            c[Counter::RnrNaksReceived],
            c[Counter::Duplicates],
            c[Counter::Dropped]
        ));
    }
    s
}

fn wc_opcode(k: Kind) -> WcOpcode {
    match k {
        Kind::Send | Kind::SendImm => WcOpcode::Send,
        Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
        Kind::Read => WcOpcode::RdmaRead,
        Kind::CmpSwap => WcOpcode::CompSwap,
        Kind::FetchAdd => WcOpcode::FetchAdd,
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

fn check(wl: &mut Workload, done_at: u64) -> Result<Outcome, String> {
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

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// Random mixed RC workloads over faulty links: everything completes in
/// order, every byte lands, every atomic executes once.
#[test]
fn rc_random_workloads_survive_faults() {
    let trace = env::var_os("URDMA_SIM_TRACE").is_some();
    let outcomes = for_seeds(
        "rc_random_workloads_survive_faults",
        1,
        KNOWN_FAILING,
        |seed, replay| run_seed(seed, trace && replay),
    );
    if let Some(worst) = outcomes.iter().max_by_key(|o| o.done_at) {
        let pkts: u64 = outcomes.iter().map(|o| o.stats.sent).sum();
        let steps = outcomes.iter().map(|o| o.stats.steps).max().unwrap_or(0);
        eprintln!(
            "slowest seed {}: done at {:.3} ms simulated; {} packets over all seeds, at most {} steps in one",
            worst.seed,
            worst.done_at as f64 / 1e6,
            pkts,
            steps
        );
    }
}

/// The same seed gives the same run: counters, completions, timings and
/// the digest of every delivered packet (whether the run passes or not).
#[test]
fn same_seed_same_run() {
    // The workloads of the main test: its known-failing seeds may hang.
    for_seeds("same_seed_same_run", 200, KNOWN_FAILING, |seed, _| {
        let a = run_seed(seed, false);
        let b = run_seed(seed, false);
        if a == b {
            Ok(())
        } else {
            Err(format!("two runs differ:\n  {a:?}\n  {b:?}"))
        }
    });
}

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
fn run_dead_peer(seed: u64, trace: bool) -> Result<u64, String> {
    let mut wl = build(seed, DEAD_SHAPE);
    if trace {
        wl.net.set_trace(true);
    }
    let r = catch_unwind(AssertUnwindSafe(|| dead_peer_check(&mut wl, seed)))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&*p))));
    if trace {
        for ev in wl.net.take_trace() {
            eprintln!("{ev}");
        }
    }
    r.map_err(|e| format!("{e}\n    workload: {}", wl.desc))
}

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
    let t = 4096u64 << attr.timeout;
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

/// A peer that stops answering: every outstanding WR completes, the
/// oldest with RETRY_EXC_ERR and the rest with WR_FLUSH_ERR, within the
/// time the ACK timeout and retry count imply, and the QP is in ERR.
#[test]
fn dead_peer_fails_with_retry_exceeded() {
    let trace = env::var_os("URDMA_SIM_TRACE").is_some();
    let lat = for_seeds(
        "dead_peer_fails_with_retry_exceeded",
        10,
        &[],
        |seed, replay| run_dead_peer(seed, trace && replay),
    );
    if let Some(max) = lat.iter().max() {
        eprintln!(
            "dead peer: slowest failure {:.3} ms after the link died",
            *max as f64 / 1e6
        );
    }
}

/// Seeds that exposed engine bugs now fixed, outside the default range
/// (and a few inside it), run on every test run as regression cases:
/// (seed, what went wrong).
const REGRESSION_SEEDS: &[(u64, &str)] = &[
    (
        2,
        "endless loop in completer::accept_in_order (no progress in settle_before)",
    ),
    (
        115,
        "endless loop in completer::accept_in_order (no progress in settle_before)",
    ),
    (
        32,
        "READ re-request from mid-chunk not aligned to the original request",
    ),
    (
        53,
        "READ re-request from mid-chunk not aligned to the original request",
    ),
    (
        6775,
        "stale send_pkt after the head completed mid-resend: u32 underflow",
    ),
    (
        21862,
        "stale send_pkt after the head completed mid-resend: message sent from its middle",
    ),
    (5463, "stale send_pkt after the head completed mid-resend"),
    (
        4729,
        "ACKs ignored during RNR back-off: RETRY_EXC_ERR from sequence NAKs",
    ),
    (
        17998,
        "ACKs ignored during RNR back-off: RETRY_EXC_ERR from sequence NAKs",
    ),
    (7724, "ACKs ignored during RNR back-off"),
    (8362, "ACKs ignored during RNR back-off"),
    (
        191,
        "go-back-N storm: a rewind per ACK beyond a missing READ response",
    ),
    (
        1161,
        "go-back-N storm: a rewind per ACK beyond a missing READ response",
    ),
    (
        539,
        "retries exhausted by sequence NAKs while a READ response is missing",
    ),
    (14371, "retries exhausted under reordering"),
    (17166, "retries exhausted under reordering"),
    (22870, "retries exhausted under reordering"),
    (26495, "retries exhausted under reordering"),
    (29998, "retries exhausted under reordering"),
    (31021, "retries exhausted under reordering"),
];

/// The workloads of [`REGRESSION_SEEDS`], whatever `URDMA_SIM_SEEDS` says.
#[test]
fn rc_regression_seeds() {
    let test = "rc_regression_seeds";
    let trace = env::var_os("URDMA_SIM_TRACE").is_some();
    let (list, replay) = match env_u64("URDMA_SIM_SEED") {
        Some(s) => (vec![s], true),
        None => (REGRESSION_SEEDS.iter().map(|r| r.0).collect(), false),
    };
    run_seeds(test, &list, replay, 0, |seed, replay| {
        run_seed(seed, trace && replay).map_err(|e| {
            let what = REGRESSION_SEEDS
                .iter()
                .find(|r| r.0 == seed)
                .map_or("", |r| r.1);
            format!("(once: {what}) {e}")
        })
    });
}

//! Seeds and reporting: which seeds run, on all cores and under a hang
//! watchdog; failure reports with their replay lines; the summaries.

use std::collections::BTreeMap;
use std::env;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;
use std::time::Instant;

use urdma_proto::engine::Counter;

use crate::workload::Workload;
use crate::{DEFAULT_SEEDS, HANG_SECS};
/// The value of the variable `name`, decimal or `0x` hexadecimal.
pub(crate) fn env_u64(name: &str) -> Option<u64> {
    let v = env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// The seeds to run and whether this is a single-seed replay. A test
/// runs `1 / share` of `URDMA_SIM_SEEDS` (at least one seed).
fn seeds(share: u64) -> (Vec<u64>, bool) {
    if let Some(s) = env_u64("URDMA_SIM_SEED") {
        return (vec![s], true);
    }
    let n = (env_u64("URDMA_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS) / share.max(1)).max(1);
    let base = env_u64("URDMA_SIM_SEED_BASE").unwrap_or(0);
    ((base..base.saturating_add(n)).collect(), false)
}

/// The command that runs `test` on `seed` alone.
fn replay_cmd(seed: u64, test: &str) -> String {
    format!(
        "URDMA_SIM_SEED={seed} cargo test -p urdma --test sim_rc {test}   \
         (add URDMA_SIM_TRACE=1 -- --nocapture for the packet trace)"
    )
}

/// The message of a panic.
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
pub(crate) fn for_seeds<T: Send>(
    test: &str,
    share: u64,
    f: impl Fn(u64, bool) -> Result<T, String> + Sync,
) -> Vec<T> {
    let (list, replay) = seeds(share);
    run_seeds(test, &list, replay, f)
}

/// Run `f` for each seed of `list` on all cores (see [`for_seeds`]).
pub(crate) fn run_seeds<T: Send>(
    test: &str,
    list: &[u64],
    replay: bool,
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
        "{test}: {} seeds, {} failed, {:.1} s",
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

/// The state of the net and of every QP, for a failure report.
pub(crate) fn pending_summary(wl: &Workload) -> String {
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

/// Run `f` on the workload, a panic counting as a failure; with `trace`,
/// record the packet trace and print it afterwards.
pub(crate) fn run_traced<T>(
    wl: &mut Workload,
    trace: bool,
    f: impl FnOnce(&mut Workload) -> Result<T, String>,
) -> Result<T, String> {
    if trace {
        wl.net.set_trace(true);
    }
    let r = catch_unwind(AssertUnwindSafe(|| f(wl)))
        .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&*p))));
    if trace {
        for ev in wl.net.take_trace() {
            eprintln!("{ev}");
        }
    }
    r
}

//! `urdma check`: a data-integrity workload between two processes.
//!
//! The client drives several RC QPs at once. Each QP runs rounds; a round
//! posts, without waiting in between:
//!
//! - an RDMA WRITE into the server's memory, then an RDMA READ of the same
//!   range back (the READ, ordered after the WRITE, returns what it wrote);
//! - an RDMA WRITE with immediate, which the server checks in its memory
//!   when the immediate's receive completion arrives;
//! - a SEND, which the server checks and sends back (the client checks the
//!   echo);
//! - an RDMA READ of an area the server filled with a known pattern;
//! - a FETCH_ADD on a per-QP counter (each result must be the running sum)
//!   and one on a counter shared by every QP (the results of all QPs must
//!   be exactly 0, 1, ..., N-1);
//! - a CMP_AND_SWP that must succeed and, sometimes, one that must fail.
//!
//! Sizes (single- and multi-packet, around multiples of the path MTU, zero
//! length), offsets (unaligned) and contents all derive from a seed and the
//! QP and round numbers, so both sides know what to expect. At the end
//! both sides check the counters in the server's memory. Every wait is
//! bounded; any mismatch, error completion or timeout makes the command
//! fail.

mod client;
mod client_qp;
mod layout;
mod pattern;
mod proto;
mod qp;
mod report;
mod server;
mod server_qp;

use crate::peer::{path_mtu, LocalServer, PeerArgs, ServerExit};
use anyhow::{bail, Result};
use clap::Args;
use std::time::Duration;

/// Most QPs a client may ask for.
const MAX_QPS: usize = 32;
/// Rounds per QP when neither --seconds nor --iterations is given.
const DEFAULT_ROUNDS: u64 = 100;

/// Arguments of `urdma check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Where the two sides run.
    #[command(flatten)]
    peer: PeerArgs,
    /// Run for this many seconds (each QP finishes its current round).
    #[arg(long, conflicts_with = "iterations")]
    seconds: Option<f64>,
    /// Rounds per QP (default 100).
    #[arg(long)]
    iterations: Option<u64>,
    /// Number of RC QPs, each driven by its own thread.
    #[arg(long, default_value_t = 4)]
    qps: usize,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(long, default_value_t = 1024)]
    mtu: usize,
    /// ACK timeout code of the QPs: 4.096 us * 2^T (0 = wait forever).
    #[arg(long, default_value_t = 14)]
    timeout: u8,
    /// Transport retries before a work request fails with RETRY_EXC_ERR.
    #[arg(long, default_value_t = 7)]
    retry_cnt: u8,
    /// Seed of sizes, offsets and contents (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Server: exit after one client (non-zero if its check failed).
    #[arg(long)]
    once: bool,
}

/// Run `urdma check`.
pub fn run(a: &CheckArgs) -> Result<()> {
    a.peer.start_capture();
    if a.qps == 0 || a.qps > MAX_QPS {
        bail!("--qps must be 1..={MAX_QPS}");
    }
    path_mtu(a.mtu)?;
    if a.timeout > 31 || a.retry_cnt > 7 {
        bail!("--timeout must be 0..=31 and --retry-cnt 0..=7");
    }
    if a.peer.server {
        let l = a.peer.listen("check")?;
        return server::server(l, a);
    }
    match a.peer.host {
        Some(host) => {
            let ctrl = a.peer.dial(host)?;
            client::client(ctrl, a)
        }
        None => run_local(a),
    }
}

/// Server process on 127.0.0.2, client here on 127.0.0.1. The server
/// ends with its client; do not wait for a stuck one.
fn run_local(a: &CheckArgs) -> Result<()> {
    LocalServer::run(
        "check",
        &a.peer,
        &[],
        ServerExit::Grace(Duration::from_secs(10)),
        |server| client::client(server.dial()?, a),
    )
}

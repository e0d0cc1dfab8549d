//! `urdma bench`: bandwidth and latency of RDMA WRITE, READ and SEND, as
//! perftest measures them, beside TCP on the same path.

mod client;
mod plot;
pub(crate) mod proto;
mod report;
mod server;
mod session;
mod stats;
mod tcp;

use crate::peer::{path_mtu, LocalServer, PeerArgs, ServerExit};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use proto::TestKind;
use session::Params;

/// An operation to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Op {
    /// RDMA WRITE
    Write,
    /// RDMA READ
    Read,
    /// SEND
    Send,
}

impl Op {
    fn title(self) -> &'static str {
        match self {
            Op::Write => "RDMA_Write",
            Op::Read => "RDMA_Read",
            Op::Send => "Send",
        }
    }
    fn bw_kind(self) -> TestKind {
        match self {
            Op::Write => TestKind::WriteBw,
            Op::Read => TestKind::ReadBw,
            Op::Send => TestKind::SendBw,
        }
    }
    fn lat_kind(self) -> TestKind {
        match self {
            Op::Write => TestKind::WriteLat,
            Op::Read => TestKind::ReadLat,
            Op::Send => TestKind::SendLat,
        }
    }
}

/// Arguments of `urdma bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Where the two sides run.
    #[command(flatten)]
    peer: PeerArgs,
    /// Operations to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Op::Write, Op::Read, Op::Send])]
    ops: Vec<Op>,
    /// Message sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [2usize, 64, 1024, 4096, 65536, 1048576])]
    sizes: Vec<usize>,
    /// Every power of two from 2 bytes to 8 MiB (as perftest -a).
    #[arg(short = 'a', long)]
    all: bool,
    /// Iterations per test (default: chosen per size).
    #[arg(short = 'n', long)]
    iters: Option<usize>,
    /// Outstanding work requests in bandwidth tests.
    #[arg(long, default_value_t = 64)]
    depth: usize,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(long, default_value_t = 4096)]
    mtu: usize,
    /// Only bandwidth tests.
    #[arg(long, conflicts_with = "lat_only")]
    bw_only: bool,
    /// Only latency tests.
    #[arg(long)]
    lat_only: bool,
    /// Server: exit after one client.
    #[arg(long)]
    once: bool,
    /// Between the two local devices, take the UDP path even though one
    /// NIC serves both (each process then runs a NIC of its own, and
    /// internal loopback is off): the path two hosts take.
    #[arg(long)]
    udp: bool,
    /// Print the results as one JSON document on stdout (the tables go
    /// to stderr).
    #[arg(long)]
    json: bool,
    /// Draw bandwidth and latency against message size, urdma beside
    /// TCP, into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Do not measure TCP beside urdma (for runs on a shared or slow link).
    #[arg(long)]
    no_tcp: bool,
}

fn params(a: &BenchArgs, max_size: usize) -> Result<Params> {
    let mtu = path_mtu(a.mtu)?;
    if a.depth == 0 || a.depth > 4096 {
        bail!("--depth must be 1..=4096");
    }
    Ok(Params {
        udp_port: a.peer.udp_port,
        max_size,
        depth: a.depth,
        mtu,
    })
}

fn sizes(a: &BenchArgs) -> Result<Vec<usize>> {
    let v: Vec<usize> = if a.all {
        (1..=23).map(|i| 1usize << i).collect()
    } else {
        a.sizes.clone()
    };
    if v.is_empty() || v.iter().any(|&s| s == 0 || s > sizes_cap()) {
        bail!("message sizes must be 1 byte to {} bytes", sizes_cap());
    }
    Ok(v)
}

/// Run `urdma bench`.
pub fn run(a: &BenchArgs) -> Result<()> {
    a.peer.start_capture();
    if a.udp {
        // Before any device opens; the local server process inherits them.
        std::env::set_var("URDMA_NIC", "embedded");
        std::env::set_var("URDMA_LOOPBACK", "udp");
        urdma::config::set("nic", "embedded")?;
        urdma::config::set("loopback", "udp")?;
    }
    let sizes = sizes(a)?;
    let p = params(a, *sizes.iter().max().unwrap_or(&1))?;
    if a.peer.server {
        let l = a.peer.listen("bench")?;
        let p = params(a, 1 << 30)?;
        return server::serve(
            l,
            &Params {
                max_size: p.max_size.min(sizes_cap()),
                ..p
            },
            a.once,
        );
    }
    let plan = client::Plan {
        ops: a.ops.clone(),
        sizes,
        iters: a.iters,
        bw: !a.lat_only,
        lat: !a.bw_only,
        json: a.json,
        plot: a.plot.clone(),
        tcp: !a.no_tcp,
    };
    match a.peer.host {
        Some(host) => {
            let (ctrl, data) = proto::name_connections(a.peer.dial(host)?, a.peer.dial(host)?)?;
            client::run(ctrl, data, &p, &plan)
        }
        None => run_local(a, &p, &plan),
    }
}

/// Largest buffer a server registers: the largest size a client may ask for.
fn sizes_cap() -> usize {
    1 << 23
}

/// Server process on 127.0.0.2, client here on 127.0.0.1.
fn run_local(a: &BenchArgs, p: &Params, plan: &client::Plan) -> Result<()> {
    let (mtu, depth) = (a.mtu.to_string(), a.depth.to_string());
    LocalServer::run(
        "bench",
        &a.peer,
        &["--mtu", &mtu, "--depth", &depth],
        ServerExit::KillOnError,
        |server| {
            let (ctrl, data) = proto::name_connections(server.dial()?, server.dial()?)?;
            client::run(ctrl, data, p, plan)
        },
    )
}

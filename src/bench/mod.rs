//! `urdma bench`: bandwidth and latency of RDMA WRITE, READ and SEND, as
//! perftest measures them, beside TCP on the same path.

mod client;
pub(crate) mod proto;
mod server;
mod session;
mod stats;
mod tcp;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use proto::TestKind;
use session::Params;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use urdma::Mtu;

/// Control (TCP) port, as perftest's default.
const DEFAULT_CTRL_PORT: u16 = 18515;

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

/// Where the server and the client of `urdma bench` and `urdma check` run.
#[derive(Args, Debug, Clone)]
pub(crate) struct PeerArgs {
    /// Server to connect to. Without it (and without --server), a server
    /// process on 127.0.0.2 and a client on 127.0.0.1 run on this host.
    pub(crate) host: Option<IpAddr>,
    /// Run the server side.
    #[arg(long)]
    pub(crate) server: bool,
    /// Local address to use (server: listen address; client: source address).
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// TCP port of the control connection.
    #[arg(long, default_value_t = DEFAULT_CTRL_PORT)]
    pub(crate) ctrl_port: u16,
    /// UDP port of the urdma devices.
    #[arg(long, default_value_t = urdma_wire_port())]
    pub(crate) udp_port: u16,
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
}

/// The RoCEv2 UDP port, the default of the devices' `--udp-port`.
pub(crate) const fn urdma_wire_port() -> u16 {
    4791
}

fn params(a: &BenchArgs, max_size: usize) -> Result<Params> {
    let Some(mtu) = Mtu::from_bytes(a.mtu) else {
        bail!("--mtu must be 256, 512, 1024, 2048 or 4096");
    };
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

/// Connect to the server's control port, retrying while it starts.
pub(crate) fn dial(
    server: SocketAddr,
    bind: Option<IpAddr>,
    patience: Duration,
) -> Result<TcpStream> {
    let deadline = Instant::now() + patience;
    loop {
        let r = match bind {
            Some(ip) => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(server),
                    socket2::Type::STREAM,
                    None,
                )?;
                s.bind(&SocketAddr::new(ip, 0).into())?;
                s.connect(&server.into()).map(|_| s.into())
            }
            None => TcpStream::connect(server),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "server not ready yet");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot reach the server at {server}"))
            }
        }
    }
}

/// Run `urdma bench`.
pub fn run(a: &BenchArgs) -> Result<()> {
    let sizes = sizes(a)?;
    let p = params(a, *sizes.iter().max().unwrap_or(&1))?;
    if a.peer.server {
        let ip = a.peer.bind.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let l = TcpListener::bind((ip, a.peer.ctrl_port))
            .with_context(|| format!("cannot listen on {ip}:{}", a.peer.ctrl_port))?;
        eprintln!("urdma bench: server listening on {}", l.local_addr()?);
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
    };
    match a.peer.host {
        Some(host) => {
            let server = SocketAddr::new(host, a.peer.ctrl_port);
            let ctrl = dial(server, a.peer.bind, Duration::from_secs(10))?;
            let data = dial(server, a.peer.bind, Duration::from_secs(10))?;
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
    let server_ip: IpAddr = [127, 0, 0, 2].into();
    let exe = std::env::current_exe()?;
    let mut child: Child = Command::new(exe)
        .args(["bench", "--server", "--once", "--bind", "127.0.0.2"])
        .args([
            "--ctrl-port",
            &a.peer.ctrl_port.to_string(),
            "--udp-port",
            &a.peer.udp_port.to_string(),
        ])
        .args(["--mtu", &a.mtu.to_string(), "--depth", &a.depth.to_string()])
        .spawn()
        .context("cannot start the server process")?;
    let r = (|| {
        let server = SocketAddr::new(server_ip, a.peer.ctrl_port);
        let ctrl = dial(server, Some([127, 0, 0, 1].into()), Duration::from_secs(20))?;
        let data = dial(server, Some([127, 0, 0, 1].into()), Duration::from_secs(20))?;
        client::run(ctrl, data, p, plan)
    })();
    if r.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    r?;
    if !status.success() {
        bail!("server process failed: {status}");
    }
    Ok(())
}

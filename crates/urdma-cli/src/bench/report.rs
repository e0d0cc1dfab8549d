//! What `urdma bench` measured, for machines (`--json`) and for people
//! (the tables, and `--plot` SVG charts).

use super::stats::Latency;
use serde::Serialize;

/// One bandwidth measurement beside TCP's.
#[derive(Debug, Clone, Serialize)]
pub struct BwRow {
    /// Operation (`RDMA_Write`, `RDMA_Read`, `Send`).
    pub op: String,
    /// Message size in bytes.
    pub size: usize,
    /// Messages sent.
    pub iters: usize,
    /// urdma's bandwidth, MiB/s.
    pub mib_s: f64,
    /// urdma's message rate, millions per second.
    pub mpps: f64,
    /// TCP's bandwidth on the same path, MiB/s (None: not measured).
    pub tcp_mib_s: Option<f64>,
    /// urdma / TCP.
    pub ratio: Option<f64>,
}

/// One latency measurement beside TCP's.
#[derive(Debug, Clone, Serialize)]
pub struct LatRow {
    /// Operation.
    pub op: String,
    /// Message size in bytes.
    pub size: usize,
    /// Round trips measured.
    pub iters: usize,
    /// urdma's latency (µs; half round trips for WRITE and SEND, full for READ).
    pub urdma_us: Latency,
    /// TCP's ping-pong half round trip (µs; None: not measured).
    pub tcp_us: Option<Latency>,
    /// TCP's typical latency over urdma's (above 1: urdma is faster).
    pub tcp_over_urdma: Option<f64>,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Client address.
    pub client: String,
    /// Server address.
    pub server: String,
    /// `internal loopback` when the NIC delivered between its own
    /// devices, else `UDP`.
    pub path: String,
    /// Path MTU in bytes.
    pub mtu: usize,
    /// Outstanding work requests in bandwidth tests.
    pub depth: usize,
    /// Processors of this machine.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Bandwidth rows.
    pub bandwidth: Vec<BwRow>,
    /// Latency rows.
    pub latency: Vec<LatRow>,
}

impl Report {
    /// An empty report of a run between `client` and `server`.
    pub fn new(client: String, server: String, mtu: usize, depth: usize) -> Self {
        Report {
            client,
            server,
            path: String::new(),
            mtu,
            depth,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            bandwidth: Vec::new(),
            latency: Vec::new(),
        }
    }
}

/// Name of the path the client's device counters show.
pub fn path_name(loopback_packets: u64) -> &'static str {
    if loopback_packets > 0 {
        "internal loopback"
    } else {
        "UDP"
    }
}

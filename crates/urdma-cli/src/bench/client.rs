//! The active side of `urdma bench`: runs each test and prints the table.

use super::proto::{Channel, Msg, TestKind};
use super::report::{self, BwRow, LatRow, Report};
use super::session::{reap_adaptive, reap_polling, reap_spinning, wait_stamp, Params, Session};
use super::stats::{self, Latency};
use super::{tcp, Op};
use anyhow::{bail, Result};
use std::collections::HashMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use urdma::{Counter, MrSlice, RecvWr, SendWr};

/// What the client measures.
pub struct Plan {
    /// Operations.
    pub ops: Vec<Op>,
    /// Message sizes.
    pub sizes: Vec<usize>,
    /// Fixed iteration count (None: chosen per size).
    pub iters: Option<usize>,
    /// Measure bandwidth.
    pub bw: bool,
    /// Measure latency.
    pub lat: bool,
    /// Print the report as JSON on stdout (the tables go to stderr).
    pub json: bool,
    /// Draw the report into this SVG file.
    pub plot: Option<std::path::PathBuf>,
    /// Measure TCP beside urdma.
    pub tcp: bool,
}

/// TCP bandwidth runs per size, of which the best is reported.
const TCP_BW_RUNS: usize = 3;

/// Messages per bandwidth test: 256 MiB, and at least 1,024 messages, so
/// that the start of a stream (its send window opening) does not weigh on
/// the large sizes' figures; at most 20,000.
fn bw_iters(size: usize) -> usize {
    ((256usize << 20) / size.max(1)).clamp(1024, 20_000)
}

fn lat_iters(size: usize) -> usize {
    if size <= 65536 {
        1000
    } else {
        100
    }
}

struct Client {
    s: Session,
    ch: Channel,
    data: TcpStream,
    depth: usize,
    tcp_bw: HashMap<usize, f64>,
    tcp_lat: HashMap<usize, Latency>,
    step: usize,
    steps: usize,
    json: bool,
    report: Report,
}

/// Run the plan against the server behind `ctrl` and `data`.
pub fn run(ctrl: TcpStream, data: TcpStream, p: &Params, plan: &Plan) -> Result<()> {
    let ip = ctrl.local_addr()?.ip();
    let mut ch = Channel::new(ctrl)?;
    data.set_nodelay(true)?;
    let s = Session::connect(ip, p, &mut ch, true)?;
    // The path MTU the QP runs at: the smallest of --mtu and both ports'
    // (a 1500-byte link gives 1024 whatever --mtu asks).
    let mtu = s.qp.query()?.path_mtu;
    let report = Report::new(
        s.dev.local_addr().ip().to_string(),
        s.peer_ip(),
        mtu.bytes(),
        p.depth,
    );
    let per_op = usize::from(plan.bw) + usize::from(plan.lat);
    let mut c = Client {
        s,
        ch,
        data,
        depth: p.depth,
        tcp_bw: HashMap::new(),
        tcp_lat: HashMap::new(),
        step: 0,
        steps: plan.ops.len() * per_op * plan.sizes.len(),
        json: plan.json,
        report,
    };
    let asked = if mtu == p.mtu {
        String::new()
    } else {
        format!(" (--mtu {})", p.mtu.bytes())
    };
    c.say(&format!(
        "urdma bench: {} -> {} (UDP port {}), RC, path MTU {}{asked}, {} outstanding WRs",
        c.report.client,
        c.report.server,
        p.udp_port,
        mtu.bytes(),
        p.depth
    ));
    if plan.bw {
        for &op in &plan.ops {
            c.say(&stats::header(&format!("{} BW Test", op.title()), true));
            for &size in &plan.sizes {
                let iters = plan.iters.unwrap_or_else(|| bw_iters(size));
                c.progress(op, "bandwidth", size);
                let t = c.measure(op.bw_kind(), size, iters)?;
                let (mib, mpps) = stats::bandwidth(size, iters, t);
                let tcp = match plan.tcp {
                    true => Some(c.tcp_bandwidth(size, iters)?),
                    false => None,
                };
                c.say(&stats::bw_row(size, iters, mib, mpps, tcp));
                c.report.bandwidth.push(BwRow {
                    op: op.title().into(),
                    size,
                    iters,
                    mib_s: mib,
                    mpps,
                    tcp_mib_s: tcp,
                    ratio: tcp.map(|t| mib / t.max(f64::MIN_POSITIVE)),
                });
            }
        }
    }
    if plan.lat {
        for &op in &plan.ops {
            c.say(&stats::header(
                &format!("{} Latency Test", op.title()),
                false,
            ));
            for &size in &plan.sizes {
                let iters = plan.iters.unwrap_or_else(|| lat_iters(size));
                c.progress(op, "latency", size);
                let l = c.latency(op.lat_kind(), size, iters)?;
                let tcp = match plan.tcp {
                    true => Some(c.tcp_latency(size, iters)?),
                    false => None,
                };
                c.say(&stats::lat_row(size, iters, &l, tcp.as_ref()));
                c.report.latency.push(LatRow {
                    op: op.title().into(),
                    size,
                    iters,
                    urdma_us: l,
                    tcp_us: tcp,
                    tcp_over_urdma: tcp.map(|t| t.median / l.median.max(f64::MIN_POSITIVE)),
                });
            }
        }
    }
    c.say(&"-".repeat(96));
    c.say("Latencies of WRITE and SEND are half round trips, as perftest reports them; READ latency is a full round trip.");
    let k = c.s.dev.counters();
    c.report.path = report::path_name(k[Counter::Loopback]).into();
    c.say(&format!(
        "path: {}; client device: {} packets sent, {} received, {} retransmitted, {} timeouts, {} dropped",
        c.report.path,
        k[Counter::TxPackets],
        k[Counter::RxPackets],
        k[Counter::Retransmits],
        k[Counter::Timeouts],
        k[Counter::Dropped]
    ));
    if plan.json {
        println!("{}", serde_json::to_string_pretty(&c.report)?);
    }
    if let Some(f) = &plan.plot {
        std::fs::write(f, super::plot::svg(&c.report))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", f.display()))?;
        c.say(&format!("plot: {}", f.display()));
    }
    c.ch.send(&Msg::Bye)?;
    Ok(())
}

impl Session {
    fn peer_ip(&self) -> String {
        self.qp
            .query()
            .map(|a| a.ah_attr.dgid.to_ip().to_string())
            .unwrap_or_default()
    }
}

impl Client {
    /// Print a line of the tables (on stderr when stdout carries JSON).
    fn say(&self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    fn progress(&mut self, op: Op, what: &str, size: usize) {
        self.step += 1;
        eprintln!(
            "[{}/{}] {} {what}, {size} bytes",
            self.step,
            self.steps,
            op.title()
        );
    }

    /// Run one test with the server's cooperation; returns what `f` returns.
    fn with_server<T>(
        &mut self,
        kind: TestKind,
        size: usize,
        iters: usize,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        self.ch.send(&Msg::Start { kind, size, iters })?;
        self.ch.expect_ready()?;
        let r = f(self);
        self.ch.send(&Msg::Finish)?;
        match self.ch.recv()? {
            Msg::Done { error: None } => r,
            Msg::Done { error: Some(e) } => bail!("server side of {kind:?} {size} B failed: {e}"),
            m => bail!("expected Done, got {m:?}"),
        }
    }

    fn measure(&mut self, kind: TestKind, size: usize, iters: usize) -> Result<Duration> {
        self.with_server(kind, size, iters, |c| c.bandwidth(kind, size, iters))
    }

    fn bandwidth(&mut self, kind: TestKind, size: usize, iters: usize) -> Result<Duration> {
        let s = &self.s;
        let local: MrSlice = s.mr.slice(s.half, size)?;
        let wr = |i: usize| match kind {
            TestKind::WriteBw => SendWr::write(
                i as u64,
                std::slice::from_ref(&local),
                s.peer.addr,
                s.peer.rkey,
            ),
            TestKind::ReadBw => SendWr::read(
                i as u64,
                std::slice::from_ref(&local),
                s.peer.addr,
                s.peer.rkey,
            ),
            _ => SendWr::send(i as u64, std::slice::from_ref(&local)),
        };
        // Completion moderation, as perftest does: only every
        // `signal_every`-th WR (and the last) is signaled; completions come
        // in order, so a completion of WR i means WRs 0..=i are done.
        let signal_every = (self.depth / 4).max(1);
        let t = Instant::now();
        let (mut posted, mut done) = (0, 0);
        while done < iters {
            while posted < iters && posted - done < self.depth {
                let signaled = (posted + 1) % signal_every == 0 || posted + 1 == iters;
                let w = wr(posted);
                s.qp.post_send(if signaled { w } else { w.unsignaled() })?;
                posted += 1;
            }
            // WRITEs and READs leave the server idle: the client polls its
            // CQ, as perftest does. A SEND's server takes each message
            // from its receive queue; on a machine of two CPUs a client
            // that only spins would starve it of the CPU it needs to post
            // more receives (RNR NAKs), so the client sleeps on its CQ
            // once a short poll found nothing.
            let wcs = match kind {
                TestKind::SendBw => reap_adaptive(&s.scq, self.depth)?,
                _ => reap_spinning(&s.scq, self.depth)?,
            };
            for wc in wcs {
                done = done.max(wc.wr_id as usize + 1);
            }
        }
        Ok(t.elapsed())
    }

    fn latency(&mut self, kind: TestKind, size: usize, iters: usize) -> Result<Latency> {
        let samples = self.with_server(kind, size, iters, |c| {
            let s = &c.s;
            let src = s.mr.slice(s.half, size)?;
            let dst = s.mr.slice(0, size)?;
            let last = size.max(1) - 1;
            let mut v = Vec::with_capacity(iters);
            if kind == TestKind::SendLat {
                s.qp.post_recv(RecvWr::new(0, std::slice::from_ref(&dst)))?;
            }
            for i in 0..iters {
                let t = Instant::now();
                match kind {
                    TestKind::WriteLat => {
                        let stamp = (i % 255 + 1) as u8;
                        s.write_stamped(&src, last, stamp, i as u64)?;
                        wait_stamp(&s.mr, last, stamp)?;
                        v.push(t.elapsed() / 2);
                    }
                    TestKind::ReadLat => {
                        s.qp.post_send(SendWr::read(
                            i as u64,
                            std::slice::from_ref(&dst),
                            s.peer.addr,
                            s.peer.rkey,
                        ))?;
                        reap_polling(&s.scq)?;
                        v.push(t.elapsed());
                    }
                    _ => {
                        s.qp.post_send(SendWr::send(i as u64, std::slice::from_ref(&src)))?;
                        reap_polling(&s.rcq)?;
                        v.push(t.elapsed() / 2);
                        reap_polling(&s.scq)?;
                        if i + 1 < iters {
                            s.qp.post_recv(RecvWr::new(i as u64 + 1, std::slice::from_ref(&dst)))?;
                        }
                    }
                }
            }
            Ok(v)
        })?;
        Latency::from_samples(samples).ok_or_else(|| anyhow::anyhow!("no samples"))
    }

    fn tcp_bandwidth(&mut self, size: usize, iters: usize) -> Result<f64> {
        if let Some(&v) = self.tcp_bw.get(&size) {
            return Ok(v);
        }
        // The best of a few runs: the anchor is not let down by one
        // unlucky run.
        let mut v: f64 = 0.0;
        for _ in 0..TCP_BW_RUNS {
            let t = self.with_server(TestKind::TcpBw, size, iters, |c| {
                tcp::stream(&mut c.data, size, iters)
            })?;
            v = v.max(stats::bandwidth(size, iters, t).0);
        }
        self.tcp_bw.insert(size, v);
        Ok(v)
    }

    fn tcp_latency(&mut self, size: usize, iters: usize) -> Result<Latency> {
        if let Some(&v) = self.tcp_lat.get(&size) {
            return Ok(v);
        }
        let v = self.with_server(TestKind::TcpLat, size, iters, |c| {
            tcp::ping(&mut c.data, size, iters)
        })?;
        let l = Latency::from_samples(v).ok_or_else(|| anyhow::anyhow!("no samples"))?;
        self.tcp_lat.insert(size, l);
        Ok(l)
    }
}

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

use crate::bench::proto::Channel;
use crate::bench::{dial, PeerArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use urdma::api::RemoteBuf;
use urdma::Counter;
use urdma::{
    AccessFlags, ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Mr, Mtu, Qp, QpCap,
    QpInitAttr, QpType, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

/// Largest message of the workload.
const MAX_MSG: usize = 128 * 1024 + 5;
/// Offsets inside a slot are below this (unaligned on purpose).
const SKEW: usize = 64;
/// One buffer slot: a message at any offset below `SKEW`, rounded to 64.
const SLOT: usize = (MAX_MSG + SKEW).div_ceil(64) * 64;
/// Receive buffers the server keeps per QP.
const RECV_SLOTS: usize = 4;
/// Most QPs a client may ask for.
const MAX_QPS: usize = 32;
/// Rounds per QP when neither --seconds nor --iterations is given.
const DEFAULT_ROUNDS: u64 = 100;
/// Mismatch descriptions kept (the rest are only counted).
const MAX_NOTES: usize = 10;

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

/// Control messages of `urdma check`.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Msg {
    /// Client: the run's parameters, its QPs and its buffer.
    Hello {
        seed: u64,
        mtu: usize,
        timeout: u8,
        retry_cnt: u8,
        endpoints: Vec<Endpoint>,
        buf: RemoteBuf,
    },
    /// Server: its QPs (connected to the client's) and its buffer.
    Welcome {
        endpoints: Vec<Endpoint>,
        buf: RemoteBuf,
    },
    /// Server: the session cannot start.
    Refused { error: String },
    /// Client: rounds completed per QP; `aborted` if the client failed.
    Finish { rounds: Vec<u64>, aborted: bool },
    /// Server: what it verified.
    Done { tally: Tally, error: Option<String> },
}

// ---------------------------------------------------------------------
// Deterministic sizes, offsets and contents.

use urdma::rng::{mix, SplitMix64};

/// The generator of round `round` of QP `q` in a run seeded with `seed`.
fn round_rng(seed: u64, q: u64, round: u64) -> SplitMix64 {
    SplitMix64::new(mix(seed ^ mix(q ^ mix(round))))
}

/// What a byte stream carries: one per message, plus the READ areas.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Write = 1,
    WriteImm = 2,
    Send = 3,
    ReadArea = 4,
}

fn tag(seed: u64, q: usize, round: u64, s: Stream) -> u64 {
    mix(seed ^ mix(((q as u64) << 56) ^ (round << 4) ^ s as u64))
}

/// Bytes `start..start + out.len()` of the stream `tag`.
fn pattern(tag: u64, start: usize, out: &mut [u8]) {
    let (mut pos, mut i) = (start, 0);
    while i < out.len() {
        let block = mix(tag ^ ((pos / 8) as u64).wrapping_mul(0xd6e8_feb8_6659_fd93));
        let from = pos % 8;
        let n = (8 - from).min(out.len() - i);
        out[i..i + n].copy_from_slice(&block.to_le_bytes()[from..from + n]);
        i += n;
        pos += n;
    }
}

fn pattern_vec(tag: u64, start: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    pattern(tag, start, &mut v);
    v
}

/// A message: length, offset in the local slot, offset in the remote slot.
#[derive(Debug, Clone, Copy)]
struct Xfer {
    len: usize,
    local: usize,
    remote: usize,
}

/// Everything one round of one QP does.
#[derive(Debug, Clone, Copy)]
struct Round {
    write: Xfer,
    write_imm: Xfer,
    send: Xfer,
    read: Xfer,
    add: u64,
    cas_fail: bool,
    cas_next: u64,
}

/// A message length: tiny, single packet, around a multiple of the MTU,
/// large, or (rarely, where allowed) zero.
fn pick_len(g: &mut SplitMix64, mtu: usize, zero: bool) -> usize {
    match g.below(32) {
        0 if zero => 0,
        0..=7 => 1 + g.below(64),
        8..=15 => 65 + g.below(mtu - 65),
        16..=23 => (1 + g.below(4)) * mtu + g.below(3) - 1,
        _ => {
            let lo = 4 * mtu + 2;
            lo + g.below(MAX_MSG - lo + 1)
        }
    }
}

fn xfer(g: &mut SplitMix64, mtu: usize, zero: bool) -> Xfer {
    Xfer {
        len: pick_len(g, mtu, zero),
        local: g.below(SKEW),
        remote: g.below(SKEW),
    }
}

fn plan(seed: u64, mtu: usize, q: usize, round: u64) -> Round {
    let mut g = round_rng(seed, q as u64, round);
    Round {
        write: xfer(&mut g, mtu, true),
        write_imm: xfer(&mut g, mtu, true),
        send: xfer(&mut g, mtu, true),
        read: xfer(&mut g, mtu, false),
        add: 1 + g.below(1_000_000) as u64,
        cas_fail: g.below(4) == 0,
        cas_next: g.next_u64() | 1,
    }
}

// ---------------------------------------------------------------------
// Memory layout. Server: the shared counter, then per QP the per-QP
// counter and CAS word, the two WRITE targets, the READ area and the
// receive buffers. Client: per QP the atomic results, the three sources
// and the three destinations.

const S_HEAD: usize = 64;
const S_QP: usize = 64 + (3 + RECV_SLOTS) * SLOT;
const C_QP: usize = 64 + 6 * SLOT;
/// Offset of a receive inside its slot (unaligned).
const RECV_SKEW: usize = 3;

fn server_len(qps: usize) -> usize {
    S_HEAD + qps * S_QP
}
fn s_base(q: usize) -> usize {
    S_HEAD + q * S_QP
}
fn s_counter(q: usize) -> usize {
    s_base(q)
}
fn s_cas(q: usize) -> usize {
    s_base(q) + 8
}
fn s_write(q: usize) -> usize {
    s_base(q) + 64
}
fn s_write_imm(q: usize) -> usize {
    s_write(q) + SLOT
}
fn s_read(q: usize) -> usize {
    s_write(q) + 2 * SLOT
}
fn s_recv(q: usize, i: usize) -> usize {
    s_write(q) + (3 + i) * SLOT + RECV_SKEW
}

fn client_len(qps: usize) -> usize {
    qps * C_QP
}
fn c_base(q: usize) -> usize {
    q * C_QP
}
/// Result word `k` of QP `q` (8 bytes each, 64 bytes in all).
fn c_word(q: usize, k: usize) -> usize {
    c_base(q) + 8 * k
}
fn c_slot(q: usize, k: usize) -> usize {
    c_base(q) + 64 + k * SLOT
}

// ---------------------------------------------------------------------
// Work request ids: round << 8 | kind.

const K_WRITE: u64 = 0;
const K_READ_BACK: u64 = 1;
const K_WRITE_IMM: u64 = 2;
const K_SEND: u64 = 3;
const K_READ: u64 = 4;
const K_ADD: u64 = 5;
const K_SHARED_ADD: u64 = 6;
const K_CAS_FAIL: u64 = 7;
const K_CAS: u64 = 8;
const K_ECHO: u64 = 9;
const K_FINAL: u64 = 10;
const K_PROBE: u64 = 11;

fn kind_name(k: u64) -> &'static str {
    match k {
        K_WRITE => "RDMA WRITE",
        K_READ_BACK => "RDMA READ (of the WRITE)",
        K_WRITE_IMM => "RDMA WRITE with immediate",
        K_SEND => "SEND",
        K_READ => "RDMA READ",
        K_ADD => "FETCH_ADD",
        K_SHARED_ADD => "FETCH_ADD (shared counter)",
        K_CAS_FAIL => "CMP_AND_SWP (failing)",
        K_CAS => "CMP_AND_SWP",
        K_ECHO => "RECV (echo)",
        K_FINAL => "RDMA READ (final counters)",
        K_PROBE => "RDMA READ (keep-alive)",
        _ => "work request",
    }
}

/// `ibv_wc_status_str`-style name of a completion status.
fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "IBV_WC_SUCCESS",
        WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
        WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
        WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
        WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
        WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
        WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
        WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
        WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
        WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
        WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
    }
}

// ---------------------------------------------------------------------
// Tallies and bounds.

/// What one side verified.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Tally {
    /// Work requests completed successfully.
    ops: u64,
    /// Bytes compared with what was expected.
    bytes: u64,
    /// Mismatches found.
    errors: u64,
    /// Descriptions of the first mismatches.
    notes: Vec<String>,
}

impl Tally {
    fn mismatch(&mut self, what: String) {
        self.errors += 1;
        if self.notes.len() < MAX_NOTES {
            self.notes.push(what);
        }
    }

    fn add(&mut self, o: Tally) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        for n in o.notes {
            if self.notes.len() < MAX_NOTES {
                self.notes.push(n);
            }
        }
    }

    /// Compare `len` bytes at `off` of `mr` with bytes `start..` of stream `tag`.
    fn verify(&mut self, mr: &Mr, off: usize, len: usize, tag: u64, start: usize, what: &str) {
        let mut got = vec![0; len];
        if let Err(e) = mr.read_at(off, &mut got) {
            self.mismatch(format!("{what}: cannot read the buffer: {e}"));
            return;
        }
        self.compare(&got, tag, start, what);
    }

    /// Compare `got` with bytes `start..` of stream `tag`.
    fn compare(&mut self, got: &[u8], tag: u64, start: usize, what: &str) {
        let len = got.len();
        let want = pattern_vec(tag, start, len);
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => self.bytes += len as u64,
            Some(i) => {
                let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                self.mismatch(format!(
                    "{what}: {bad} of {len} bytes differ, the first at byte {i} \
                     (got {:#04x}, expected {:#04x})",
                    got[i], want[i]
                ));
            }
        }
    }

    /// Compare a 64-bit value.
    fn expect_u64(&mut self, got: u64, want: u64, what: &str) {
        if got == want {
            self.bytes += 8;
        } else {
            self.mismatch(format!("{what}: got {got:#x}, expected {want:#x}"));
        }
    }
}

/// The ACK timeout a QP with timeout code `t` uses.
fn ack_timeout(t: u8) -> Duration {
    match t {
        0 => Duration::ZERO,
        t => Duration::from_nanos(4096u64 << t.min(31)),
    }
}

/// Longest wait for a completion: far beyond what retransmissions need
/// (the QP fails on its own long before), at least 30 s.
fn backstop(timeout: u8, retry_cnt: u8) -> Duration {
    let retries = ack_timeout(timeout) * (u32::from(retry_cnt) + 1);
    (retries * 4).max(Duration::from_secs(30))
}

fn read_u64(mr: &Mr, off: usize) -> Result<u64> {
    let mut b = [0u8; 8];
    mr.read_at(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

fn connect_options(mtu: Mtu, timeout: u8, retry_cnt: u8) -> ConnectOptions {
    ConnectOptions {
        mtu,
        timeout,
        retry_cnt,
        rnr_retry: 7,
        ..ConnectOptions::default()
    }
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A QP with its own CQ (sends and receives).
struct End {
    qp: Qp,
    cq: Cq,
}

/// Open the device and create `qps` QPs, each with its CQ.
fn open(
    name: &str,
    ip: IpAddr,
    port: u16,
    qps: usize,
    mem: usize,
) -> Result<(Device, Mr, Vec<End>)> {
    let dev = Device::open(DeviceConfig {
        name: name.into(),
        addr: ip,
        port,
    })
    .with_context(|| format!("cannot open a device on {ip}:{port}"))?;
    let pd = dev.alloc_pd()?;
    let mr = pd.reg_mr(mem, access())?;
    let mut ends = Vec::with_capacity(qps);
    for _ in 0..qps {
        let cq = dev.create_cq(64)?;
        let qp = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })?;
        ends.push(End { qp, cq });
    }
    Ok((dev, mr, ends))
}

/// The error of a failed completion, preferring a root cause over the
/// flush errors that follow it.
fn failed(end: &End, q: usize, wc: &WorkCompletion, idle: Duration) -> anyhow::Error {
    let mut wc = *wc;
    if wc.status == WcStatus::WrFlushErr {
        if let Ok(more) = end.cq.poll(64) {
            if let Some(w) = more
                .iter()
                .find(|w| !matches!(w.status, WcStatus::Success | WcStatus::WrFlushErr))
            {
                wc = *w;
            }
        }
    }
    anyhow!(
        "QP {q} (qpn {:#x}), round {}: {} completed with {} (vendor_err {:#x}) \
         {:.1} ms after the last completion",
        end.qp.qpn(),
        wc.wr_id >> 8,
        kind_name(wc.wr_id & 0xff),
        status_name(wc.status),
        wc.vendor_err,
        idle.as_secs_f64() * 1e3
    )
}

/// A keep-alive for a QP whose only pending work is a receive: a receive
/// never times out, so a peer that died after acknowledging everything
/// would go unnoticed. After `after` without completions, an 8-byte RDMA
/// READ from `addr` into `dst` goes out; a dead peer fails it with
/// RETRY_EXC_ERR.
struct Probe {
    dst: urdma::MrSlice,
    addr: u64,
    rkey: u32,
    after: Duration,
}

/// Wait for the completions of the kinds in the bit set `pending` (of
/// round `round`), at most `limit`; returns them indexed by kind.
fn complete(
    end: &End,
    q: usize,
    round: u64,
    mut pending: u32,
    limit: Duration,
    last: &mut Instant,
    probe: Option<&Probe>,
) -> Result<[Option<WorkCompletion>; 16]> {
    let start = Instant::now();
    let mut got = [None; 16];
    while pending != 0 {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            let names: Vec<&str> = (0..16)
                .filter(|k| pending & (1 << k) != 0)
                .map(kind_name)
                .collect();
            bail!(
                "QP {q} (qpn {:#x}), round {round}: not complete within {limit:?}; \
                 waiting for {}",
                end.qp.qpn(),
                names.join(", ")
            );
        }
        let mut wait = left;
        if let Some(p) = probe.filter(|_| pending == 1 << K_ECHO) {
            let idle = last.elapsed();
            if idle >= p.after {
                end.qp.post_send(SendWr::read(
                    round << 8 | K_PROBE,
                    std::slice::from_ref(&p.dst),
                    p.addr,
                    p.rkey,
                ))?;
                pending |= 1 << K_PROBE;
                continue;
            }
            wait = wait.min(p.after - idle);
        }
        let wcs = match end.cq.wait(16, Some(wait)) {
            Ok(v) => v,
            Err(urdma::Error::Timeout) => continue,
            Err(e) => return Err(e).context("waiting for completions"),
        };
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(failed(end, q, &wc, last.elapsed()));
            }
            *last = Instant::now();
            let k = wc.wr_id & 0xff;
            if wc.wr_id >> 8 != round || k >= 16 || pending & (1 << k) == 0 {
                bail!(
                    "QP {q}, round {round}: unexpected completion {:?} (wr_id {:#x})",
                    wc.opcode,
                    wc.wr_id
                );
            }
            pending &= !(1 << k);
            got[k as usize] = Some(wc);
        }
    }
    Ok(got)
}

// ---------------------------------------------------------------------
// Client.

/// When the client stops starting rounds.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Rounds(u64),
    At(Instant),
}

/// The client's shared state.
struct Client<'a> {
    mr: &'a Mr,
    peer: RemoteBuf,
    seed: u64,
    mtu: usize,
    stop: Stop,
    abort: &'a AtomicBool,
    limit: Duration,
    probe_after: Duration,
}

/// What one client QP did.
struct ClientQp {
    rounds: u64,
    tally: Tally,
    shared: Vec<u64>,
}

impl Client<'_> {
    fn more(&self, done: u64) -> bool {
        !self.abort.load(Ordering::Relaxed)
            && match self.stop {
                Stop::Rounds(n) => done < n,
                Stop::At(t) => Instant::now() < t,
            }
    }

    fn slice(&self, off: usize, len: usize) -> Result<urdma::MrSlice> {
        Ok(self.mr.slice(off, len)?)
    }

    /// Run rounds on QP `q` until told to stop.
    fn run_qp(&self, q: usize, end: &End) -> (ClientQp, Result<()>) {
        let mut out = ClientQp {
            rounds: 0,
            tally: Tally::default(),
            shared: Vec::new(),
        };
        let r = self.rounds(q, end, &mut out);
        if r.is_err() {
            self.abort.store(true, Ordering::Relaxed);
        }
        (out, r)
    }

    fn rounds(&self, q: usize, end: &End, out: &mut ClientQp) -> Result<()> {
        let (mut sum, mut cas) = (0u64, 0u64);
        let mut last = Instant::now();
        while self.more(out.rounds) {
            self.round(q, end, out, &mut sum, &mut cas, &mut last)?;
            out.rounds += 1;
        }
        // The per-QP words as the server's memory holds them now.
        let r = out.rounds;
        let p = self.peer.addr + s_base(q) as u64;
        end.qp.post_send(SendWr::read(
            r << 8 | K_FINAL,
            &[self.slice(c_word(q, 6), 16)?],
            p,
            self.peer.rkey,
        ))?;
        complete(end, q, r, 1 << K_FINAL, self.limit, &mut last, None)?;
        out.tally.ops += 1;
        let t = &mut out.tally;
        t.expect_u64(
            read_u64(self.mr, c_word(q, 6))?,
            sum,
            &format!("QP {q}: final per-QP counter"),
        );
        t.expect_u64(
            read_u64(self.mr, c_word(q, 7))?,
            cas,
            &format!("QP {q}: final CMP_AND_SWP word"),
        );
        Ok(())
    }

    fn round(
        &self,
        q: usize,
        end: &End,
        out: &mut ClientQp,
        sum: &mut u64,
        cas: &mut u64,
        last: &mut Instant,
    ) -> Result<()> {
        let r = out.rounds;
        let p = plan(self.seed, self.mtu, q, r);
        let (w_tag, wi_tag, s_tag) = (
            tag(self.seed, q, r, Stream::Write),
            tag(self.seed, q, r, Stream::WriteImm),
            tag(self.seed, q, r, Stream::Send),
        );
        let src_w = c_slot(q, 0) + p.write.local;
        let src_wi = c_slot(q, 1) + p.write_imm.local;
        let src_s = c_slot(q, 2) + p.send.local;
        let dst_back = c_slot(q, 3) + p.write.remote;
        let dst_read = c_slot(q, 4) + p.read.local;
        let dst_echo = c_slot(q, 5) + RECV_SKEW;
        self.mr
            .write_at(src_w, &pattern_vec(w_tag, 0, p.write.len))?;
        self.mr
            .write_at(src_wi, &pattern_vec(wi_tag, 0, p.write_imm.len))?;
        self.mr
            .write_at(src_s, &pattern_vec(s_tag, 0, p.send.len))?;
        let (addr, rkey) = (self.peer.addr, self.peer.rkey);
        let id = |k: u64| r << 8 | k;
        let qp = &end.qp;
        qp.post_recv(RecvWr::new(id(K_ECHO), &[self.slice(dst_echo, MAX_MSG)?]))?;
        let remote_w = addr + (s_write(q) + p.write.remote) as u64;
        qp.post_send(SendWr::write(
            id(K_WRITE),
            &[self.slice(src_w, p.write.len)?],
            remote_w,
            rkey,
        ))?;
        qp.post_send(SendWr::read(
            id(K_READ_BACK),
            &[self.slice(dst_back, p.write.len)?],
            remote_w,
            rkey,
        ))?;
        qp.post_send(SendWr::write_imm(
            id(K_WRITE_IMM),
            &[self.slice(src_wi, p.write_imm.len)?],
            addr + (s_write_imm(q) + p.write_imm.remote) as u64,
            rkey,
            r as u32,
        ))?;
        qp.post_send(SendWr::send(id(K_SEND), &[self.slice(src_s, p.send.len)?]))?;
        qp.post_send(SendWr::read(
            id(K_READ),
            &[self.slice(dst_read, p.read.len)?],
            addr + (s_read(q) + p.read.remote) as u64,
            rkey,
        ))?;
        qp.post_send(SendWr::fetch_add(
            id(K_ADD),
            &self.slice(c_word(q, 0), 8)?,
            addr + s_counter(q) as u64,
            rkey,
            p.add,
        ))?;
        qp.post_send(SendWr::fetch_add(
            id(K_SHARED_ADD),
            &self.slice(c_word(q, 1), 8)?,
            addr,
            rkey,
            1,
        ))?;
        let mut pending = (1u32 << K_ECHO) | ((1 << K_CAS_FAIL) - 1) | (1 << K_CAS);
        if p.cas_fail {
            qp.post_send(SendWr::compare_swap(
                id(K_CAS_FAIL),
                &self.slice(c_word(q, 2), 8)?,
                addr + s_cas(q) as u64,
                rkey,
                !*cas,
                mix(*cas),
            ))?;
            pending |= 1 << K_CAS_FAIL;
        }
        qp.post_send(SendWr::compare_swap(
            id(K_CAS),
            &self.slice(c_word(q, 3), 8)?,
            addr + s_cas(q) as u64,
            rkey,
            *cas,
            p.cas_next,
        ))?;
        let probe = Probe {
            dst: self.slice(c_word(q, 4), 8)?,
            addr: addr + s_counter(q) as u64,
            rkey,
            after: self.probe_after,
        };
        let wcs = complete(end, q, r, pending, self.limit, last, Some(&probe))?;
        let t = &mut out.tally;
        t.ops += u64::from(pending.count_ones()) - 1;
        let what = |k: u64| format!("QP {q} round {r} {}", kind_name(k));
        // READ and echo lengths.
        for (k, len) in [
            (K_READ_BACK, p.write.len),
            (K_READ, p.read.len),
            (K_ECHO, p.send.len),
        ] {
            let wc = wcs[k as usize].as_ref();
            if let Some(wc) = wc.filter(|w| w.byte_len as usize != len) {
                t.mismatch(format!(
                    "{}: byte_len {}, expected {len}",
                    what(k),
                    wc.byte_len
                ));
            }
        }
        if let Some(wc) = wcs[K_ECHO as usize].filter(|w| w.opcode != WcOpcode::Recv) {
            t.mismatch(format!("{}: opcode {:?}", what(K_ECHO), wc.opcode));
        }
        t.verify(self.mr, dst_back, p.write.len, w_tag, 0, &what(K_READ_BACK));
        let area = tag(self.seed, q, u64::MAX >> 8, Stream::ReadArea);
        t.verify(
            self.mr,
            dst_read,
            p.read.len,
            area,
            p.read.remote,
            &what(K_READ),
        );
        t.verify(
            self.mr,
            dst_echo,
            p.send.len.min(MAX_MSG),
            s_tag,
            0,
            &what(K_ECHO),
        );
        t.expect_u64(read_u64(self.mr, c_word(q, 0))?, *sum, &what(K_ADD));
        *sum = sum.wrapping_add(p.add);
        out.shared.push(read_u64(self.mr, c_word(q, 1))?);
        if p.cas_fail {
            t.expect_u64(read_u64(self.mr, c_word(q, 2))?, *cas, &what(K_CAS_FAIL));
        }
        t.expect_u64(read_u64(self.mr, c_word(q, 3))?, *cas, &what(K_CAS));
        *cas = p.cas_next;
        Ok(())
    }
}

/// The client: connect, run the workload, check, print the summary.
fn client(ctrl: TcpStream, a: &CheckArgs) -> Result<()> {
    let Some(mtu) = Mtu::from_bytes(a.mtu) else {
        bail!("--mtu must be 256, 512, 1024, 2048 or 4096");
    };
    let seed = a.seed.unwrap_or_else(rand_seed);
    let limit = backstop(a.timeout, a.retry_cnt);
    ctrl.set_read_timeout(Some(limit))?;
    let ip = ctrl.local_addr()?.ip();
    let server_ip = ctrl.peer_addr()?.ip();
    let mut ch = Channel::new(ctrl)?;
    let (dev, mr, ends) = open("urdma0", ip, a.peer.udp_port, a.qps, client_len(a.qps))?;
    ch.send_as(&Msg::Hello {
        seed,
        mtu: a.mtu,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        endpoints: ends.iter().map(|e| e.qp.endpoint()).collect(),
        buf: mr.remote(),
    })?;
    let (endpoints, peer) = match ch.recv_as::<Msg>()? {
        Msg::Welcome { endpoints, buf } => (endpoints, buf),
        Msg::Refused { error } => bail!("the server refused: {error}"),
        m => bail!("expected Welcome, got {m:?}"),
    };
    if endpoints.len() != ends.len() || (peer.len as usize) < server_len(a.qps) {
        bail!("the server's QPs or buffer do not match the request");
    }
    let opts = connect_options(mtu, a.timeout, a.retry_cnt);
    for (e, ep) in ends.iter().zip(&endpoints) {
        e.qp.connect(ep, &opts)?;
    }
    let stop = match (a.seconds, a.iterations) {
        (Some(s), _) => Stop::At(Instant::now() + Duration::from_secs_f64(s.max(0.0))),
        (None, n) => Stop::Rounds(n.unwrap_or(DEFAULT_ROUNDS)),
    };
    eprintln!(
        "urdma check: {ip} -> {server_ip}, {} RC QPs, path MTU {}, timeout {} ({:.1} ms), \
         retry_cnt {}, seed {seed:#x}, {}: running",
        a.qps,
        a.mtu,
        a.timeout,
        ack_timeout(a.timeout).as_secs_f64() * 1e3,
        a.retry_cnt,
        match stop {
            Stop::Rounds(n) => format!("{n} rounds per QP"),
            Stop::At(_) => format!("{} s", a.seconds.unwrap_or(0.0)),
        }
    );
    let abort = AtomicBool::new(false);
    let c = Client {
        mr: &mr,
        peer,
        seed,
        mtu: a.mtu,
        stop,
        abort: &abort,
        limit,
        probe_after: ack_timeout(a.timeout).max(Duration::from_millis(10)),
    };
    let t0 = Instant::now();
    let results: Vec<(ClientQp, Result<()>)> = std::thread::scope(|s| {
        let hs: Vec<_> = ends
            .iter()
            .enumerate()
            .map(|(q, e)| {
                s.spawn({
                    let c = &c;
                    move || c.run_qp(q, e)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    let empty = ClientQp {
                        rounds: 0,
                        tally: Tally::default(),
                        shared: Vec::new(),
                    };
                    (empty, Err(anyhow!("a client thread panicked")))
                })
            })
            .collect()
    });
    let elapsed = t0.elapsed();
    let mut tally = Tally::default();
    let mut rounds = Vec::new();
    let mut shared = Vec::new();
    let mut fatal = Vec::new();
    for (o, r) in results {
        rounds.push(o.rounds);
        tally.add(o.tally);
        shared.extend(o.shared);
        if let Err(e) = r {
            fatal.push(format!("{e:#}"));
        }
    }
    if fatal.is_empty() {
        check_shared(&c, &ends[0], &mut shared, &mut tally)?;
    }
    // The server's side of the story (bounded by the read timeout; after
    // a failure the peer may be gone, so do not insist).
    let aborted = !fatal.is_empty();
    let server = (|| -> Result<Tally> {
        ch.send_as(&Msg::Finish {
            rounds: rounds.clone(),
            aborted,
        })?;
        match ch.recv_as::<Msg>()? {
            Msg::Done { tally, error: None } => Ok(tally),
            Msg::Done {
                tally,
                error: Some(e),
            } => {
                fatal.push(format!("server: {e}"));
                Ok(tally)
            }
            m => bail!("expected Done, got {m:?}"),
        }
    })();
    match server {
        Ok(t) => tally.add(t),
        Err(e) if !aborted => fatal.push(format!("server: {e:#}")),
        Err(_) => {}
    }
    eprintln!(
        "urdma check: {} rounds in {:.1} s; client device: {}",
        rounds.iter().sum::<u64>(),
        elapsed.as_secs_f64(),
        counters_line(&dev)
    );
    finish(&tally, &fatal)
}

/// A device's packet counters, for the log.
fn counters_line(dev: &Device) -> String {
    let k = dev.counters();
    format!(
        "{} packets sent, {} received, {} retransmitted, {} timeouts, \
         {} sequence NAKs received, {} RNR NAKs received, {} duplicates, \
         {} ICRC errors, {} dropped, {} send errors",
        k[Counter::TxPackets],
        k[Counter::RxPackets],
        k[Counter::Retransmits],
        k[Counter::Timeouts],
        k[Counter::SeqNaksReceived],
        k[Counter::RnrNaksReceived],
        k[Counter::Duplicates],
        k[Counter::IcrcErrors],
        k[Counter::Dropped],
        k[Counter::TxErrors]
    )
}

/// The shared counter: the fetched values of every QP must be exactly
/// 0..N-1, and the counter must now hold N.
fn check_shared(c: &Client<'_>, end: &End, shared: &mut [u64], t: &mut Tally) -> Result<()> {
    let n = shared.len() as u64;
    shared.sort_unstable();
    if let Some((i, v)) = shared.iter().enumerate().find(|&(i, &v)| v != i as u64) {
        t.mismatch(format!(
            "shared counter: the {n} FETCH_ADDs returned {v} where {i} was due \
             (a value lost or returned twice)"
        ));
    }
    let mut last = Instant::now();
    end.qp.post_send(SendWr::read(
        u64::MAX << 8 | K_FINAL,
        &[c.slice(c_word(0, 5), 8)?],
        c.peer.addr,
        c.peer.rkey,
    ))?;
    complete(
        end,
        0,
        u64::MAX >> 8,
        1 << K_FINAL,
        c.limit,
        &mut last,
        None,
    )?;
    t.ops += 1;
    t.expect_u64(
        read_u64(c.mr, c_word(0, 5))?,
        n,
        "shared counter: final value (number of FETCH_ADDs)",
    );
    Ok(())
}

/// Print the summary line; fail on any error.
fn finish(t: &Tally, fatal: &[String]) -> Result<()> {
    for n in &t.notes {
        eprintln!("urdma check: mismatch: {n}");
    }
    if t.errors as usize > t.notes.len() {
        eprintln!(
            "urdma check: ... and {} more mismatches",
            t.errors as usize - t.notes.len()
        );
    }
    let errors = t.errors + fatal.len() as u64;
    println!(
        "check: {} operations, {} bytes verified, {errors} errors",
        t.ops, t.bytes
    );
    if !fatal.is_empty() {
        bail!("{}", fatal.join("; "));
    }
    if t.errors > 0 {
        bail!("{} mismatches", t.errors);
    }
    Ok(())
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    mix(t ^ u64::from(std::process::id()) << 32)
}

// ---------------------------------------------------------------------
// Server.

/// The server's shared state for one session.
struct Session<'a> {
    mr: &'a Mr,
    seed: u64,
    mtu: usize,
    /// Rounds the client completed per QP, once it has said so.
    targets: Mutex<Option<Vec<u64>>>,
    /// The client failed: stop at once.
    aborted: AtomicBool,
    /// Time of the last completion of any QP (ms since `epoch`).
    active_ms: AtomicU64,
    epoch: Instant,
    limit: Duration,
}

impl Session<'_> {
    fn touch(&self) {
        self.active_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let last = Duration::from_millis(self.active_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    fn target(&self, q: usize) -> Option<u64> {
        self.targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|t| t.get(q).copied().unwrap_or(0))
    }

    /// Serve QP `q`: check each WRITE with immediate and each SEND, echo
    /// the SENDs, until the client's count of rounds is reached.
    fn run_qp(&self, q: usize, end: &End) -> (Tally, Result<u64>) {
        let mut t = Tally::default();
        let r = self.serve_qp(q, end, &mut t);
        (t, r)
    }

    fn serve_qp(&self, q: usize, end: &End, t: &mut Tally) -> Result<u64> {
        let recv = |i: usize| post_recv_slot(self.mr, end, q, i);
        let (mut sends, mut imms, mut echoing) = (0u64, 0u64, 0usize);
        loop {
            if self.aborted.load(Ordering::Relaxed) {
                return Ok(sends);
            }
            if let Some(n) = self.target(q) {
                if sends > n || imms > n {
                    bail!("QP {q}: {sends} SENDs and {imms} WRITEs with immediate for {n} rounds");
                }
                if sends == n && imms == n && echoing == 0 {
                    return Ok(sends);
                }
            }
            let wcs = match end.cq.wait(16, Some(Duration::from_millis(20))) {
                Ok(v) => v,
                Err(urdma::Error::Timeout) => {
                    if self.idle() > self.limit {
                        bail!("QP {q}: no completion on any QP for {:?}", self.limit);
                    }
                    continue;
                }
                Err(e) => return Err(e).context("waiting for completions"),
            };
            self.touch();
            for wc in wcs {
                if wc.status != WcStatus::Success {
                    bail!(
                        "QP {q} (qpn {:#x}): work request {:#x} ({:?}) completed with {}",
                        end.qp.qpn(),
                        wc.wr_id,
                        wc.opcode,
                        status_name(wc.status)
                    );
                }
                let i = (wc.wr_id & 0xff) as usize;
                match wc.opcode {
                    WcOpcode::RecvRdmaWithImm => {
                        let r = imms;
                        imms += 1;
                        let p = plan(self.seed, self.mtu, q, r);
                        let what = format!("QP {q} round {r} RDMA WRITE with immediate");
                        if u64::from(wc.imm_data) != r & 0xffff_ffff {
                            t.mismatch(format!("{what}: immediate {:#x}", wc.imm_data));
                        }
                        if wc.byte_len as usize != p.write_imm.len {
                            t.mismatch(format!(
                                "{what}: byte_len {}, expected {}",
                                wc.byte_len, p.write_imm.len
                            ));
                        }
                        t.verify(
                            self.mr,
                            s_write_imm(q) + p.write_imm.remote,
                            p.write_imm.len,
                            tag(self.seed, q, r, Stream::WriteImm),
                            0,
                            &what,
                        );
                        recv(i)?;
                    }
                    WcOpcode::Recv => {
                        let r = sends;
                        sends += 1;
                        let p = plan(self.seed, self.mtu, q, r);
                        let what = format!("QP {q} round {r} SEND");
                        let len = wc.byte_len as usize;
                        if len != p.send.len {
                            t.mismatch(format!("{what}: byte_len {len}, expected {}", p.send.len));
                        }
                        t.verify(
                            self.mr,
                            s_recv(q, i),
                            len.min(MAX_MSG),
                            tag(self.seed, q, r, Stream::Send),
                            0,
                            &what,
                        );
                        end.qp.post_send(SendWr::send(
                            S_ECHO | i as u64,
                            &[self.mr.slice(s_recv(q, i), len.min(MAX_MSG))?],
                        ))?;
                        echoing += 1;
                    }
                    WcOpcode::Send => {
                        t.ops += 1;
                        echoing -= 1;
                        recv(i)?;
                    }
                    op => bail!("QP {q}: unexpected completion {op:?}"),
                }
            }
        }
    }

    /// After a complete run: the counters in memory.
    fn final_words(&self, rounds: &[u64], t: &mut Tally) -> Result<()> {
        t.expect_u64(
            read_u64(self.mr, 0)?,
            rounds.iter().sum(),
            "server: shared counter",
        );
        for (q, &n) in rounds.iter().enumerate() {
            let (mut sum, mut cas) = (0u64, 0u64);
            for r in 0..n {
                let p = plan(self.seed, self.mtu, q, r);
                sum = sum.wrapping_add(p.add);
                cas = p.cas_next;
            }
            t.expect_u64(
                read_u64(self.mr, s_counter(q))?,
                sum,
                &format!("server: QP {q} counter"),
            );
            t.expect_u64(
                read_u64(self.mr, s_cas(q))?,
                cas,
                &format!("server: QP {q} CMP_AND_SWP word"),
            );
        }
        Ok(())
    }
}

/// Server work request ids: receive slot `i` is `S_RECV | i`, its echo `S_ECHO | i`.
const S_RECV: u64 = 0x100;
const S_ECHO: u64 = 0x200;

/// Post the receive of slot `i` of QP `q`.
fn post_recv_slot(mr: &Mr, end: &End, q: usize, i: usize) -> Result<()> {
    end.qp.post_recv(RecvWr::new(
        S_RECV | i as u64,
        &[mr.slice(s_recv(q, i), MAX_MSG)?],
    ))?;
    Ok(())
}

/// Serve clients on `l` (one at a time; `once` stops after the first).
fn server(l: TcpListener, a: &CheckArgs) -> Result<()> {
    loop {
        let (ctrl, peer) = l.accept()?;
        eprintln!("urdma check: client {peer}");
        let r = serve_one(ctrl, a.peer.udp_port);
        match &r {
            Ok(t) => eprintln!(
                "urdma check: session with {peer}: {} operations, {} bytes verified, {} errors",
                t.ops, t.bytes, t.errors
            ),
            Err(e) => eprintln!("urdma check: session with {peer} failed: {e:#}"),
        }
        if a.once {
            return match r {
                Ok(t) if t.errors > 0 => bail!("{} mismatches", t.errors),
                r => r.map(|_| ()),
            };
        }
    }
}

fn serve_one(ctrl: TcpStream, udp_port: u16) -> Result<Tally> {
    let ip = ctrl.local_addr()?.ip();
    let closer = ctrl.try_clone()?;
    ctrl.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut ch = Channel::new(ctrl)?;
    let Msg::Hello {
        seed,
        mtu,
        timeout,
        retry_cnt,
        endpoints,
        buf,
    } = ch.recv_as::<Msg>()?
    else {
        bail!("expected Hello");
    };
    let qps = endpoints.len();
    let setup = (|| {
        let Some(m) = Mtu::from_bytes(mtu) else {
            bail!("bad MTU {mtu}");
        };
        if qps == 0 || qps > MAX_QPS {
            bail!("{qps} QPs asked for, 1..={MAX_QPS} allowed");
        }
        if (buf.len as usize) < client_len(qps) {
            bail!("the client's buffer is too small");
        }
        let (dev, mr, ends) = open("urdma1", ip, udp_port, qps, server_len(qps))?;
        for q in 0..qps {
            let area = tag(seed, q, u64::MAX >> 8, Stream::ReadArea);
            mr.write_at(s_read(q), &pattern_vec(area, 0, SLOT))?;
        }
        let opts = connect_options(m, timeout, retry_cnt);
        for (q, (e, ep)) in ends.iter().zip(&endpoints).enumerate() {
            e.qp.connect(ep, &opts)?;
            // Receives are posted before the client may send.
            for i in 0..RECV_SLOTS {
                post_recv_slot(&mr, e, q, i)?;
            }
        }
        Ok((dev, mr, ends))
    })();
    let (dev, mr, ends) = match setup {
        Ok(v) => v,
        Err(e) => {
            let _ = ch.send_as(&Msg::Refused {
                error: format!("{e:#}"),
            });
            return Err(e);
        }
    };
    ch.send_as(&Msg::Welcome {
        endpoints: ends.iter().map(|e| e.qp.endpoint()).collect(),
        buf: mr.remote(),
    })?;
    let limit = backstop(timeout, retry_cnt);
    let s = Session {
        mr: &mr,
        seed,
        mtu,
        targets: Mutex::new(None),
        aborted: AtomicBool::new(false),
        active_ms: AtomicU64::new(0),
        epoch: Instant::now(),
        limit,
    };
    let (results, finish) = std::thread::scope(|sc| {
        let hs: Vec<_> = ends
            .iter()
            .enumerate()
            .map(|(q, e)| {
                sc.spawn({
                    let s = &s;
                    move || s.run_qp(q, e)
                })
            })
            .collect();
        // The client's Finish; a client gone silent ends the wait by
        // inactivity of every QP.
        let finish = loop {
            match ch.recv_as::<Msg>() {
                Ok(Msg::Finish { rounds, aborted }) => break Ok((rounds, aborted)),
                Ok(m) => break Err(anyhow!("expected Finish, got {m:?}")),
                Err(e) => {
                    let timed_out = e.chain().any(|c| {
                        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                            matches!(
                                io.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            )
                        })
                    });
                    if timed_out && s.idle() < limit {
                        continue;
                    }
                    break Err(e);
                }
            }
        };
        match &finish {
            Ok((rounds, aborted)) => {
                s.aborted.store(*aborted, Ordering::Relaxed);
                *s.targets.lock().unwrap_or_else(|e| e.into_inner()) = Some(rounds.clone());
            }
            Err(_) => s.aborted.store(true, Ordering::Relaxed),
        }
        let results: Vec<(Tally, Result<u64>)> = hs
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    (Tally::default(), Err(anyhow!("a server thread panicked")))
                })
            })
            .collect();
        (results, finish)
    });
    eprintln!("urdma check: server device: {}", counters_line(&dev));
    let mut tally = Tally::default();
    let mut errors = Vec::new();
    for (t, r) in results {
        tally.add(t);
        if let Err(e) = r {
            errors.push(format!("{e:#}"));
        }
    }
    let (rounds, aborted) = match finish {
        Ok(v) => v,
        Err(e) => {
            let _ = closer.shutdown(Shutdown::Both);
            errors.push(format!("control connection: {e:#}"));
            return Err(anyhow!("{}", errors.join("; ")));
        }
    };
    if errors.is_empty() && !aborted {
        if rounds.len() != qps {
            errors.push("the client's Finish names the wrong number of QPs".into());
        } else {
            s.final_words(&rounds, &mut tally)?;
        }
    }
    let error = (!errors.is_empty()).then(|| errors.join("; "));
    let _ = ch.send_as(&Msg::Done {
        tally: tally.clone(),
        error: error.clone(),
    });
    match error {
        Some(e) if !aborted => Err(anyhow!(e)),
        _ => Ok(tally),
    }
}

// ---------------------------------------------------------------------

/// Run `urdma check`.
pub fn run(a: &CheckArgs) -> Result<()> {
    if a.qps == 0 || a.qps > MAX_QPS {
        bail!("--qps must be 1..={MAX_QPS}");
    }
    if Mtu::from_bytes(a.mtu).is_none() {
        bail!("--mtu must be 256, 512, 1024, 2048 or 4096");
    }
    if a.timeout > 31 || a.retry_cnt > 7 {
        bail!("--timeout must be 0..=31 and --retry-cnt 0..=7");
    }
    if a.peer.server {
        let ip = a.peer.bind.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let l = TcpListener::bind((ip, a.peer.ctrl_port))
            .with_context(|| format!("cannot listen on {ip}:{}", a.peer.ctrl_port))?;
        eprintln!("urdma check: server listening on {}", l.local_addr()?);
        return server(l, a);
    }
    match a.peer.host {
        Some(host) => {
            let ctrl = dial(
                SocketAddr::new(host, a.peer.ctrl_port),
                a.peer.bind,
                Duration::from_secs(10),
            )?;
            client(ctrl, a)
        }
        None => run_local(a),
    }
}

/// Server process on 127.0.0.2, client here on 127.0.0.1.
fn run_local(a: &CheckArgs) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["check", "--server", "--once", "--bind", "127.0.0.2"])
        .args(["--ctrl-port", &a.peer.ctrl_port.to_string()])
        .args(["--udp-port", &a.peer.udp_port.to_string()])
        .spawn()
        .context("cannot start the server process")?;
    let r = dial(
        SocketAddr::new([127, 0, 0, 2].into(), a.peer.ctrl_port),
        Some([127, 0, 0, 1].into()),
        Duration::from_secs(20),
    )
    .and_then(|ctrl| client(ctrl, a));
    // The server ends with its client; do not wait for a stuck one.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        match child.try_wait()? {
            Some(s) => break Some(s),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    r?;
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => bail!("server process failed: {s}"),
        None => bail!("server process did not exit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_random_access() {
        let whole = pattern_vec(42, 0, 100);
        for start in 0..20 {
            assert_eq!(pattern_vec(42, start, 50), whole[start..start + 50]);
        }
        assert_ne!(pattern_vec(43, 0, 100), whole);
    }

    #[test]
    fn plans_fit_their_slots() {
        for mtu in [256, 1024, 4096] {
            for r in 0..2000 {
                let p = plan(7, mtu, 3, r);
                for x in [p.write, p.write_imm, p.send, p.read] {
                    assert!(x.len <= MAX_MSG);
                    assert!(x.local + x.len <= SLOT && x.remote + x.len <= SLOT);
                }
                assert!(p.read.len > 0);
            }
        }
        assert_eq!(plan(1, 1024, 0, 5).add, plan(1, 1024, 0, 5).add);
    }

    #[test]
    fn mismatches_are_counted() {
        let mut t = Tally::default();
        let mut v = pattern_vec(9, 3, 100);
        t.compare(&v, 9, 3, "good");
        assert_eq!((t.bytes, t.errors), (100, 0));
        v[42] ^= 0x10;
        v[77] ^= 0x01;
        t.compare(&v, 9, 3, "bad");
        assert_eq!((t.bytes, t.errors), (100, 1));
        assert!(t.notes[0].contains("2 of 100 bytes differ, the first at byte 42"));
        t.expect_u64(5, 6, "word");
        assert_eq!(t.errors, 2);
    }

    #[test]
    fn layout_does_not_overlap() {
        assert!(s_cas(0) + 8 <= s_write(0));
        assert!(s_recv(0, RECV_SLOTS - 1) + MAX_MSG <= s_base(1));
        assert!(c_word(0, 7) + 8 <= c_slot(0, 0));
        assert!(c_slot(0, 5) + RECV_SKEW + MAX_MSG <= c_base(1));
        assert_eq!(s_counter(0) % 8, 0);
        assert_eq!(s_cas(1) % 8, 0);
    }
}

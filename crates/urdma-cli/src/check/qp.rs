//! The QPs of either side: opening the device and its QPs, the bounds
//! of every wait, waiting for a round's completions and running every
//! QP on its own thread.

use super::layout::{kind_name, K_ECHO, K_PROBE};
use anyhow::{anyhow, bail, Context, Result};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use urdma::{
    AccessFlags, ConnectOptions, Cq, Device, DeviceConfig, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType,
    SendWr, WcStatus, WorkCompletion,
};

/// The ACK timeout a QP with timeout code `t` uses.
pub(super) fn ack_timeout(t: u8) -> Duration {
    match t {
        0 => Duration::ZERO,
        t => Duration::from_nanos(4096u64 << t.min(31)),
    }
}

/// Longest wait for a completion: far beyond what retransmissions need
/// (the QP fails on its own long before), at least 30 s.
pub(super) fn backstop(timeout: u8, retry_cnt: u8) -> Duration {
    let retries = ack_timeout(timeout) * (u32::from(retry_cnt) + 1);
    (retries * 4).max(Duration::from_secs(30))
}

/// The 64-bit word at `off` of `mr`.
pub(super) fn read_u64(mr: &Mr, off: usize) -> Result<u64> {
    let mut b = [0u8; 8];
    mr.read_at(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// How the QPs of both sides connect.
pub(super) fn connect_options(mtu: Mtu, timeout: u8, retry_cnt: u8) -> ConnectOptions {
    ConnectOptions {
        mtu,
        timeout,
        retry_cnt,
        rnr_retry: 7,
        ..ConnectOptions::default()
    }
}

/// What the peer may do with a side's buffer: everything.
fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A QP with its own CQ (sends and receives).
pub(super) struct End {
    /// The QP.
    pub(super) qp: Qp,
    /// Its CQ.
    pub(super) cq: Cq,
}

/// Open the device and create `qps` QPs, each with its CQ.
pub(super) fn open(
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
pub(super) struct Probe {
    /// Where the 8 bytes land.
    pub(super) dst: urdma::MrSlice,
    /// What is read: address and rkey in the peer's memory.
    pub(super) addr: u64,
    pub(super) rkey: u32,
    /// Quiet time before the READ goes out.
    pub(super) after: Duration,
}

/// Wait for the completions of the kinds in the bit set `pending` (of
/// round `round`), at most `limit`; returns them indexed by kind.
pub(super) fn complete(
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

/// `ibv_wc_status_str`-style name of a completion status.
pub(super) fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::Success => "IBV_WC_SUCCESS",
        WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
        WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
        WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
        WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
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

/// Run `work(q, end)` for every QP `q` on its own thread while `meanwhile`
/// runs on this one; a thread that panicked yields `panicked()`.
pub(super) fn on_every_qp<T: Send, M>(
    ends: &[End],
    work: impl Fn(usize, &End) -> T + Sync,
    panicked: impl Fn() -> T,
    meanwhile: impl FnOnce() -> M,
) -> (Vec<T>, M) {
    std::thread::scope(|s| {
        let work = &work;
        let hs: Vec<_> = ends
            .iter()
            .enumerate()
            .map(|(q, e)| s.spawn(move || work(q, e)))
            .collect();
        let m = meanwhile();
        let results = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| panicked()))
            .collect();
        (results, m)
    })
}

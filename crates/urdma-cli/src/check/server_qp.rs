//! The server's QPs: each checks the WRITEs with immediate and the SENDs
//! of its client QP and echoes the SENDs, on its own thread.

use super::layout::{s_cas, s_counter, s_recv, s_write_imm, S_ECHO, S_RECV};
use super::pattern::{plan, tag, Stream, MAX_MSG};
use super::qp::{read_u64, status_name, End};
use super::report::Tally;
use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use urdma::{Mr, RecvWr, SendWr, WcOpcode, WcStatus};

/// The server's shared state for one session.
pub(super) struct Session<'a> {
    mr: &'a Mr,
    seed: u64,
    mtu: usize,
    /// Rounds the client completed per QP, once it has said so.
    pub(super) targets: Mutex<Option<Vec<u64>>>,
    /// The client failed: stop at once.
    pub(super) aborted: AtomicBool,
    /// Time of the last completion of any QP (ms since `epoch`).
    active_ms: AtomicU64,
    epoch: Instant,
    limit: Duration,
}

impl<'a> Session<'a> {
    /// A session over the buffer `mr` of a run seeded with `seed`, with
    /// path MTU `mtu`; a QP fails after `limit` without completions on
    /// any QP.
    pub(super) fn new(mr: &'a Mr, seed: u64, mtu: usize, limit: Duration) -> Self {
        Session {
            mr,
            seed,
            mtu,
            targets: Mutex::new(None),
            aborted: AtomicBool::new(false),
            active_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            limit,
        }
    }

    fn touch(&self) {
        self.active_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Time since the last completion of any QP.
    pub(super) fn idle(&self) -> Duration {
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
    pub(super) fn run_qp(&self, q: usize, end: &End) -> (Tally, Result<u64>) {
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
    pub(super) fn final_words(&self, rounds: &[u64], t: &mut Tally) -> Result<()> {
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

/// Post the receive of slot `i` of QP `q`.
pub(super) fn post_recv_slot(mr: &Mr, end: &End, q: usize, i: usize) -> Result<()> {
    end.qp.post_recv(RecvWr::new(
        S_RECV | i as u64,
        &[mr.slice(s_recv(q, i), MAX_MSG)?],
    ))?;
    Ok(())
}

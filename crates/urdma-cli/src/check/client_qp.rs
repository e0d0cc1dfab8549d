//! The client's QPs: each runs rounds on its own thread and checks what
//! comes back.

use super::layout::{
    c_slot, c_word, kind_name, s_base, s_cas, s_counter, s_read, s_write, s_write_imm, K_ADD,
    K_CAS, K_CAS_FAIL, K_ECHO, K_FINAL, K_READ, K_READ_BACK, K_SEND, K_SHARED_ADD, K_WRITE,
    K_WRITE_IMM, RECV_SKEW,
};
use super::pattern::{pattern_vec, plan, tag, Stream, MAX_MSG};
use super::qp::{complete, read_u64, End, Probe};
use super::report::Tally;
use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use urdma::api::RemoteBuf;
use urdma::rng::mix;
use urdma::{Mr, RecvWr, SendWr, WcOpcode};

/// When the client stops starting rounds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stop {
    /// After this many rounds per QP.
    Rounds(u64),
    /// At this time.
    At(Instant),
}

/// The client's shared state.
pub(super) struct Client<'a> {
    /// The client's buffer.
    pub(super) mr: &'a Mr,
    /// The server's buffer.
    pub(super) peer: RemoteBuf,
    /// Seed of the run.
    pub(super) seed: u64,
    /// Path MTU, bytes.
    pub(super) mtu: usize,
    /// When to stop starting rounds.
    pub(super) stop: Stop,
    /// Set by the first QP that fails: the others stop.
    pub(super) abort: &'a AtomicBool,
    /// Longest wait for a round's completions.
    pub(super) limit: Duration,
    /// Quiet time before a keep-alive READ (see [`Probe`]).
    pub(super) probe_after: Duration,
}

/// What one client QP did.
#[derive(Default)]
pub(super) struct ClientQp {
    /// Rounds completed.
    pub(super) rounds: u64,
    /// What it verified.
    pub(super) tally: Tally,
    /// What its FETCH_ADDs on the shared counter returned.
    pub(super) shared: Vec<u64>,
}

impl Client<'_> {
    fn more(&self, done: u64) -> bool {
        !self.abort.load(Ordering::Relaxed)
            && match self.stop {
                Stop::Rounds(n) => done < n,
                Stop::At(t) => Instant::now() < t,
            }
    }

    /// A slice of the client's buffer.
    pub(super) fn slice(&self, off: usize, len: usize) -> Result<urdma::MrSlice> {
        Ok(self.mr.slice(off, len)?)
    }

    /// Run rounds on QP `q` until told to stop.
    pub(super) fn run_qp(&self, q: usize, end: &End) -> (ClientQp, Result<()>) {
        let mut out = ClientQp::default();
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

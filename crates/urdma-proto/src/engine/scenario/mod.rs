//! Deterministic scenario tests of the engine in virtual time.
//!
//! Two ways to drive [`Engine`]s by hand, with a clock that only moves
//! when a test moves it (nothing here reads a wall clock):
//! - [`Pair`]: two engines A and B, each with one RC QP connected to the
//!   other. The datagrams an engine sends wait in its [`Node::out`] queue
//!   until the test delivers, drops, duplicates, reorders or holds them;
//!   [`Pair::fire`] jumps to the earliest timer deadline and runs it.
//! - [`Solo`]: one engine whose QP is connected to a hand-made peer. The
//!   test reads what the engine sends ([`Solo::recv`], parsed) and plays
//!   the remote side with packets it builds ([`Solo::send`]).
//!
//! Each test's doc comment names the protocol rule it pins.

mod abandoned;
mod by_reference;
mod congestion;
mod device_window;
mod duplicates;
mod invalidate;
mod local_ops;
mod loss;
mod peer;
mod read_window;
mod responses;
mod rnr;
mod selective;
mod wrap;

use peer::Solo;

use super::command::{AllocPd, CreateQp, PostRecv, PostSend, RegMr};
use super::{psn, Counter, Engine, RecvRequest, SendData, SendOp, SendRequest, SgEntry, Transmit};
use crate::memory::VecMemory;
use crate::mr::MrEntry;
use crate::sink::LocalCq;
use crate::types::{AccessFlags, Mtu, QpState, QpType, WcOpcode, WcStatus, WorkCompletion};
use crate::verbs::{connect_steps, ConnectOptions, Endpoint};
use crate::verbs::{DeviceAttr, Gid, QpCap};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use urdma_wire::{AckSyndrome, IcrcContext, Opcode, PacketRepr};

/// Length of each node's memory region.
const MR_LEN: usize = 1 << 16;
/// Path MTU of every scenario connection, in bytes.
pub(super) const MTU: usize = 1024;
/// Indexes of engines A and B in a [`Pair`].
pub(super) const A: usize = 0;
pub(super) const B: usize = 1;
/// QP number the hand-made peer of a [`Solo`] claims.
pub(super) const PEER_QPN: u32 = 0x99;

/// The ACK timeout of timeout code `t`: 4.096 us x 2^t, in ns, raised to
/// the engine's floor.
pub(super) fn ack_timeout(t: u8) -> u64 {
    (4096u64 << t).max(crate::engine::qp::MIN_ACK_TIMEOUT_NS)
}

/// Scenario QP options: MTU 1024, ACK timeout code 10 (4.19 ms, which the
/// engine raises to its floor), else defaults.
pub(super) fn opts() -> ConnectOptions {
    ConnectOptions {
        mtu: Mtu::Mtu1024,
        timeout: 10,
        ..ConnectOptions::default()
    }
}

/// A packet an engine sent, parsed: headers, payload, and the datagram.
#[derive(Debug, Clone)]
pub(super) struct Pkt {
    pub repr: PacketRepr,
    pub payload: Vec<u8>,
    pub data: Vec<u8>,
}

impl Pkt {
    /// BTH PSN.
    pub fn psn(&self) -> u32 {
        self.repr.bth.psn
    }

    /// BTH opcode.
    pub fn opcode(&self) -> Opcode {
        self.repr.bth.opcode
    }

    /// AETH syndrome (None without an AETH).
    pub fn syndrome(&self) -> Option<AckSyndrome> {
        self.repr.aeth.map(|a| a.syndrome)
    }
}

/// Parse datagram `t` sent by the device at `src`.
fn parse(src: SocketAddr, t: &Transmit) -> Pkt {
    let ctx = IcrcContext::new(src, t.dst);
    let p = urdma_wire::parse(&t.data, &ctx).expect("the engine sent a malformed packet");
    Pkt {
        repr: p.repr,
        payload: p.payload.to_vec(),
        data: t.data.clone(),
    }
}

/// `(psn, opcode)` of each packet, for compact assertions.
pub(super) fn psn_ops(pkts: &[Pkt]) -> Vec<(u32, Opcode)> {
    pkts.iter().map(|p| (p.psn(), p.opcode())).collect()
}

/// `(wr_id, status, opcode)` of each completion.
pub(super) fn wc_summary(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

/// Every completion waiting on `cq`.
fn poll(cq: &LocalCq) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    cq.poll(usize::MAX, &mut v);
    v
}

/// Bytes `0, 1, 2, ...` (mod 251) offset by `seed`: data to tell apart.
pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Move virtual time `now` to `t`, which must not be earlier.
fn tick(now: &mut u64, t: u64) {
    assert!(t >= *now, "time goes backwards: {t} < {now}");
    *now = t;
}

/// One device: an engine with one RC QP `qpn` (first send PSN `psn`), its
/// CQs, a 64 KiB MR with every access right, and in `out` the datagrams it
/// sent that the test has not yet delivered, dropped or taken.
pub(super) struct Node {
    pub eng: Engine,
    pub qpn: u32,
    pub qp_type: QpType,
    pub psn: u32,
    pub mr: Arc<MrEntry>,
    scq: Arc<LocalCq>,
    rcq: Arc<LocalCq>,
    pub out: VecDeque<Transmit>,
}

impl Node {
    /// A device at 127.0.0.`host`:4791 with an RC QP in RESET.
    fn new(host: u8) -> Node {
        Node::of_type(host, QpType::Rc)
    }

    /// A device at 127.0.0.`host`:4791 with a QP of `qp_type` in RESET.
    fn of_type(host: u8, qp_type: QpType) -> Node {
        let addr = SocketAddr::from(([127, 0, 0, host], 4791));
        let mut eng = Engine::new(addr, DeviceAttr::default(), Some(u64::from(host)));
        let pd = eng.call(0, AllocPd {}).expect("pd");
        let mem = VecMemory::new(MR_LEN);
        let reg = RegMr {
            pd,
            access: AccessFlags::all(),
            iova: 0x10_0000 * u64::from(host),
            mem: Box::new(mem),
            rekey: None,
        };
        let mr = eng.call(0, reg).expect("mr");
        let scq = Arc::new(LocalCq::new(1, 256));
        let rcq = Arc::new(LocalCq::new(2, 256));
        let create = CreateQp {
            pd,
            qp_type,
            cap: QpCap::default(),
            sq_sig_all: false,
            send_cq: scq.clone(),
            recv_cq: rcq.clone(),
            srq: None,
        };
        let qpn = eng.call(0, create).expect("qp");
        Node {
            eng,
            qpn,
            qp_type,
            psn: 0,
            mr,
            scq,
            rcq,
            out: VecDeque::new(),
        }
    }

    /// Connect the QP, sending from `psn`, to QP `qpn` at `addr` (sending from `rpsn`).
    fn connect(&mut self, psn: u32, addr: SocketAddr, qpn: u32, rpsn: u32, o: &ConnectOptions) {
        let remote = Endpoint {
            gid: Gid::from_ip(addr.ip()),
            port: addr.port(),
            qpn,
            psn: rpsn,
            mtu: Mtu::Mtu1024,
        };
        for (attr, mask) in connect_steps(self.qp_type, &remote, psn, o) {
            self.eng
                .modify_qp(0, self.qpn, &attr, mask)
                .expect("modify_qp");
        }
        self.psn = psn;
    }

    /// The engine's address.
    pub fn addr(&self) -> SocketAddr {
        self.eng.local()
    }

    /// The PSN `k` after the QP's first send PSN.
    pub fn at(&self, k: u32) -> u32 {
        psn::add(self.psn, k)
    }

    /// Address (IOVA) of byte `off` of the MR.
    pub fn va(&self, off: usize) -> u64 {
        self.mr.iova + off as u64
    }

    /// Post a signaled `op` of the MR's bytes `(off, len)` to `(remote_va, rkey)`.
    pub fn post(&mut self, now: u64, wr_id: u64, op: SendOp, at: (usize, usize), to: (u64, u32)) {
        self.post_sgl(now, wr_id, op, &[at], to);
    }

    /// As [`Node::post`], with a scatter/gather list of the MR's `(off,
    /// len)` ranges.
    pub fn post_sgl(
        &mut self,
        now: u64,
        wr_id: u64,
        op: SendOp,
        ranges: &[(usize, usize)],
        to: (u64, u32),
    ) {
        let wr = SendRequest {
            wr_id,
            op,
            data: SendData::Sges(ranges.iter().map(|&(o, l)| self.sge(o, l)).collect()),
            remote_va: to.0,
            rkey: to.1,
            signaled: true,
            solicited: false,
            ud: None,
            fence: false,
        };
        let qpn = self.qpn;
        self.eng.call(now, PostSend { qpn, wr }).expect("post_send");
        self.collect();
    }

    /// Post a receive WR of `len` bytes at `off` of the MR.
    pub fn post_recv(&mut self, now: u64, wr_id: u64, off: usize, len: usize) {
        let wr = RecvRequest {
            wr_id,
            sges: vec![self.sge(off, len)],
        };
        let qpn = self.qpn;
        self.eng.call(now, PostRecv { qpn, wr }).expect("post_recv");
        self.collect();
    }

    fn sge(&self, off: usize, len: usize) -> SgEntry {
        let (addr, length, lkey) = (self.va(off), len as u32, self.mr.lkey);
        SgEntry { addr, length, lkey }
    }

    /// Completions waiting on the send CQ.
    pub fn send_wcs(&self) -> Vec<WorkCompletion> {
        poll(&self.scq)
    }

    /// Completions waiting on the receive CQ.
    pub fn recv_wcs(&self) -> Vec<WorkCompletion> {
        poll(&self.rcq)
    }

    /// A counter of the QP.
    pub fn count(&self, c: Counter) -> u64 {
        self.eng.qp_counters(self.qpn).expect("qp")[c]
    }

    /// QP state.
    pub fn state(&self) -> QpState {
        self.eng.query_qp(self.qpn).expect("qp").qp_state
    }

    /// PSN the responder expects next.
    pub fn rq_psn(&self) -> u32 {
        self.eng.query_qp(self.qpn).expect("qp").rq_psn
    }

    /// `len` bytes at `off` of the MR.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mr.mem.read(off, &mut b).expect("read MR");
        b
    }

    /// Write `data` at `off` of the MR.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.mr.mem.write(off, data).expect("write MR");
    }

    /// Queued datagrams, parsed (the queue is left as it is).
    pub fn peek(&self) -> Vec<Pkt> {
        self.out.iter().map(|t| parse(self.addr(), t)).collect()
    }

    /// Hand the engine datagram `data` from `src` at time `now`.
    pub fn input(&mut self, now: u64, src: SocketAddr, data: &[u8]) {
        self.eng.handle_datagram(now, src, data);
        self.collect();
    }

    /// Hand the engine datagrams received together at time `now`.
    fn input_batch(&mut self, now: u64, src: SocketAddr, batch: &[Vec<u8>]) {
        self.eng
            .handle_batch(now, batch.iter().map(|d| (src, d.as_slice())));
        self.collect();
    }

    /// Run the engine's timers at time `now`.
    fn timers(&mut self, now: u64) {
        self.eng.handle_timeouts(now);
        self.collect();
    }

    /// Move what the engine sent into [`Node::out`].
    pub fn collect(&mut self) {
        let sent: Vec<Transmit> = self.eng.drain_tx().collect();
        self.out.extend(sent);
    }
}

/// Two engines, A and B (`n[A]`, `n[B]`), each with one RC QP connected
/// to the other's, and a virtual clock `now` (ns) the test advances.
pub(super) struct Pair {
    pub now: u64,
    pub n: [Node; 2],
}

impl Pair {
    /// A at 127.0.0.1 sending from `psn_a` with `oa`; B at 127.0.0.2, `psn_b`, `ob`.
    pub fn new(psn_a: u32, oa: &ConnectOptions, psn_b: u32, ob: &ConnectOptions) -> Pair {
        Pair::of_type(QpType::Rc, (psn_a, oa), (psn_b, ob))
    }

    /// As [`Pair::new`], with QPs of `qp_type` (RC or UC).
    pub fn of_type(
        qp_type: QpType,
        (psn_a, oa): (u32, &ConnectOptions),
        (psn_b, ob): (u32, &ConnectOptions),
    ) -> Pair {
        let (mut a, mut b) = (Node::of_type(1, qp_type), Node::of_type(2, qp_type));
        let (aa, ab, qa, qb) = (a.addr(), b.addr(), a.qpn, b.qpn);
        a.connect(psn_a, ab, qb, psn_b, oa);
        b.connect(psn_b, aa, qa, psn_a, ob);
        Pair { now: 0, n: [a, b] }
    }

    /// Both ends without selective retransmission: IBTA go-back-N, as
    /// between urdma and a peer that does not mark its packets.
    pub fn go_back_n(mut self) -> Pair {
        for n in &mut self.n {
            n.eng.set_selective(false);
        }
        self
    }

    /// Set the clock to `t` (never backwards); no timer runs.
    pub fn advance_to(&mut self, t: u64) {
        tick(&mut self.now, t);
    }

    /// Hand the packet at `idx` of `from`'s queue to the other engine.
    pub fn deliver(&mut self, from: usize, idx: usize) -> Pkt {
        let pkt = self.drop_pkt(from, idx);
        self.inject(1 - from, &pkt.data);
        pkt
    }

    /// Deliver, in order, every packet queued at `from` now.
    pub fn deliver_all(&mut self, from: usize) -> Vec<Pkt> {
        let n = self.n[from].out.len();
        (0..n).map(|_| self.deliver(from, 0)).collect()
    }

    /// Lose the packet at `idx` of `from`'s queue; returns it.
    pub fn drop_pkt(&mut self, from: usize, idx: usize) -> Pkt {
        let t = self.n[from].out.remove(idx).expect("no such queued packet");
        parse(self.n[from].addr(), &t)
    }

    /// Take every packet queued at `from` (lost, or held to inject later).
    pub fn take_all(&mut self, from: usize) -> Vec<Pkt> {
        let src = self.n[from].addr();
        self.n[from].out.drain(..).map(|t| parse(src, &t)).collect()
    }

    /// Put a copy of the packet at `idx` of `from`'s queue right behind it.
    pub fn duplicate(&mut self, from: usize, idx: usize) {
        let t = self.n[from].out[idx].clone();
        self.n[from].out.insert(idx + 1, t);
    }

    /// Swap two packets of `from`'s queue (reordering).
    pub fn swap(&mut self, from: usize, i: usize, j: usize) {
        self.n[from].out.swap(i, j);
    }

    /// Hand `data` to engine `to` as if sent by the other engine, now.
    pub fn inject(&mut self, to: usize, data: &[u8]) {
        let src = self.n[1 - to].addr();
        self.n[to].input(self.now, src, data);
    }

    /// Run both engines' timers now.
    pub fn timers(&mut self) {
        self.n.iter_mut().for_each(|x| x.timers(self.now));
    }

    /// The earliest deadline of either engine.
    pub fn next_deadline(&self) -> Option<u64> {
        self.n.iter().filter_map(|x| x.eng.next_deadline()).min()
    }

    /// Advance to the earliest deadline and run the timers; returns it.
    pub fn fire(&mut self) -> u64 {
        let t = self.next_deadline().expect("no timer runs");
        self.advance_to(t);
        self.timers();
        t
    }

    /// Deliver both ways, now, until nothing is queued; returns (sender, packet)s.
    pub fn settle(&mut self) -> Vec<(usize, Pkt)> {
        let mut log = Vec::new();
        while let Some(from) = (0..2).find(|&i| !self.n[i].out.is_empty()) {
            log.push((from, self.deliver(from, 0)));
        }
        log
    }
}

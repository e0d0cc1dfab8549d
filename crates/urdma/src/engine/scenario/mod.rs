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
//! Every test file names, in each test's doc comment, the protocol rule
//! it pins.

mod duplicates;
mod loss;
mod responses;
mod rnr;
mod wrap;

use super::command::{AllocPd, CreateQp, PostRecv, PostSend, RegMr};
use super::{psn, Counter, Engine, RecvRequest, SendData, SendOp, SendRequest, SgEntry, Transmit};
use crate::api::{connect_steps, ConnectOptions, Endpoint};
use crate::cq::CqShared;
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::types::{AccessFlags, Mtu, QpState, QpType, WcOpcode, WcStatus, WorkCompletion};
use crate::verbs::{DeviceAttr, Gid, QpCap};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use urdma_wire::{AckSyndrome, Aeth, Bth, IcrcContext, Opcode, PacketRepr};

/// Length of each node's memory region.
pub(super) const MR_LEN: usize = 1 << 16;
/// Path MTU of every scenario connection, in bytes.
pub(super) const MTU: usize = 1024;
/// Index of engine A in a [`Pair`].
pub(super) const A: usize = 0;
/// Index of engine B in a [`Pair`].
pub(super) const B: usize = 1;
/// QP number the hand-made peer of a [`Solo`] claims.
pub(super) const PEER_QPN: u32 = 0x99;

/// The ACK timeout of timeout code `t`: 4.096 us x 2^t, in ns.
pub(super) fn ack_timeout(t: u8) -> u64 {
    4096 << t
}

/// Connection options of a scenario QP: MTU 1024, ACK timeout code 10
/// (4.19 ms), the rest as [`ConnectOptions::default`].
pub(super) fn opts() -> ConnectOptions {
    ConnectOptions {
        mtu: Mtu::Mtu1024,
        timeout: 10,
        ..ConnectOptions::default()
    }
}

/// A packet an engine sent, parsed.
#[derive(Debug, Clone)]
pub(super) struct Pkt {
    /// Its headers.
    pub repr: PacketRepr,
    /// Its payload.
    pub payload: Vec<u8>,
    /// The datagram as sent.
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

/// Bytes `0, 1, 2, ...` (mod 251) offset by `seed`: data to tell apart.
pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// One device: an engine with one RC QP, its send and receive CQs, one
/// 64 KiB MR with every access right, and the datagrams it sent that the
/// test has not delivered yet.
pub(super) struct Node {
    /// The engine.
    pub eng: Engine,
    /// Its QP.
    pub qpn: u32,
    /// The QP's first send PSN.
    pub psn: u32,
    /// Its memory region.
    pub mr: Arc<MrEntry>,
    /// Send CQ.
    pub scq: Arc<CqShared>,
    /// Receive CQ.
    pub rcq: Arc<CqShared>,
    /// Datagrams sent and not yet delivered, dropped or taken.
    pub out: VecDeque<Transmit>,
}

impl Node {
    /// A device at `addr` with a QP in RESET.
    fn new(addr: SocketAddr, seed: u64) -> Node {
        let mut eng = Engine::new(addr, DeviceAttr::default(), Some(seed));
        let pd = eng.call(0, AllocPd {}).expect("pd");
        let mem = MemRegion::allocate(MR_LEN).expect("memory");
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let iova = 0x10_0000 * (seed + 1);
        let mr = eng
            .call(
                0,
                RegMr {
                    pd,
                    access,
                    iova,
                    mem,
                },
            )
            .expect("mr");
        let scq = Arc::new(CqShared::new(1, 256));
        let rcq = Arc::new(CqShared::new(2, 256));
        let create = CreateQp {
            pd,
            qp_type: QpType::Rc,
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
            psn: 0,
            mr,
            scq,
            rcq,
            out: VecDeque::new(),
        }
    }

    /// Connect the QP (first send PSN `psn`) to QP `qpn` at `addr`, whose
    /// first send PSN is `rpsn`.
    fn connect(&mut self, psn: u32, addr: SocketAddr, qpn: u32, rpsn: u32, o: &ConnectOptions) {
        let remote = Endpoint {
            gid: Gid::from_ip(addr.ip()),
            port: addr.port(),
            qpn,
            psn: rpsn,
            mtu: Mtu::Mtu1024,
        };
        for (attr, mask) in connect_steps(QpType::Rc, &remote, psn, o) {
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

    /// Remote key of the MR.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    /// Post a signaled send WR of `op` on `len` bytes at `off` of the MR,
    /// aimed at `remote_va`/`rkey` (ignored by SEND).
    #[allow(clippy::too_many_arguments)]
    pub fn post(
        &mut self,
        now: u64,
        wr_id: u64,
        op: SendOp,
        off: usize,
        len: usize,
        remote_va: u64,
        rkey: u32,
    ) {
        let wr = SendRequest {
            wr_id,
            op,
            data: SendData::Sges(vec![self.sge(off, len)]),
            remote_va,
            rkey,
            signaled: true,
            solicited: false,
            ud: None,
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
        SgEntry {
            addr: self.va(off),
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }

    /// Completions waiting on the send CQ.
    pub fn send_wcs(&self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.scq.poll(usize::MAX, &mut v).expect("poll send CQ");
        v
    }

    /// Completions waiting on the receive CQ.
    pub fn recv_wcs(&self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.rcq.poll(usize::MAX, &mut v).expect("poll receive CQ");
        v
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

    /// Move what the engine sent into [`Node::out`].
    fn collect(&mut self) {
        let sent: Vec<Transmit> = self.eng.drain_tx().collect();
        self.out.extend(sent);
    }
}

/// Two engines, A and B, each with one RC QP connected to the other's, and
/// a virtual clock (ns) the test advances.
pub(super) struct Pair {
    /// Virtual time.
    pub now: u64,
    /// A and B.
    pub n: [Node; 2],
}

impl Pair {
    /// Engines at 127.0.0.1 (A) and 127.0.0.2 (B); A's QP sends from PSN
    /// `psn_a` with options `oa`, B's from `psn_b` with `ob`.
    pub fn new(psn_a: u32, oa: &ConnectOptions, psn_b: u32, ob: &ConnectOptions) -> Pair {
        let mut a = Node::new(SocketAddr::from(([127, 0, 0, 1], 4791)), 1);
        let mut b = Node::new(SocketAddr::from(([127, 0, 0, 2], 4791)), 2);
        let (aa, ab, qa, qb) = (a.addr(), b.addr(), a.qpn, b.qpn);
        a.connect(psn_a, ab, qb, psn_b, oa);
        b.connect(psn_b, aa, qa, psn_a, ob);
        Pair { now: 0, n: [a, b] }
    }

    /// Set the clock to `t` (never backwards); no timer runs.
    pub fn advance_to(&mut self, t: u64) {
        assert!(t >= self.now, "time goes backwards: {t} < {}", self.now);
        self.now = t;
    }

    /// Hand the packet at `idx` of `from`'s queue to the other engine;
    /// returns it.
    pub fn deliver(&mut self, from: usize, idx: usize) -> Pkt {
        let t = self.n[from].out.remove(idx).expect("no such queued packet");
        let pkt = parse(self.n[from].addr(), &t);
        self.inject(1 - from, &t.data);
        pkt
    }

    /// Deliver, in order, every packet queued at `from` now.
    pub fn deliver_all(&mut self, from: usize) -> Vec<Pkt> {
        (0..self.n[from].out.len())
            .map(|_| self.deliver(from, 0))
            .collect()
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

    /// Swap two packets of `from`'s queue.
    pub fn swap(&mut self, from: usize, i: usize, j: usize) {
        self.n[from].out.swap(i, j);
    }

    /// Hand `data` to engine `to` as if sent by the other engine.
    pub fn inject(&mut self, to: usize, data: &[u8]) {
        let (now, src) = (self.now, self.n[1 - to].addr());
        self.n[to].eng.handle_datagram(now, src, data);
        self.n[to].collect();
    }

    /// Run both engines' timers at the current time.
    pub fn timers(&mut self) {
        for node in &mut self.n {
            node.eng.handle_timeouts(self.now);
            node.collect();
        }
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

    /// Deliver every packet both ways, at the current time, until neither
    /// engine has anything queued; returns what went (sender, packet).
    pub fn settle(&mut self) -> Vec<(usize, Pkt)> {
        let mut log = Vec::new();
        while let Some(from) = (0..2).find(|&i| !self.n[i].out.is_empty()) {
            log.push((from, self.deliver(from, 0)));
        }
        log
    }
}

/// One engine whose QP is connected to a hand-made peer (QP [`PEER_QPN`]
/// at 127.0.0.9, first PSN 0) that the test plays with built packets.
pub(super) struct Solo {
    /// Virtual time.
    pub now: u64,
    /// The engine under test.
    pub node: Node,
    /// The peer's address.
    pub peer: SocketAddr,
}

impl Solo {
    /// The engine at 127.0.0.1, its QP sending from PSN 0x10_0000 with `o`.
    pub fn new(o: &ConnectOptions) -> Solo {
        let mut node = Node::new(SocketAddr::from(([127, 0, 0, 1], 4791)), 1);
        let peer = SocketAddr::from(([127, 0, 0, 9], 4791));
        node.connect(0x10_0000, peer, PEER_QPN, 0, o);
        Solo { now: 0, node, peer }
    }

    /// The next packet the engine sent, or None.
    pub fn recv(&mut self) -> Option<Pkt> {
        let t = self.node.out.pop_front()?;
        assert_eq!(t.dst, self.peer, "packet for another address");
        let p = parse(self.node.addr(), &t);
        assert_eq!(p.repr.bth.dest_qp, PEER_QPN, "packet for another QP");
        Some(p)
    }

    /// The next packet, which must have been sent.
    pub fn must_recv(&mut self) -> Pkt {
        self.recv().expect("the engine sent nothing")
    }

    /// Every packet sent so far.
    pub fn recv_all(&mut self) -> Vec<Pkt> {
        std::iter::from_fn(|| self.recv()).collect()
    }

    /// Send the engine a packet with `repr` and `payload`.
    pub fn send(&mut self, repr: &PacketRepr, payload: &[u8]) {
        let ctx = IcrcContext::new(self.peer, self.node.addr());
        let d = urdma_wire::build(repr, payload, &ctx).expect("build");
        self.node.eng.handle_datagram(self.now, self.peer, &d);
        self.node.collect();
    }

    /// Headers for a response `op` at `psn` to the engine's QP.
    pub fn bth(&self, op: Opcode, psn: u32) -> PacketRepr {
        PacketRepr::new(Bth::new(op, self.node.qpn, psn))
    }

    /// Send an ACK or NAK (RC ACKNOWLEDGE with `syndrome`) for `psn`.
    pub fn aeth(&mut self, psn: u32, syndrome: AckSyndrome, msn: u32) {
        let mut r = self.bth(Opcode::RcAck, psn);
        r.aeth = Some(Aeth { syndrome, msn });
        self.send(&r, &[]);
    }

    /// ACK `psn` with unlimited credits.
    pub fn ack(&mut self, psn: u32, msn: u32) {
        self.aeth(psn, AckSyndrome::Ack { credits: 31 }, msn);
    }

    /// The PSN `k` after the engine's first send PSN.
    pub fn at(&self, k: u32) -> u32 {
        self.node.at(k)
    }

    /// Set the clock to `t` (never backwards) and run the timers.
    pub fn timers_at(&mut self, t: u64) {
        assert!(t >= self.now, "time goes backwards: {t} < {}", self.now);
        self.now = t;
        self.node.eng.handle_timeouts(t);
        self.node.collect();
    }

    /// Advance to the engine's next deadline and run its timers; returns it.
    pub fn fire(&mut self) -> u64 {
        let t = self.node.eng.next_deadline().expect("no timer runs");
        self.timers_at(t);
        t
    }
}

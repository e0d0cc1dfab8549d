//! The hand-made peer mode of the scenario harness: one engine whose QP
//! is connected to a remote end the test plays itself, reading what the
//! engine sends (parsed) and answering with packets it builds.

use super::{parse, tick, Node, Pkt, PEER_QPN};
use crate::verbs::ConnectOptions;
use std::net::SocketAddr;
use urdma_wire::{AckSyndrome, Aeth, Bth, IcrcContext, Opcode, PacketRepr};

/// One engine (`node`) whose QP is connected to a hand-made peer (QP
/// [`PEER_QPN`] at `peer`, 127.0.0.9, first PSN 0) that the test plays
/// with built packets; `now` is the virtual clock (ns).
pub(super) struct Solo {
    pub now: u64,
    pub node: Node,
    pub peer: SocketAddr,
}

impl Solo {
    /// The engine at 127.0.0.1, its QP sending from PSN 0x10_0000 with `o`.
    pub fn new(o: &ConnectOptions) -> Solo {
        let mut node = Node::new(1);
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
        self.send_from(self.peer, repr, payload);
    }

    /// Send the engine several packets (repr, payload) in one receive batch.
    pub fn send_batch(&mut self, pkts: &[(&PacketRepr, &[u8])]) {
        let ctx = IcrcContext::new(self.peer, self.node.addr());
        let batch: Vec<Vec<u8>> = pkts
            .iter()
            .map(|(r, p)| urdma_wire::build(r, p, &ctx).expect("build"))
            .collect();
        self.node.input_batch(self.now, self.peer, &batch);
    }

    /// Send the engine a packet from `src` (another UDP port of the peer,
    /// or another host).
    pub fn send_from(&mut self, src: SocketAddr, repr: &PacketRepr, payload: &[u8]) {
        let ctx = IcrcContext::new(src, self.node.addr());
        let d = urdma_wire::build(repr, payload, &ctx).expect("build");
        self.node.input(self.now, src, &d);
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
        tick(&mut self.now, t);
        self.node.timers(t);
    }

    /// Advance to the engine's next deadline and run its timers; returns it.
    pub fn fire(&mut self) -> u64 {
        let t = self.node.eng.next_deadline().expect("no timer runs");
        self.timers_at(t);
        t
    }
}

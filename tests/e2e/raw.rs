//! A hand-made requester: a plain UDP socket on this process's address
//! and port 4791 speaks RoCEv2 to one peer QP, so the peer's responder
//! can be fed duplicates, PSN gaps and protocol violations.

use crate::harness::{address_pair, sge, Peer, ALL, PORT};
use crate::proto::{Cmd, ConnOpts, MrInfo, QpInfo};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;
use urdma::{Endpoint, Gid, Mtu, QpState, WcOpcode, WcStatus};
use urdma_wire::{
    AckSyndrome, AtomicEth, Bth, IcrcContext, NakCode, Opcode, PacketRepr, Reth, PSN_MASK,
};

/// The QP number the raw requester claims.
const RAW_QPN: u32 = 0x77;
/// Path MTU of the peer QP.
const MTU: usize = 1024;

/// A parsed response: headers and payload.
pub struct Resp {
    /// Headers.
    pub repr: PacketRepr,
    /// Payload.
    pub payload: Vec<u8>,
}

/// The raw requester and the peer QP it talks to.
pub struct Raw {
    /// The peer process.
    pub peer: Peer,
    sock: UdpSocket,
    to: SocketAddr,
    /// Peer QP number.
    pub pqpn: u32,
    /// Peer QP id.
    pub pqp: u32,
    /// Peer CQ id.
    pub pcq: u32,
    /// Peer MR (4096 bytes, every right).
    pub mr: MrInfo,
    /// Next PSN to send.
    pub psn: u32,
}

impl Raw {
    /// Spawn a peer with one RC QP connected to this raw requester.
    pub fn new() -> Raw {
        let (ip, peer_ip) = address_pair();
        let sock = UdpSocket::bind(SocketAddr::new(ip, PORT)).expect("bind raw socket");
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut peer = Peer::spawn();
        peer.ok::<()>(&Cmd::Open {
            addr: peer_ip,
            port: PORT,
        });
        let pd: u32 = peer.ok(&Cmd::AllocPd);
        let pcq: u32 = peer.ok(&Cmd::CreateCq { cqe: 64 });
        let q: QpInfo = peer.ok(&Cmd::CreateQp {
            pd,
            cq: pcq,
            cap: None,
        });
        let psn = 0xFF_FFFE; // wraps after two packets
        let me = Endpoint {
            gid: Gid::from_ip(ip),
            port: PORT,
            qpn: RAW_QPN,
            psn,
            mtu: Mtu::Mtu4096,
        };
        let opts = ConnOpts::mtu(MTU);
        peer.ok::<()>(&Cmd::Connect {
            qp: q.id,
            remote: me,
            opts,
        });
        let mr = peer.reg_mr(pd, 4096, ALL);
        peer.ok::<()>(&Cmd::Fill {
            mr: mr.id,
            off: 0,
            len: 4096,
            seed: 0xAB,
            base: 0,
        });
        let to = SocketAddr::new(peer_ip, PORT);
        Raw {
            peer,
            sock,
            to,
            pqpn: q.endpoint.qpn,
            pqp: q.id,
            pcq,
            mr,
            psn,
        }
    }

    /// A BTH to the peer QP at PSN `psn`, asking for an ACK.
    pub fn bth(&self, op: Opcode, psn: u32) -> Bth {
        let mut b = Bth::new(op, self.pqpn, psn);
        b.ack_req = true;
        b
    }

    /// Send one packet.
    pub fn send(&self, repr: &PacketRepr, payload: &[u8]) {
        let ctx = IcrcContext::new(self.sock.local_addr().unwrap(), self.to);
        let d = urdma_wire::build(repr, payload, &ctx).expect("build packet");
        self.sock.send_to(&d, self.to).unwrap();
    }

    /// Take the next PSN.
    pub fn next_psn(&mut self) -> u32 {
        let p = self.psn;
        self.psn = (p + 1) & PSN_MASK;
        p
    }

    /// The next response from the peer, or None after 500 ms.
    pub fn recv(&self) -> Option<Resp> {
        let mut buf = vec![0u8; 65536];
        let (n, src) = self.sock.recv_from(&mut buf).ok()?;
        assert_eq!(src, self.to, "response from a stranger");
        let ctx = IcrcContext::new(src, self.sock.local_addr().unwrap());
        // A datagram sent alone carries identification 0, the k-th segment
        // of a GSO send k: the ICRC must hold for one of those.
        let ident = urdma_wire::check_icrc_any_ident(&buf[..n], &ctx)
            .expect("peer sent a packet with a bad ICRC")
            .expect("an IPv4 identification");
        assert!(ident.is_urdma(), "peer sent identification {ident:?}");
        let p = urdma_wire::parse_unchecked(&buf[..n]).expect("peer sent a malformed packet");
        Some(Resp {
            repr: p.repr,
            payload: p.payload.to_vec(),
        })
    }

    /// The next response, which must come.
    pub fn must_recv(&self) -> Resp {
        self.recv().expect("no response from the peer")
    }

    /// Expect an ACK (or NAK) with `syndrome` for `psn`; returns its MSN.
    pub fn expect_aeth(&self, psn: u32, nak: Option<NakCode>) -> u32 {
        let r = self.must_recv();
        let aeth = r.repr.aeth.expect("AETH");
        assert_eq!(r.repr.bth.psn, psn, "AETH PSN ({:?})", aeth.syndrome);
        match nak {
            Some(code) => assert_eq!(aeth.syndrome, AckSyndrome::Nak(code)),
            None => assert!(matches!(aeth.syndrome, AckSyndrome::Ack { .. }), "{aeth:?}"),
        }
        aeth.msn
    }

    /// A WRITE ONLY of `data` at MR offset `off` with PSN `psn`.
    pub fn write_only(&self, psn: u32, off: u64, data: &[u8]) -> PacketRepr {
        let mut r = PacketRepr::new(self.bth(Opcode::RcWriteOnly, psn));
        r.reth = Some(Reth {
            va: self.mr.addr + off,
            rkey: self.mr.rkey,
            dma_len: data.len() as u32,
        });
        r
    }

    /// Assert that no packet comes for 200 ms.
    pub fn expect_silence(&self) {
        self.sock
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let r = self.recv();
        self.sock
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(r.is_none(), "unexpected packet {:?}", r.map(|r| r.repr));
    }
}

/// A duplicate SEND is acknowledged again but delivered only once.
pub fn duplicate_send() {
    let mut r = Raw::new();
    let mr = r.mr;
    r.peer.post_recv(r.pqp, 1, &[sge(&mr, 0, 100)]);
    r.peer.post_recv(r.pqp, 2, &[sge(&mr, 200, 100)]);
    let p = r.next_psn();
    let send = PacketRepr::new(r.bth(Opcode::RcSendOnly, p));
    let data = crate::pattern::pattern(1, 0, 60);
    r.send(&send, &data);
    assert_eq!(r.expect_aeth(p, None), 1);
    r.send(&send, &data);
    assert_eq!(
        r.expect_aeth(p, None),
        1,
        "duplicate SEND: ACK with the same MSN"
    );
    let wcs = r.peer.poll_for(r.pcq, 2, Duration::from_millis(200)).wcs;
    assert_eq!(wcs.len(), 1, "duplicate SEND delivered twice: {wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 60));
    let p2 = r.next_psn();
    r.send(&PacketRepr::new(r.bth(Opcode::RcSendOnly, p2)), &data[..30]);
    assert_eq!(r.expect_aeth(p2, None), 2);
    let wcs = r.peer.poll(r.pcq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].byte_len, wcs[0].src_qp),
        (2, 30, RAW_QPN)
    );
}

/// A duplicate atomic returns the saved original without executing again.
pub fn duplicate_atomic() {
    let mut r = Raw::new();
    r.peer.ok::<()>(&Cmd::Poke {
        mr: r.mr.id,
        off: 64,
        data: 10u64.to_ne_bytes().to_vec(),
    });
    let p = r.next_psn();
    let mut fa = PacketRepr::new(r.bth(Opcode::RcFetchAdd, p));
    fa.atomic_eth = Some(AtomicEth {
        va: r.mr.addr + 64,
        rkey: r.mr.rkey,
        swap_add: 5,
        compare: 0,
    });
    for round in 0..3 {
        r.send(&fa, &[]);
        let a = r.must_recv();
        assert_eq!(a.repr.bth.opcode, Opcode::RcAtomicAck, "round {round}");
        assert_eq!(a.repr.bth.psn, p);
        assert_eq!(
            a.repr.atomic_ack_eth.expect("AtomicAckETH").orig,
            10,
            "round {round}"
        );
    }
    let v = u64::from_ne_bytes(r.peer.peek(r.mr.id, 64, 8).try_into().unwrap());
    assert_eq!(v, 15, "duplicate fetch-add executed again");
}

/// A duplicate READ request gets the same responses again.
pub fn duplicate_read() {
    let mut r = Raw::new();
    let first = r.psn;
    let mut rd = PacketRepr::new(r.bth(Opcode::RcReadRequest, first));
    rd.reth = Some(Reth {
        va: r.mr.addr + 5,
        rkey: r.mr.rkey,
        dma_len: 2500,
    });
    for _ in 0..3 {
        r.next_psn();
    }
    for round in 0..2 {
        r.send(&rd, &[]);
        let mut got = Vec::new();
        let ops = [
            Opcode::RcReadResponseFirst,
            Opcode::RcReadResponseMiddle,
            Opcode::RcReadResponseLast,
        ];
        for (k, op) in ops.into_iter().enumerate() {
            let resp = r.must_recv();
            assert_eq!(resp.repr.bth.opcode, op, "round {round}");
            assert_eq!(
                resp.repr.bth.psn,
                (first + k as u32) & PSN_MASK,
                "round {round}"
            );
            got.extend_from_slice(&resp.payload);
        }
        assert_eq!(got, crate::pattern::pattern(0xAB, 5, 2500), "round {round}");
    }
    // The next request uses the PSN after the READ's three.
    let p = r.next_psn();
    r.send(&r.write_only(p, 0, &[1, 2, 3]), &[1, 2, 3]);
    r.expect_aeth(p, None);
}

/// A PSN gap: one sequence-error NAK for the expected PSN, no execution.
pub fn psn_gap() {
    let mut r = Raw::new();
    let expected = r.next_psn();
    let ahead = (expected + 5) & PSN_MASK;
    r.send(&r.write_only(ahead, 0, &[9; 16]), &[9; 16]);
    r.expect_aeth(expected, Some(NakCode::PsnSequenceError));
    let ahead2 = (expected + 6) & PSN_MASK;
    r.send(&r.write_only(ahead2, 0, &[9; 16]), &[9; 16]);
    r.expect_silence();
    assert_eq!(
        r.peer.check(r.mr.id, 0, 4096, 0xAB, 0),
        None,
        "out-of-sequence WRITE executed"
    );
    r.send(&r.write_only(expected, 0, &[7; 16]), &[7; 16]);
    r.expect_aeth(expected, None);
    assert_eq!(r.peer.peek(r.mr.id, 0, 16), vec![7; 16]);
    assert_eq!(r.peer.query(r.pqp).qp_state, QpState::Rts);
}

/// Several WRITEs back to back: the last ACK covers the last PSN and
/// carries the count of messages as its MSN.
pub fn ack_msn() {
    let mut r = Raw::new();
    let mut last = 0;
    for i in 0..5u8 {
        last = r.next_psn();
        r.send(&r.write_only(last, u64::from(i) * 16, &[i; 16]), &[i; 16]);
    }
    let mut msn = 0;
    let mut psn = None;
    while psn != Some(last) {
        let resp = r.must_recv();
        psn = Some(resp.repr.bth.psn);
        msn = resp.repr.aeth.expect("AETH").msn;
    }
    assert_eq!(msn, 5);
}

/// Protocol violations NAKed as invalid requests: a WRITE MIDDLE with no
/// WRITE in progress, and a WRITE ONLY whose payload is shorter than its
/// DMA length. The QP enters ERR and memory is unchanged.
pub fn invalid_requests() {
    for case in 0..2 {
        let mut r = Raw::new();
        let p = r.next_psn();
        let (repr, data) = if case == 0 {
            (
                PacketRepr::new(r.bth(Opcode::RcWriteMiddle, p)),
                vec![1u8; MTU],
            )
        } else {
            let mut w = r.write_only(p, 0, &[0; 100]);
            w.reth.as_mut().unwrap().dma_len = 100;
            (w, vec![1u8; 50])
        };
        r.peer.post_recv(r.pqp, 1, &[sge(&r.mr.clone(), 0, 8)]);
        r.send(&repr, &data);
        r.expect_aeth(p, Some(NakCode::InvalidRequest));
        assert_eq!(r.peer.check(r.mr.id, 0, 4096, 0xAB, 0), None, "case {case}");
        assert_eq!(r.peer.query(r.pqp).qp_state, QpState::Err, "case {case}");
        let wcs = r.peer.poll(r.pcq, 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
            (1, WcStatus::WrFlushErr, WcOpcode::Recv)
        );
    }
}

/// A READ of 16 MiB, far more than the responder sends at once: its
/// responses keep coming, in PSN order and with the region's bytes, while
/// the requester sends nothing more (the responder goes on by itself),
/// and a WRITE after it is acknowledged once they have all been sent.
pub fn long_read() {
    const LEN: usize = 16 << 20;
    let mut r = Raw::new();
    let big = r.peer.reg_mr(0, LEN, ALL);
    r.peer.ok::<()>(&Cmd::Fill {
        mr: big.id,
        off: 0,
        len: LEN,
        seed: 0x5C,
        base: 0,
    });
    let first = r.psn;
    let n = (LEN / MTU) as u32;
    let mut rd = PacketRepr::new(r.bth(Opcode::RcReadRequest, first));
    rd.reth = Some(Reth {
        va: big.addr,
        rkey: big.rkey,
        dma_len: LEN as u32,
    });
    r.psn = (first + n) & PSN_MASK;
    r.send(&rd, &[]);
    // Datagrams the socket had no room for are lost: those that came must
    // be in order and right.
    let (mut got, mut last) = (0u32, None::<u32>);
    let end = (first + n - 1) & PSN_MASK;
    while let Some(resp) = r.recv() {
        let k = resp.repr.bth.psn.wrapping_sub(first) & PSN_MASK;
        assert!(
            k < n,
            "response PSN {:#x} outside the READ",
            resp.repr.bth.psn
        );
        assert!(last.is_none_or(|l| k > l), "response {k} after {last:?}");
        let want = crate::pattern::pattern(0x5C, u64::from(k) * MTU as u64, MTU);
        assert!(resp.payload == want, "response {k} carries other bytes");
        last = Some(k);
        got += 1;
        if resp.repr.bth.psn == end {
            break;
        }
    }
    assert!(got > 4 * 64, "{got} responses: more than the first windows");
    let p = r.next_psn();
    r.send(&r.write_only(p, 0, &[1, 2, 3]), &[1, 2, 3]);
    while r.must_recv().repr.bth.psn != p {}
}

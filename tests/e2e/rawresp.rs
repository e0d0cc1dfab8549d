//! A hand-made responder: a plain UDP socket plays the remote end of a
//! local QP, so that the requester's retries, RNR retries, implicit
//! acknowledgements, NAK handling and response checks can be observed.

use crate::harness::{address_pair, assert_wc, wait_wc, ALL, PORT};
use crate::proto::ConnOpts;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;
use urdma::{
    Cq, Device, DeviceConfig, Endpoint, Gid, Mr, Mtu, Qp, QpInitAttr, QpState, SendWr, WcOpcode,
    WcStatus,
};
use urdma_wire::{AckSyndrome, Aeth, Bth, IcrcContext, NakCode, Opcode, PacketRepr};

/// The QP number the raw responder claims.
const RAW_QPN: u32 = 0x99;

/// A local QP connected to a raw UDP socket.
pub struct RawResp {
    sock: UdpSocket,
    dev_addr: SocketAddr,
    /// Local QP.
    pub qp: Qp,
    /// Its CQ.
    pub cq: Cq,
    /// A local MR of 64 KiB.
    pub mr: Mr,
    /// First PSN of the local QP.
    pub base: u32,
    _dev: Device,
}

/// A request as the raw responder saw it.
pub struct Req {
    /// Headers.
    pub repr: PacketRepr,
}

impl RawResp {
    /// Connect a local QP (MTU 1024) with `opts` to a raw socket.
    pub fn new(opts: &ConnOpts) -> RawResp {
        let (ip, raw_ip) = address_pair();
        let sock = UdpSocket::bind(SocketAddr::new(raw_ip, PORT)).expect("bind raw socket");
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let dev = Device::open(DeviceConfig::new(ip)).expect("open device");
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
        let remote = Endpoint {
            gid: Gid::from_ip(raw_ip),
            port: PORT,
            qpn: RAW_QPN,
            psn: 0,
            mtu: Mtu::Mtu1024,
        };
        qp.connect(&remote, &opts.to_options()).unwrap();
        let mr = pd.reg_mr(1 << 16, ALL).unwrap();
        let base = qp.endpoint().psn;
        RawResp {
            sock,
            dev_addr: dev.local_addr(),
            qp,
            cq,
            mr,
            base,
            _dev: dev,
        }
    }

    /// The next request from the local QP, or None after 500 ms.
    pub fn recv(&self) -> Option<Req> {
        let mut buf = vec![0u8; 65536];
        let (n, src) = self.sock.recv_from(&mut buf).ok()?;
        assert_eq!(src, self.dev_addr);
        let ctx = IcrcContext::new(src, self.sock.local_addr().unwrap());
        let p = urdma_wire::parse(&buf[..n], &ctx).expect("malformed request");
        assert_eq!(p.repr.bth.dest_qp, RAW_QPN);
        Some(Req { repr: p.repr })
    }

    /// The next request, which must come.
    pub fn must_recv(&self) -> Req {
        self.recv().expect("no request from the local QP")
    }

    /// Send a response with `repr` and `payload`.
    pub fn reply(&self, repr: &PacketRepr, payload: &[u8]) {
        let ctx = IcrcContext::new(self.sock.local_addr().unwrap(), self.dev_addr);
        let d = urdma_wire::build(repr, payload, &ctx).unwrap();
        self.sock.send_to(&d, self.dev_addr).unwrap();
    }

    /// Send an ACK or NAK for `psn`.
    pub fn aeth(&self, op: Opcode, psn: u32, syndrome: AckSyndrome, msn: u32) {
        let mut r = PacketRepr::new(Bth::new(op, self.qp.qpn(), psn));
        r.aeth = Some(Aeth { syndrome, msn });
        self.reply(&r, &[]);
    }

    /// The PSN `k` packets after the first.
    pub fn at(&self, k: u32) -> u32 {
        (self.base + k) & urdma_wire::PSN_MASK
    }

    /// ACK `psn`.
    pub fn ack(&self, psn: u32, msn: u32) {
        self.aeth(Opcode::RcAck, psn, AckSyndrome::Ack { credits: 31 }, msn);
    }
}

/// Nobody answers: retry_cnt 2 means 3 transmissions, then RETRY_EXC_ERR.
pub fn retry_exceeded() {
    let opts = ConnOpts {
        retry_cnt: Some(2),
        timeout: Some(10),
        ..ConnOpts::default()
    };
    let r = RawResp::new(&opts);
    r.qp.post_send(SendWr::send(1, &[r.mr.slice(0, 10).unwrap()]))
        .unwrap();
    let mut psns = Vec::new();
    while let Some(req) = r.recv() {
        psns.push(req.repr.bth.psn);
    }
    assert_wc(&wait_wc(&r.cq), 1, WcStatus::RetryExcErr, WcOpcode::Send);
    assert_eq!(psns.len(), 3, "transmissions of the SEND: {psns:?}");
    assert!(psns.iter().all(|&p| p == psns[0]));
    assert_eq!(r.qp.query().unwrap().qp_state, QpState::Err);
}

/// Every try answered with an RNR NAK: rnr_retry 3 means 4 transmissions.
pub fn rnr_retry_count() {
    let opts = ConnOpts {
        rnr_retry: Some(3),
        ..ConnOpts::default()
    };
    let r = RawResp::new(&opts);
    r.qp.post_send(SendWr::send(1, &[r.mr.slice(0, 10).unwrap()]))
        .unwrap();
    let mut tries = 0;
    while let Some(req) = r.recv() {
        tries += 1;
        let nak = AckSyndrome::RnrNak { timer: 1 };
        r.aeth(Opcode::RcAck, req.repr.bth.psn, nak, 0);
    }
    assert_wc(&wait_wc(&r.cq), 1, WcStatus::RnrRetryExcErr, WcOpcode::Send);
    assert_eq!(tries, 4, "transmissions with rnr_retry 3");
}

/// One ACK of the last PSN completes every earlier WR; a READ response
/// implicitly acknowledges the WRITE before it.
pub fn implicit_ack() {
    let r = RawResp::new(&ConnOpts::mtu(1024));
    let s = [r.mr.slice(0, 100).unwrap()];
    r.qp.post_send(SendWr::write(1, &s, 0x1000, 5)).unwrap();
    r.qp.post_send(SendWr::write(2, &s, 0x1000, 5)).unwrap();
    r.qp.post_send(SendWr::send(3, &s)).unwrap();
    let psns: Vec<u32> = (0..3).map(|_| r.must_recv().repr.bth.psn).collect();
    assert_eq!(psns, [r.at(0), r.at(1), r.at(2)]);
    r.ack(r.at(2), 3);
    for (id, op) in [
        (1, WcOpcode::RdmaWrite),
        (2, WcOpcode::RdmaWrite),
        (3, WcOpcode::Send),
    ] {
        assert_wc(&wait_wc(&r.cq), id, WcStatus::Success, op);
    }
    r.qp.post_send(SendWr::write(4, &s, 0x1000, 5)).unwrap();
    let dst = [r.mr.slice(1000, 8).unwrap()];
    r.qp.post_send(SendWr::read(5, &dst, 0x2000, 5)).unwrap();
    assert_eq!(r.must_recv().repr.bth.psn, r.at(3));
    let rd = r.must_recv();
    assert_eq!(
        (rd.repr.bth.opcode, rd.repr.bth.psn),
        (Opcode::RcReadRequest, r.at(4))
    );
    let mut resp = PacketRepr::new(Bth::new(Opcode::RcReadResponseOnly, r.qp.qpn(), r.at(4)));
    resp.aeth = Some(Aeth {
        syndrome: AckSyndrome::Ack { credits: 31 },
        msn: 5,
    });
    r.reply(&resp, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_wc(&wait_wc(&r.cq), 4, WcStatus::Success, WcOpcode::RdmaWrite);
    let wc = wait_wc(&r.cq);
    assert_wc(&wc, 5, WcStatus::Success, WcOpcode::RdmaRead);
    assert_eq!(wc.byte_len, 8);
    let mut b = [0u8; 8];
    r.mr.read_at(1000, &mut b).unwrap();
    assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// A PSN sequence NAK in the middle of a 3-packet WRITE: the requester
/// goes back to that PSN and resends the rest.
pub fn seq_nak_resend() {
    let r = RawResp::new(&ConnOpts::mtu(1024));
    let s = [r.mr.slice(0, 3000).unwrap()];
    r.qp.post_send(SendWr::write(1, &s, 0x1000, 5)).unwrap();
    let first: Vec<u32> = (0..3).map(|_| r.must_recv().repr.bth.psn).collect();
    assert_eq!(first, [r.at(0), r.at(1), r.at(2)]);
    r.aeth(
        Opcode::RcAck,
        r.at(1),
        AckSyndrome::Nak(NakCode::PsnSequenceError),
        0,
    );
    let again: Vec<(u32, Opcode)> = (0..2)
        .map(|_| r.must_recv())
        .map(|q| (q.repr.bth.psn, q.repr.bth.opcode))
        .collect();
    assert_eq!(
        again,
        [
            (r.at(1), Opcode::RcWriteMiddle),
            (r.at(2), Opcode::RcWriteLast)
        ]
    );
    r.ack(r.at(2), 1);
    assert_wc(&wait_wc(&r.cq), 1, WcStatus::Success, WcOpcode::RdmaWrite);
}

/// An ACK for a PSN never sent is ignored; a NAK for remote access
/// fails the WR with REM_ACCESS_ERR and flushes the one behind it.
pub fn ghost_ack_and_access_nak() {
    let r = RawResp::new(&ConnOpts::mtu(1024));
    r.ack(r.at(1000), 9);
    let s = [r.mr.slice(0, 10).unwrap()];
    r.qp.post_send(SendWr::write(1, &s, 0x1000, 5)).unwrap();
    r.qp.post_send(SendWr::write(2, &s, 0x1000, 5)).unwrap();
    assert_eq!(r.must_recv().repr.bth.psn, r.at(0));
    assert_eq!(r.must_recv().repr.bth.psn, r.at(1));
    assert!(r.cq.poll(2).unwrap().is_empty(), "ghost ACK completed a WR");
    r.aeth(
        Opcode::RcAck,
        r.at(0),
        AckSyndrome::Nak(NakCode::RemoteAccessError),
        0,
    );
    let wc = wait_wc(&r.cq);
    assert_wc(&wc, 1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
    assert_wc(
        &wait_wc(&r.cq),
        2,
        WcStatus::WrFlushErr,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(r.qp.query().unwrap().qp_state, QpState::Err);
}

/// A READ response shorter than asked fails the READ with BAD_RESP_ERR
/// and writes nothing past the data received.
pub fn short_read_response() {
    let r = RawResp::new(&ConnOpts::mtu(1024));
    r.mr.write_at(0, &[0xEE; 200]).unwrap();
    r.qp.post_send(SendWr::read(1, &[r.mr.slice(0, 100).unwrap()], 0x2000, 5))
        .unwrap();
    let rd = r.must_recv();
    let mut resp = PacketRepr::new(Bth::new(
        Opcode::RcReadResponseOnly,
        r.qp.qpn(),
        rd.repr.bth.psn,
    ));
    resp.aeth = Some(Aeth {
        syndrome: AckSyndrome::Ack { credits: 31 },
        msn: 1,
    });
    r.reply(&resp, &[1; 50]);
    assert_wc(&wait_wc(&r.cq), 1, WcStatus::BadRespErr, WcOpcode::RdmaRead);
    let mut b = [0u8; 200];
    r.mr.read_at(0, &mut b).unwrap();
    assert!(
        b[100..].iter().all(|&x| x == 0xEE),
        "bytes past the READ buffer written"
    );
}

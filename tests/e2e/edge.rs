//! Edge cases: zero-length operations, lengths at exact MTU multiples,
//! PSN wrap-around, a small READ/atomic credit, and RNR with WRs queued
//! behind the stalled SEND.

use crate::harness::{
    assert_wc, check, expect_ok, fill, packet_payload, sge, wait_wc, Fixture, Link, ALL,
};
use crate::ops::{assert_recv, check_peer_region, peer_u64, BG};
use crate::proto::{Cmd, ConnOpts, QpInfo};
use std::time::Duration;
use urdma::{
    AddressVector, Mtu, QpAttr, QpAttrMask as M, QpInitAttr, QpState, SendWr, WcOpcode, WcStatus,
};

/// Zero-length SEND, SEND_WITH_IMM, WRITE (with a bogus rkey, which IBTA
/// does not check for zero-length transfers), WRITE_WITH_IMM and READ.
pub fn zero_length() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let me = (l.pqpn, l.qp.qpn());
    let rq = f.peer_mr(64, ALL);
    f.peer.fill(rq.id, 0, 64, BG);
    for i in 0..3 {
        f.peer.post_recv(l.pqp, 10 + i, &[sge(&rq, 0, 64)]);
    }
    let buf = f.mr(64, ALL);
    fill(&buf, 0, 64, BG);
    l.qp.post_send(SendWr::send(1, &[])).unwrap();
    expect_ok(&f.cq, 1, WcOpcode::Send);
    l.qp.post_send(SendWr::send_imm(2, &[buf.slice(3, 0).unwrap()], 22))
        .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::Send);
    l.qp.post_send(SendWr::write(3, &[], 0xdead_0000, 0x1234))
        .unwrap();
    expect_ok(&f.cq, 3, WcOpcode::RdmaWrite);
    l.qp.post_send(SendWr::write_imm(4, &[], rq.addr, rq.rkey, 44))
        .unwrap();
    expect_ok(&f.cq, 4, WcOpcode::RdmaWrite);
    l.qp.post_send(SendWr::read(5, &[], rq.addr, rq.rkey))
        .unwrap();
    let wc = expect_ok(&f.cq, 5, WcOpcode::RdmaRead);
    assert_eq!(wc.byte_len, 0);
    let wcs = f.peer.poll(f.pcq, 3);
    assert_recv(&wcs[0], 10, WcOpcode::Recv, 0, me, None);
    assert_recv(&wcs[1], 11, WcOpcode::Recv, 0, me, Some(22));
    assert_recv(&wcs[2], 12, WcOpcode::RecvRdmaWithImm, 0, me, Some(44));
    assert_eq!(f.peer.check(rq.id, 0, 64, BG, 0), None);
    assert_eq!(check(&buf, 0, 64, BG, 0), None);
    assert_eq!(l.qp.query().unwrap().qp_state, QpState::Rts);
}

/// Messages of exactly 1, 2 and 3 MTUs and one byte either side, at
/// MTU 1024: SEND, WRITE and READ.
pub fn mtu_multiples() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::mtu(1024));
    let size = 8192;
    let local = f.mr(size, ALL);
    let remote = f.peer_mr(size, ALL);
    let lens = [1023, 1024, 1025, 2047, 2048, 2049, 3072];
    for (k, &len) in lens.iter().enumerate() {
        let seed = 200 + k as u64;
        fill(&local, 0, len, seed);
        f.peer.fill(remote.id, 0, size, BG);
        f.peer.post_recv(l.pqp, k as u64, &[sge(&remote, 1, len)]);
        l.qp.post_send(SendWr::send(1, &[local.slice(0, len).unwrap()]))
            .unwrap();
        expect_ok(&f.cq, 1, WcOpcode::Send);
        let wcs = f.peer.poll(f.pcq, 1);
        assert_recv(
            &wcs[0],
            k as u64,
            WcOpcode::Recv,
            len,
            (l.pqpn, l.qp.qpn()),
            None,
        );
        check_peer_region(&mut f, remote.id, size, 1, len, seed);
        f.peer.fill(remote.id, 0, size, BG);
        let s = [local.slice(0, len).unwrap()];
        l.qp.post_send(SendWr::write(2, &s, remote.addr + 4096, remote.rkey))
            .unwrap();
        expect_ok(&f.cq, 2, WcOpcode::RdmaWrite);
        check_peer_region(&mut f, remote.id, size, 4096, len, seed);
        let s = [local.slice(4096, len).unwrap()];
        l.qp.post_send(SendWr::read(3, &s, remote.addr + 4096, remote.rkey))
            .unwrap();
        assert_eq!(
            expect_ok(&f.cq, 3, WcOpcode::RdmaRead).byte_len as usize,
            len
        );
        assert_eq!(check(&local, 4096, len, seed, 0), None);
    }
}

/// Connect a local QP by hand with send PSN `sq_psn` (so that the peer's
/// responder expects it) to a new peer QP.
fn connect_at_psn(f: &mut Fixture, sq_psn: u32) -> Link {
    let cq = f.cq.clone();
    let qp = f.pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let p: QpInfo = f.peer.ok(&Cmd::CreateQp {
        pd: f.ppd,
        cq: f.pcq,
        cap: None,
    });
    let mut ep = qp.endpoint();
    ep.psn = sq_psn;
    f.peer.ok::<()>(&Cmd::Connect {
        qp: p.id,
        remote: ep,
        opts: ConnOpts::mtu(1024),
    });
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    qp.modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = p.endpoint.qpn;
    a.rq_psn = p.endpoint.psn;
    a.ah_attr = AddressVector {
        dgid: p.endpoint.gid,
        udp_port: p.endpoint.port,
        ..AddressVector::default()
    };
    a.max_dest_rd_atomic = 16;
    let rtr = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC;
    qp.modify(&a, M::STATE | rtr | M::MIN_RNR_TIMER).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = 16;
    let rts = M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    qp.modify(&a, M::STATE | rts).unwrap();
    Link {
        qp,
        pqp: p.id,
        pqpn: p.endpoint.qpn,
    }
}

/// Transfers whose PSNs wrap from 2^24 - 1 to 0.
pub fn psn_wraparound() {
    let mut f = Fixture::new();
    let l = connect_at_psn(&mut f, 0xFF_FFF0);
    // 40 packets: PSN 0xFFFFF0 .. 0x000017.
    let len = 40 * packet_payload(1024);
    let size = (1 << 18).max(len + 64);
    let local = f.mr(size, ALL);
    fill(&local, 0, size, 300);
    let remote = f.peer_mr(size, ALL);
    f.peer.fill(remote.id, 0, size, BG);
    let s = [local.slice(0, len).unwrap()];
    l.qp.post_send(SendWr::write(1, &s, remote.addr + 7, remote.rkey))
        .unwrap();
    expect_ok(&f.cq, 1, WcOpcode::RdmaWrite);
    check_peer_region(&mut f, remote.id, size, 7, len, 300);
    let sq = l.qp.query().unwrap().sq_psn;
    assert_eq!(sq, 0x18, "sq_psn after wrapping");
    assert_eq!(
        f.peer.query(l.pqp).rq_psn,
        0x18,
        "peer rq_psn after wrapping"
    );
    // READ and an atomic straddling nothing special, then more SENDs.
    let s = [local.slice(100_000, 30_000).unwrap()];
    l.qp.post_send(SendWr::read(2, &s, remote.addr + 7, remote.rkey))
        .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::RdmaRead);
    assert_eq!(check(&local, 100_000, 30_000, 300, 0), None);
    let r = f.peer_mr(8, ALL);
    l.qp.post_send(SendWr::fetch_add(
        3,
        &local.slice(0, 8).unwrap(),
        r.addr,
        r.rkey,
        9,
    ))
    .unwrap();
    expect_ok(&f.cq, 3, WcOpcode::FetchAdd);
    assert_eq!(peer_u64(&mut f, r.id, 0), 9);
}

/// The same wrap with a READ spanning it.
pub fn psn_wraparound_read() {
    let mut f = Fixture::new();
    // Two PSNs before the wrap: the READ's responses cross it in pieces
    // of the path MTU and of the internal unit alike.
    let l = connect_at_psn(&mut f, 0xFF_FFFE);
    let remote = f.peer_mr(1 << 17, ALL);
    f.peer.fill(remote.id, 0, 1 << 17, 301);
    let local = f.mr(1 << 17, ALL);
    let s = [local.slice(1, 100_000).unwrap()];
    l.qp.post_send(SendWr::read(1, &s, remote.addr + 2, remote.rkey))
        .unwrap();
    assert_eq!(expect_ok(&f.cq, 1, WcOpcode::RdmaRead).byte_len, 100_000);
    assert_eq!(check(&local, 1, 100_000, 301, 2), None);
}

/// max_rd_atomic 1: many READs and atomics queue behind one another.
pub fn small_rd_atomic_credit() {
    let mut f = Fixture::new();
    let opts = ConnOpts {
        max_rd_atomic: Some(1),
        ..ConnOpts::default()
    };
    let l = f.connect(&opts);
    let remote = f.peer_mr(1 << 20, ALL);
    f.peer.fill(remote.id, 0, 1 << 20, 400);
    let local = f.mr(1 << 20, ALL);
    for i in 0..8u64 {
        let off = i as usize * 100_000;
        let s = [local.slice(off, 99_999).unwrap()];
        l.qp.post_send(SendWr::read(
            2 * i,
            &s,
            remote.addr + off as u64,
            remote.rkey,
        ))
        .unwrap();
        let r = local.slice(900_000 + i as usize * 8, 8).unwrap();
        let wr = SendWr::fetch_add(2 * i + 1, &r, remote.addr + 1_000_000, remote.rkey, 1);
        l.qp.post_send(wr).unwrap();
    }
    let base = u64::from_ne_bytes(
        crate::pattern::pattern(400, 1_000_000, 8)
            .try_into()
            .unwrap(),
    );
    for i in 0..8u64 {
        expect_ok(&f.cq, 2 * i, WcOpcode::RdmaRead);
        expect_ok(&f.cq, 2 * i + 1, WcOpcode::FetchAdd);
        let off = i as usize * 100_000;
        assert_eq!(
            check(&local, off, 99_999, 400, off as u64),
            None,
            "READ {i}"
        );
        let got = crate::ops::local_u64(&local, 900_000 + i as usize * 8);
        assert_eq!(got, base.wrapping_add(i), "fetch-add {i}");
    }
}

/// RNR on a SEND with a WRITE and another SEND queued behind it: once
/// receives are posted, everything completes in order.
pub fn rnr_with_queued_work() {
    let mut f = Fixture::new();
    let theirs = ConnOpts {
        min_rnr_timer: Some(12),
        ..ConnOpts::default()
    };
    let cq = f.cq.clone();
    let pcq = f.pcq;
    let l = f.connect_on(&cq, pcq, &ConnOpts::default(), &theirs);
    let local = f.mr(1 << 16, ALL);
    fill(&local, 0, 1 << 16, 500);
    let remote = f.peer_mr(1 << 16, ALL);
    f.peer.fill(remote.id, 0, 1 << 16, BG);
    l.qp.post_send(SendWr::send(1, &[local.slice(0, 5000).unwrap()]))
        .unwrap();
    let s = [local.slice(0, 20_000).unwrap()];
    l.qp.post_send(SendWr::write(2, &s, remote.addr + 30_000, remote.rkey))
        .unwrap();
    l.qp.post_send(SendWr::send_imm(3, &[local.slice(5000, 3000).unwrap()], 3))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        f.cq.poll(4).unwrap().is_empty(),
        "completed without receives"
    );
    f.peer.post_recv(l.pqp, 10, &[sge(&remote, 0, 5000)]);
    f.peer.post_recv(l.pqp, 11, &[sge(&remote, 10_000, 5000)]);
    for (id, op) in [
        (1, WcOpcode::Send),
        (2, WcOpcode::RdmaWrite),
        (3, WcOpcode::Send),
    ] {
        assert_wc(&wait_wc(&f.cq), id, WcStatus::Success, op);
    }
    let wcs = f.peer.poll(f.pcq, 2);
    let qps = (l.pqpn, l.qp.qpn());
    assert_recv(&wcs[0], 10, WcOpcode::Recv, 5000, qps, None);
    assert_recv(&wcs[1], 11, WcOpcode::Recv, 3000, qps, Some(3));
    assert_eq!(f.peer.check(remote.id, 0, 5000, 500, 0), None);
    assert_eq!(f.peer.check(remote.id, 10_000, 3000, 500, 5000), None);
    assert_eq!(f.peer.check(remote.id, 30_000, 20_000, 500, 0), None);
}

/// RDMA WRITE with immediate that meets no receive (RNR NAK), retried
/// until a receive is posted 100 ms later: single- and multi-packet.
pub fn rnr_write_imm() {
    let mut f = Fixture::new();
    let theirs = ConnOpts {
        min_rnr_timer: Some(12),
        ..ConnOpts::mtu(1024)
    };
    let local = f.mr(1 << 16, ALL);
    fill(&local, 0, 1 << 16, 600);
    let remote = f.peer_mr(1 << 16, ALL);
    let rq = f.peer_mr(64, ALL);
    for (k, len) in [100usize, 10_000].into_iter().enumerate() {
        let (cq, pcq) = (f.cq.clone(), f.pcq);
        let l = f.connect_on(&cq, pcq, &ConnOpts::mtu(1024), &theirs);
        f.peer.fill(remote.id, 0, 1 << 16, BG);
        let s = [local.slice(0, len).unwrap()];
        let imm = 0x100 + k as u32;
        let wr = SendWr::write_imm(1, &s, remote.addr + 8, remote.rkey, imm);
        l.qp.post_send(wr).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let early = f.cq.poll(1).unwrap();
        assert!(early.is_empty(), "{len} bytes: completed early {early:?}");
        f.peer.post_recv(l.pqp, 5, &[sge(&rq, 0, 64)]);
        expect_ok(&f.cq, 1, WcOpcode::RdmaWrite);
        let wcs = f.peer.poll(f.pcq, 1);
        let qps = (l.pqpn, l.qp.qpn());
        assert_recv(&wcs[0], 5, WcOpcode::RecvRdmaWithImm, len, qps, Some(imm));
        check_peer_region(&mut f, remote.id, 1 << 16, 8, len, 600);
    }
}

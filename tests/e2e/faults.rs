//! Faults: a full CQ, a SEND longer than the receive buffer, malformed
//! datagrams, and receiver-not-ready with and without retries.

use crate::harness::{assert_wc, expect_ok, fill, sge, wait_wc, Fixture, PORT, WAIT};
use crate::ops::peer_u64;
use crate::proto::{Cmd, ConnOpts};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use urdma::engine::{Counter, Counters};
use urdma::{AsyncEventKind, Error, QpState, SendWr, WcOpcode, WcStatus};
use urdma_wire::{Bth, IcrcContext, Opcode, PacketRepr, Reth};

/// Every access right.
const ALL: urdma::AccessFlags = crate::harness::ALL;

/// A CQ asked for 2 entries (capacity 3, ring of 4) receiving 6
/// completions: 4 entries, then CqOverrun.
pub fn cq_overrun() {
    let mut f = Fixture::new();
    let small = f.dev.create_cq(2).unwrap();
    // Asked for 2: the capacity is 3 and the ring holds 4.
    assert_eq!(small.capacity(), 3);
    let held = small.capacity() as u64 + 1;
    let pcq = f.pcq;
    let l = f.connect_on(&small, pcq, &ConnOpts::default(), &ConnOpts::default());
    let src = f.mr(4096, ALL);
    let dst = f.peer_mr(4096, ALL);
    for i in 0..held + 2 {
        let s = [src.slice(i as usize, 1).unwrap()];
        l.qp.post_send(SendWr::write(i, &s, dst.addr + i, dst.rkey))
            .unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while l.qp.query().unwrap().qp_state != QpState::Err {
        assert!(Instant::now() < deadline, "QP never noticed the overrun");
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = small.poll(10).unwrap();
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..held).collect::<Vec<_>>());
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    assert!(matches!(small.poll(10), Err(Error::CqOverrun)));
    assert!(
        matches!(small.poll(10), Err(Error::CqOverrun)),
        "overrun is sticky"
    );
    let ev = f.dev.next_event(Some(WAIT)).expect("an async event");
    assert_eq!((ev.kind, ev.object), (AsyncEventKind::CqErr, small.cqn()));
}

/// A SEND longer than the posted receive: LOC_LEN_ERR at the receiver,
/// REM_INV_REQ_ERR at the sender; single- and multi-packet.
pub fn send_too_long() {
    let mut f = Fixture::new();
    let src = f.mr(1 << 16, ALL);
    fill(&src, 0, 1 << 16, 9);
    let rq = f.peer_mr(1 << 16, ALL);
    for (len, cap) in [(200usize, 100usize), (10_000, 5_000), (4097, 4096)] {
        let l = f.connect(&ConnOpts::mtu(1024));
        f.peer.post_recv(l.pqp, 7, &[sge(&rq, 0, cap)]);
        l.qp.post_send(SendWr::send(1, &[src.slice(0, len).unwrap()]))
            .unwrap();
        let wc = wait_wc(&f.cq);
        assert_wc(&wc, 1, WcStatus::RemInvReqErr, WcOpcode::Send);
        let wcs = f.peer.poll(f.pcq, 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (7, WcStatus::LocLenErr),
            "{wcs:?}"
        );
        assert_eq!(wcs[0].qp_num, l.pqpn);
        assert_eq!(l.qp.query().unwrap().qp_state, QpState::Err);
        assert_eq!(f.peer.query(l.pqp).qp_state, QpState::Err);
        let c: Counters = f.peer.ok(&Cmd::Counters);
        assert!(c[Counter::ErrorNaksSent] > 0);
    }
}

/// Wait until the peer's counters satisfy `ok`, up to 5 s; return them.
fn peer_counters_until(f: &mut Fixture, ok: impl Fn(&Counters) -> bool) -> Counters {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c: Counters = f.peer.ok(&Cmd::Counters);
        if ok(&c) || Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Recompute the ICRC of a datagram in place.
fn reseal(d: &mut [u8], ctx: &IcrcContext) {
    let n = d.len() - 4;
    let icrc = urdma_wire::compute_icrc(&d[..n], ctx).unwrap();
    d[n..].copy_from_slice(&icrc.to_le_bytes());
}

/// Raw datagrams: truncated, bad ICRC, unknown opcode, bad version,
/// garbage, and a well-formed WRITE from a stranger's address; the peer counts
/// them, changes no memory, and a normal transfer works afterwards.
pub fn malformed_packets() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let mr = f.peer_mr(4096, ALL);
    f.peer.fill(mr.id, 0, 4096, 0x42);
    let before_mem = f.peer.digest(mr.id, 0, 4096);
    let before: Counters = f.peer.ok(&Cmd::Counters);
    let sock = UdpSocket::bind(SocketAddr::new(f.ip, 0)).unwrap();
    let to = SocketAddr::new(f.peer_ip, PORT);
    let ctx = IcrcContext::new(sock.local_addr().unwrap(), to);
    let psn = f.peer.query(l.pqp).rq_psn;
    let mut write = PacketRepr::new(Bth::new(Opcode::RcWriteOnly, l.pqpn, psn));
    write.reth = Some(Reth {
        va: mr.addr,
        rkey: mr.rkey,
        dma_len: 16,
    });
    let good = urdma_wire::build(&write, &[0xEE; 16], &ctx).unwrap();
    let mut bad_icrc = good.clone();
    *bad_icrc.last_mut().unwrap() ^= 0xFF;
    let mut flipped = good.clone();
    flipped[40] ^= 0x01; // payload bit flip, ICRC kept
    let mut unknown = good.clone();
    unknown[0] = 0x1F;
    reseal(&mut unknown, &ctx);
    let mut version = good.clone();
    version[1] |= 0x03;
    reseal(&mut version, &ctx);
    let garbage: Vec<u8> = crate::pattern::pattern(0xBAD, 0, 300);
    // (datagram, counts as ICRC error)
    let header = [vec![1u8, 2, 3, 4, 5], good[..15].to_vec(), unknown, version];
    let icrc = [bad_icrc, flipped, garbage];
    for d in header.iter().chain(icrc.iter()) {
        sock.send_to(d, to).unwrap();
    }
    // The well-formed WRITE from another address (the same subnet's next
    // host) must be ignored: an RC QP takes packets from its peer's
    // address only (any UDP source port, so not the port, tells them).
    let stranger_ip = match f.ip {
        std::net::IpAddr::V4(v4) => {
            let o = v4.octets();
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(o[0], o[1], o[2], 3))
        }
        other => other,
    };
    assert_ne!(stranger_ip, f.ip);
    let stranger = UdpSocket::bind(SocketAddr::new(stranger_ip, 0)).unwrap();
    let sctx = IcrcContext::new(stranger.local_addr().unwrap(), to);
    let from_stranger = urdma_wire::build(&write, &[0xEE; 16], &sctx).unwrap();
    stranger.send_to(&from_stranger, to).unwrap();
    let (h, i) = (header.len() as u64, icrc.len() as u64);
    let c = peer_counters_until(&mut f, |c| {
        c[Counter::HeaderErrors] >= before[Counter::HeaderErrors] + h
            && c[Counter::IcrcErrors] >= before[Counter::IcrcErrors] + i
            && c[Counter::Dropped] > before[Counter::Dropped]
    });
    assert_eq!(
        c[Counter::HeaderErrors] - before[Counter::HeaderErrors],
        h,
        "{c:?}"
    );
    assert_eq!(
        c[Counter::IcrcErrors] - before[Counter::IcrcErrors],
        i,
        "{c:?}"
    );
    assert!(
        c[Counter::Dropped] > before[Counter::Dropped],
        "stranger's WRITE not dropped: {c:?}"
    );
    assert_eq!(f.peer.digest(mr.id, 0, 4096), before_mem, "memory changed");
    assert_eq!(f.peer.query(l.pqp).qp_state, QpState::Rts);
    // Normal traffic still works.
    let src = f.mr(8192, ALL);
    fill(&src, 0, 8192, 12);
    let s = [src.slice(0, 4096).unwrap()];
    l.qp.post_send(SendWr::write(1, &s, mr.addr, mr.rkey))
        .unwrap();
    expect_ok(&f.cq, 1, WcOpcode::RdmaWrite);
    assert_eq!(f.peer.check(mr.id, 0, 4096, 12, 0), None);
    let r = f.peer_mr(64, ALL);
    l.qp.post_send(SendWr::fetch_add(
        2,
        &src.slice(0, 8).unwrap(),
        r.addr,
        r.rkey,
        3,
    ))
    .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::FetchAdd);
    assert_eq!(peer_u64(&mut f, r.id, 0), 3);
}

/// SEND with no receive posted and rnr_retry 0: RNR_RETRY_EXC_ERR.
pub fn rnr_retry_exceeded() {
    let mut f = Fixture::new();
    let mine = ConnOpts {
        rnr_retry: Some(0),
        ..ConnOpts::default()
    };
    let cq = f.cq.clone();
    let pcq = f.pcq;
    let l = f.connect_on(&cq, pcq, &mine, &ConnOpts::default());
    let src = f.mr(64, ALL);
    l.qp.post_send(SendWr::send(1, &[src.slice(0, 64).unwrap()]))
        .unwrap();
    assert_wc(&wait_wc(&f.cq), 1, WcStatus::RnrRetryExcErr, WcOpcode::Send);
    assert_eq!(l.qp.query().unwrap().qp_state, QpState::Err);
    assert!(f.dev.counters()[Counter::RnrNaksReceived] >= 1);
    let c: Counters = f.peer.ok(&Cmd::Counters);
    assert!(c[Counter::RnrNaksSent] >= 1);
}

/// SEND with no receive posted and rnr_retry 7; the receive comes 200 ms
/// later and the SEND succeeds.
pub fn rnr_retry_success() {
    let mut f = Fixture::new();
    let theirs = ConnOpts {
        min_rnr_timer: Some(14), // 1.28 ms between retries
        ..ConnOpts::default()
    };
    let mine = ConnOpts {
        rnr_retry: Some(7),
        ..ConnOpts::default()
    };
    let cq = f.cq.clone();
    let pcq = f.pcq;
    let l = f.connect_on(&cq, pcq, &mine, &theirs);
    let src = f.mr(10_000, ALL);
    fill(&src, 0, 10_000, 13);
    l.qp.post_send(SendWr::send(1, &[src.slice(0, 10_000).unwrap()]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        f.cq.poll(1).unwrap().is_empty(),
        "SEND completed without a receive"
    );
    let rq = f.peer_mr(10_000, ALL);
    f.peer.post_recv(l.pqp, 5, &[sge(&rq, 0, 10_000)]);
    expect_ok(&f.cq, 1, WcOpcode::Send);
    let wcs = f.peer.poll(f.pcq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (5, WcStatus::Success, 10_000)
    );
    assert_eq!(f.peer.check(rq.id, 0, 10_000, 13, 0), None);
    assert!(f.dev.counters()[Counter::RnrNaksReceived] >= 2);
}

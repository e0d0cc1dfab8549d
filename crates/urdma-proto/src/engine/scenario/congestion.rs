//! Congestion notification between two engines: a marked packet makes the
//! receiving QP send a CNP (at most one per interval), a CNP paces the
//! sending QP.

use super::{opts, Pair, A, B};
use crate::engine::congestion::CNP_INTERVAL_NS;
use crate::engine::timer::TimerKind;
use crate::engine::{Counter, SendOp};

/// Hand B the next packet A queued, marked "congestion experienced".
fn deliver_marked(p: &mut Pair) {
    let t = p.n[A].out.pop_front().expect("A queued a packet");
    let src = p.n[A].addr();
    let now = p.now;
    p.n[B]
        .eng
        .handle_batch_ecn(now, [(src, t.data.as_slice(), true)]);
    p.n[B].collect();
}

/// Rule: a packet marked CE makes its QP send the peer QP a CNP (BTH
/// opcode 0x81, BECN, the peer's QP number), once per 50 us however many
/// marked packets come; the CNP makes the peer's QP paced, so that a long
/// burst of requests leaves as the token bucket allows, resumed by the
/// pacing timer.
#[test]
fn marked_packets_bring_a_cnp_that_paces_the_sender() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 3000), (va, rkey));
    assert_eq!(p.n[A].out.len(), 3);

    p.advance_to(1_000);
    deliver_marked(&mut p);
    let cnp = p.n[B].out.pop_back().expect("a CNP");
    assert_eq!(cnp.dst, p.n[A].addr());
    assert_eq!(urdma_wire::cnp::parse_cnp(&cnp.data), Ok(p.n[A].qpn));
    assert_eq!(cnp.data[4] & 0x40, 0x40, "BECN");
    assert_eq!(p.n[B].count(Counter::EcnMarked), 1);
    assert_eq!(p.n[B].count(Counter::CnpSent), 1);

    // A second mark within the interval: no second CNP.
    p.advance_to(1_000 + CNP_INTERVAL_NS / 2);
    deliver_marked(&mut p);
    assert_eq!(p.n[B].count(Counter::EcnMarked), 2);
    assert_eq!(p.n[B].count(Counter::CnpSent), 1);
    p.deliver_all(A);
    p.settle();
    assert_eq!(p.n[A].send_wcs().len(), 1, "the WRITE completed");
    // Open the send window fully (slow start) with a longer transfer.
    for i in 0..8 {
        p.n[A].post(p.now, 2 + i, SendOp::Write, (0, 60 * 1024), (va, rkey));
    }
    p.settle();

    // The CNP reaches A: its QP is paced from now on.
    let now = p.now;
    let src = p.n[B].addr();
    p.n[A].input(now, src, &cnp.data);
    assert_eq!(p.n[A].count(Counter::CnpReceived), 1);
    let qpn = p.n[A].qpn;
    let rate = p.n[A].eng.qps[&qpn].req.rate.rate();
    assert!(rate.is_some(), "paced after a CNP");

    // Far more than one burst of the bucket: part leaves now, the rest
    // when the pacing timer lets it.
    for i in 0..4 {
        p.n[A].post(now, 10 + i, SendOp::Write, (0, 60 * 1024), (va, rkey));
    }
    let first = p.n[A].out.len();
    assert!(first > 0 && first < 240, "{first} packets left at once");
    let pace = p.n[A].eng.qps[&qpn].timers.deadline(TimerKind::Pace);
    assert!(pace.is_some_and(|t| t > now), "pacing timer set: {pace:?}");
    p.take_all(A);
    p.advance_to(pace.unwrap());
    p.timers();
    assert!(!p.n[A].out.is_empty(), "the timer resumes sending");
}

/// Rule: a CNP that names no QP of the receiver, or comes from another
/// address than the QP's peer, is dropped and counted, changing nothing.
#[test]
fn stray_cnps_change_nothing() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let qpn = p.n[A].qpn;
    let ctx = urdma_wire::IcrcContext::new(p.n[B].addr(), p.n[A].addr());
    let unknown = urdma_wire::cnp::build_cnp(qpn ^ 0x55, 0xffff, &ctx).unwrap();
    p.inject(A, &unknown);
    assert_eq!(p.n[A].eng.counters()[Counter::Dropped], 1);
    let stranger: std::net::SocketAddr = "127.0.0.9:4791".parse().unwrap();
    let ctx = urdma_wire::IcrcContext::new(stranger, p.n[A].addr());
    let foreign = urdma_wire::cnp::build_cnp(qpn, 0xffff, &ctx).unwrap();
    let now = p.now;
    p.n[A].input(now, stranger, &foreign);
    assert_eq!(p.n[A].eng.counters()[Counter::Dropped], 2);
    let mut bad = urdma_wire::cnp::build_cnp(qpn, 0xffff, &ctx).unwrap();
    bad[20] ^= 1;
    p.n[A].input(now, stranger, &bad);
    assert_eq!(p.n[A].eng.counters()[Counter::IcrcErrors], 1);
    assert_eq!(p.n[A].count(Counter::CnpReceived), 0);
    assert!(p.n[A].eng.qps[&qpn].req.rate.rate().is_none());
}

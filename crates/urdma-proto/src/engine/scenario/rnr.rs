//! Receiver-not-ready: RNR NAKs, the requester's back-off and its RNR
//! retry count.

use super::{ack_timeout, opts, pattern, psn_ops, wc_summary, Pair, Solo, A, B};
use crate::engine::{Counter, SendOp};
use crate::types::{QpState, WcOpcode, WcStatus};
use crate::verbs::ConnectOptions;
use urdma_wire::{rnr_timer_micros, AckSyndrome, Opcode};

/// Rule: a SEND that finds no receive WQE is answered with an RNR NAK for
/// its PSN carrying the responder's min_rnr_timer code; the requester then
/// sends nothing for exactly the time that code stands for (no
/// retransmission timer runs meanwhile), resends the SEND with the same
/// PSN, and succeeds once a receive WQE has been posted; each RNR NAK
/// spends one RNR retry. (Go-back-N peers: with selective ones a loss
/// probe timer runs beside the ACK timeout.)
#[test]
fn rnr_nak_backs_off_then_succeeds() {
    let oa = ConnectOptions {
        rnr_retry: 3,
        ..opts()
    };
    let ob = ConnectOptions {
        min_rnr_timer: 4,
        ..opts()
    };
    let wait = rnr_timer_micros(4) * 1000;
    assert_eq!(wait, 40_000);
    let mut p = Pair::new(0x30, &oa, 0x40, &ob).go_back_n();
    let data = pattern(100, 3);
    p.n[A].write(0, &data);
    p.n[A].post(0, 1, SendOp::Send, (0, 100), (0, 0));

    let mut resumed = 0;
    for round in 1..=2u64 {
        p.advance_to(resumed + 1_000);
        let req = p.deliver_all(A);
        assert_eq!(psn_ops(&req), [(0x30, Opcode::RcSendOnly)]);
        let nak = p.n[B].peek();
        assert_eq!(
            (nak[0].opcode(), nak[0].psn(), nak[0].syndrome()),
            (Opcode::RcAck, 0x30, Some(AckSyndrome::RnrNak { timer: 4 }))
        );
        assert_eq!(p.n[B].count(Counter::RnrNaksSent), round);
        assert!(p.n[B].recv_wcs().is_empty());

        let at = resumed + 2_000;
        p.advance_to(at);
        p.deliver_all(B);
        assert_eq!(p.n[A].count(Counter::RnrNaksReceived), round);
        assert!(p.n[A].out.is_empty());
        assert_eq!(p.next_deadline(), Some(at + wait), "RNR wait only");
        p.advance_to(at + wait - 1);
        p.timers();
        assert!(p.n[A].out.is_empty(), "resent before the RNR timer expired");
        resumed = p.fire();
        assert_eq!(resumed, at + wait);
        assert_eq!(p.n[A].peek()[0].psn(), 0x30);
        assert_eq!(p.n[A].count(Counter::Retransmits), round);
        assert_eq!(
            p.n[A].eng.next_deadline(),
            Some(resumed + ack_timeout(10)),
            "the ACK timeout runs again once the SEND is resent"
        );
        if round == 2 {
            p.n[B].post_recv(resumed, 7, 0x800, 200);
        }
    }
    p.advance_to(resumed + 1_000);
    let log = p.settle();
    assert_eq!(log.len(), 2, "the SEND and its ACK");
    assert_eq!(log[1].1.syndrome(), Some(AckSyndrome::Ack { credits: 31 }));
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    let rwc = p.n[B].recv_wcs();
    assert_eq!(wc_summary(&rwc), [(7, WcStatus::Success, WcOpcode::Recv)]);
    assert_eq!(rwc[0].byte_len, 100);
    assert_eq!(p.n[B].read(0x800, 100), data);
    assert_eq!(p.next_deadline(), None);
}

/// Rule (ported from the e2e case `rawresp_rnr_retry_count`): with
/// rnr_retry 3 and every try answered by an RNR NAK (timer code 1,
/// 10 us), the SEND is transmitted 4 times, each 10 us after the NAK
/// before it, then completes with RNR_RETRY_EXC_ERR and the QP is in ERR.
#[test]
fn rnr_retry_exhaustion() {
    let o = ConnectOptions {
        rnr_retry: 3,
        ..opts()
    };
    let mut s = Solo::new(&o);
    s.node.post(0, 1, SendOp::Send, (0, 10), (0, 0));
    let mut tries = 0;
    let mut times = Vec::new();
    while let Some(req) = s.recv() {
        tries += 1;
        times.push(s.now);
        assert_eq!((req.psn(), req.opcode()), (s.at(0), Opcode::RcSendOnly));
        s.now += 500;
        s.aeth(req.psn(), AckSyndrome::RnrNak { timer: 1 }, 0);
        if let Some(t) = s.node.eng.next_deadline() {
            assert_eq!(t, s.now + 10_000);
            s.fire();
        }
    }
    assert_eq!(tries, 4, "transmissions with rnr_retry 3");
    assert_eq!(times, [0, 10_500, 21_000, 31_500]);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::RnrRetryExcErr, WcOpcode::Send)]
    );
    assert_eq!(s.node.count(Counter::RnrNaksReceived), 4);
    assert_eq!(s.node.state(), QpState::Err);
    assert_eq!(s.node.eng.next_deadline(), None);
}

/// Rule: rnr_retry 7 means retry forever: RNR NAKs never exhaust it.
#[test]
fn rnr_retry_7_is_infinite() {
    let o = ConnectOptions {
        rnr_retry: 7,
        ..opts()
    };
    let mut s = Solo::new(&o);
    s.node.post(0, 1, SendOp::Send, (0, 10), (0, 0));
    for _ in 0..20 {
        let req = s.must_recv();
        s.aeth(req.psn(), AckSyndrome::RnrNak { timer: 1 }, 0);
        s.fire();
    }
    let last = s.must_recv().psn();
    s.ack(last, 1);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
}

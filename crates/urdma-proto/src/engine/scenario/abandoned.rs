//! The peer of a QP that goes away: requests that meet no QP end in
//! RETRY_EXC_ERR after timeout x (retry + 1), and a QP whose owner is
//! gone tells a waiting peer, whose QP then fails at once.

use super::{ack_timeout, opts, pattern, wc_summary, Pair, A, B, MTU};
use crate::engine::command::{AbandonQp, DestroyQp};
use crate::engine::SendOp;
use crate::types::{QpState, WcOpcode, WcStatus};
use urdma_wire::{AckSyndrome, NakCode, Opcode};

/// B's QP is destroyed (no packet says so); A posts a SEND.
fn destroyed_peer() -> Pair {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts()).go_back_n();
    let qpn = p.n[B].qpn;
    p.n[B].eng.call(0, DestroyQp { qpn }).expect("destroy");
    p
}

/// Rule: a request whose responder QP is gone is dropped there, unanswered;
/// the requester's ACK timer fires every timeout, each time resending and
/// spending one retry, and once `retry_cnt` retries are spent the next
/// expiry fails the request with RETRY_EXC_ERR and the QP enters ERR:
/// timeout x (retry_cnt + 1) after the request left, whatever the
/// program does meanwhile (the timers need no posting or polling).
#[test]
fn requests_to_a_destroyed_qp_end_in_retry_exceeded() {
    let mut p = destroyed_peer();
    p.n[A].write(0, &pattern(64, 1));
    p.n[A].post(0, 1, SendOp::Send, (0, 64), (0, 0));
    let mut sent = 1;
    p.deliver_all(A);
    let mut t = 0;
    while p.n[A].state() != QpState::Err {
        assert!(sent <= 8, "more than retry_cnt + 1 transmissions");
        t = p.fire();
        sent += p.deliver_all(A).len();
        assert!(p.n[B].out.is_empty(), "the destroyed QP answered");
    }
    assert_eq!(sent, 8, "the SEND and its 7 retries");
    assert_eq!(t, ack_timeout(10) * 8);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::RetryExcErr, WcOpcode::Send)]
    );
    assert_eq!(p.next_deadline(), None, "nothing left to time");
}

/// A waits for a message from B, its own requests all acknowledged: no
/// timer of A runs.
fn waiting_pair() -> Pair {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts()).go_back_n();
    p.n[B].post_recv(0, 10, 0, 256);
    p.n[A].post_recv(0, 20, 0x1000, 4 * MTU);
    p.n[A].write(0, &pattern(64, 2));
    p.n[A].post(0, 1, SendOp::Send, (0, 64), (0, 0));
    p.settle();
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    assert_eq!(
        wc_summary(&p.n[B].recv_wcs()),
        [(10, WcStatus::Success, WcOpcode::Recv)]
    );
    assert_eq!(p.n[A].eng.next_deadline(), None, "A waits with no timer");
    p
}

/// Abandon B's QP now; returns what it sent.
fn abandon_b(p: &mut Pair) -> Vec<super::Pkt> {
    let qpn = p.n[B].qpn;
    p.n[B].eng.call(p.now, AbandonQp { qpn }).expect("abandon");
    p.n[B].collect();
    assert!(p.n[B].eng.query_qp(qpn).is_err(), "the QP is destroyed");
    p.take_all(B)
}

/// Rule: a QP whose owner is gone sends its connected peer an empty
/// SEND_MIDDLE at the PSN the peer expects before it is destroyed; the
/// peer refuses it as an invalid request (NAK) and enters ERR, its
/// waiting receive WQE flushed: a peer that only waits is not kept
/// waiting. The NAK meets no QP.
#[test]
fn an_abandoned_qp_tells_its_waiting_peer() {
    let mut p = waiting_pair();
    let expected = p.n[A].rq_psn();
    let bye = abandon_b(&mut p);
    assert_eq!(bye.len(), 1);
    assert_eq!(
        (bye[0].opcode(), bye[0].psn()),
        (Opcode::RcSendMiddle, expected)
    );
    assert!(bye[0].payload.is_empty());
    p.inject(A, &bye[0].data);
    assert_eq!(p.n[A].state(), QpState::Err);
    assert_eq!(
        wc_summary(&p.n[A].recv_wcs()),
        [(20, WcStatus::WrFlushErr, WcOpcode::Recv)]
    );
    let nak = p.take_all(A);
    assert_eq!(
        nak.iter().map(|k| k.syndrome()).collect::<Vec<_>>(),
        [Some(AckSyndrome::Nak(NakCode::InvalidRequest))]
    );
}

/// Rule: cut off in the middle of a multi-packet SEND, the peer refuses
/// the empty SEND_MIDDLE too (a MIDDLE packet shorter than the path MTU):
/// ERR, the receive WQE of the message completed in error. The requests
/// go at every PSN from the oldest unacknowledged one to the first never
/// sent: the first is a duplicate there, the second ends the QP, the rest
/// find it in ERR.
#[test]
fn an_abandoned_qp_ends_a_message_it_left_unfinished() {
    let mut p = waiting_pair();
    let len = 3 * MTU;
    p.n[B].write(0, &pattern(len, 3));
    p.n[B].post(0, 2, SendOp::Send, (0, len), (0, 0));
    p.deliver(B, 0);
    p.take_all(B);
    p.take_all(A);
    let bye = abandon_b(&mut p);
    // The FIRST packet arrived, unacknowledged; the other two were lost.
    assert_eq!(p.n[A].rq_psn(), p.n[B].at(1));
    let psns: Vec<u32> = (0..=3).map(|k| p.n[B].at(k)).collect();
    assert_eq!(bye.iter().map(|b| b.psn()).collect::<Vec<_>>(), psns);
    for b in &bye {
        p.inject(A, &b.data);
    }
    assert_eq!(p.n[A].state(), QpState::Err);
    let wcs = p.n[A].recv_wcs();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 20);
    assert_ne!(wcs[0].status, WcStatus::Success);
}

/// Rule: with requests in flight that the peer did receive, the first
/// SEND_MIDDLE (at the oldest unacknowledged PSN) is a duplicate there,
/// answered with an ACK, and the second (at the first PSN never sent)
/// ends the peer's QP.
#[test]
fn an_abandoned_qp_with_unacknowledged_requests_still_ends_its_peer() {
    let mut p = waiting_pair();
    p.n[A].post_recv(0, 21, 0x400, 256);
    p.n[B].write(0, &pattern(32, 4));
    p.n[B].post(0, 3, SendOp::Send, (0, 32), (0, 0));
    p.deliver_all(B);
    // A's ACK is lost: B's SEND is unacknowledged when B goes.
    p.take_all(A);
    let bye = abandon_b(&mut p);
    assert_eq!(bye.len(), 2);
    for b in &bye {
        p.inject(A, &b.data);
    }
    assert_eq!(p.n[A].state(), QpState::Err);
    assert_eq!(
        wc_summary(&p.n[A].recv_wcs()),
        [
            (20, WcStatus::Success, WcOpcode::Recv),
            (21, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
}

/// Rule: a QP that entered ERR on its own (as one whose owner's memory
/// vanished under a request does) still tells its peer when abandoned.
#[test]
fn an_abandoned_qp_in_err_still_tells_its_peer() {
    let mut p = waiting_pair();
    let qpn = p.n[B].qpn;
    let attr = crate::verbs::QpAttr {
        qp_state: QpState::Err,
        ..Default::default()
    };
    p.n[B]
        .eng
        .modify_qp(0, qpn, &attr, crate::types::QpAttrMask::STATE)
        .expect("to ERR");
    p.n[B].collect();
    p.take_all(B);
    let bye = abandon_b(&mut p);
    assert_eq!(bye.len(), 1);
    p.inject(A, &bye[0].data);
    assert_eq!(p.n[A].state(), QpState::Err);
}

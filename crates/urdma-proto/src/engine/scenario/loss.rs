//! Loss recovery of the requester: PSN sequence NAKs, go-back-N, the
//! retransmission timer and retry exhaustion. Scenarios with lost packets
//! run both ends with go-back-N (as with a peer that does not mark its
//! packets selective); `selective.rs` has urdma's own recovery.

use super::{ack_timeout, opts, pattern, psn_ops, wc_summary, Pair, Pkt, Solo, A, B};
use crate::engine::{Counter, SendOp};
use crate::types::{QpState, WcOpcode, WcStatus};
use crate::verbs::ConnectOptions;
use urdma_wire::{AckSyndrome, NakCode, Opcode};

const NAK_SEQ: AckSyndrome = AckSyndrome::Nak(NakCode::PsnSequenceError);

/// Rule: a packet lost in the middle of a message makes the responder
/// answer the next one with a PSN sequence NAK carrying its expected PSN
/// (once); the requester goes back to that PSN (go-back-N) and resends
/// from there, the NAK acknowledging what precedes it. If the resend is
/// lost too, the retransmission timer, restarted by that progress, fires
/// after exactly 4.096 us x 2^timeout (raised to the engine's floor) and
/// resends from the same PSN.
#[test]
fn sequence_nak_then_timeout_resend() {
    let oa = ConnectOptions {
        retry_cnt: 3,
        ..opts()
    };
    let t = ack_timeout(10);
    assert_eq!(t, crate::engine::qp::MIN_ACK_TIMEOUT_NS.max(4_194_304));
    let mut p = Pair::new(0x1000, &oa, 0x2000, &opts()).go_back_n();
    let data = pattern(3000, 0x5A);
    p.n[A].write(0, &data);
    let (va, rkey) = (p.n[B].va(0x100), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 3000), (va, rkey));
    let first = p.n[A].peek();
    assert_eq!(
        psn_ops(&first),
        [
            (0x1000, Opcode::RcWriteFirst),
            (0x1001, Opcode::RcWriteMiddle),
            (0x1002, Opcode::RcWriteLast)
        ]
    );
    assert!(first[2].repr.bth.ack_req && !first[0].repr.bth.ack_req);
    assert_eq!(p.n[A].eng.next_deadline(), Some(t));

    // 0x1001 is lost: 0x1002 meets a responder expecting 0x1001.
    p.advance_to(1_000);
    assert_eq!(p.drop_pkt(A, 1).psn(), 0x1001);
    p.deliver_all(A);
    let nak = p.n[B].peek();
    assert_eq!(nak.len(), 1, "one NAK for the gap");
    assert_eq!(
        (nak[0].opcode(), nak[0].psn(), nak[0].syndrome()),
        (Opcode::RcAck, 0x1001, Some(NAK_SEQ))
    );
    assert_eq!(p.n[B].count(Counter::SeqNaksSent), 1);
    assert_eq!(p.n[B].count(Counter::Dropped), 1);
    assert_eq!(p.n[B].rq_psn(), 0x1001);

    // The NAK: go back to 0x1001, resend it and what follows.
    p.advance_to(2_000);
    p.deliver_all(B);
    assert_eq!(p.n[A].count(Counter::SeqNaksReceived), 1);
    let again = p.take_all(A);
    assert_eq!(
        psn_ops(&again),
        [
            (0x1001, Opcode::RcWriteMiddle),
            (0x1002, Opcode::RcWriteLast)
        ]
    );
    assert_eq!(again[0].data, first[1].data, "the resend is the original");
    assert_eq!(p.n[A].count(Counter::Retransmits), 2);
    assert_eq!(p.n[A].eng.next_deadline(), Some(2_000 + t));
    assert!(p.n[A].send_wcs().is_empty());

    // Both resent packets were lost (taken above): nothing until the timer.
    p.advance_to(2_000 + t - 1);
    p.timers();
    assert!(p.n[A].out.is_empty(), "resent before the ACK timeout");
    assert_eq!(p.fire(), 2_000 + t);
    assert_eq!(p.n[A].count(Counter::Timeouts), 1);
    let third = p.n[A].peek();
    assert_eq!(psn_ops(&third), psn_ops(&again));
    assert_eq!(p.n[A].count(Counter::Retransmits), 4);
    assert_eq!(p.n[A].eng.next_deadline(), Some(2_000 + 2 * t));

    // The first resend after the timeout asks for an ACK too: the last
    // request that did left more than a quarter round trip before.
    assert!(third[0].repr.bth.ack_req && third[1].repr.bth.ack_req);
    let log = p.settle();
    let acks: Vec<_> = log.iter().filter(|(from, _)| *from == B).collect();
    let acked: Vec<_> = acks.iter().map(|a| (a.1.psn(), a.1.syndrome())).collect();
    assert_eq!(
        acked,
        [
            (0x1001, Some(AckSyndrome::Ack { credits: 31 })),
            (0x1002, Some(AckSyndrome::Ack { credits: 31 }))
        ]
    );
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0x100, 3000), data);
    assert_eq!(
        p.n[A].eng.next_deadline(),
        None,
        "timer stops when all is acked"
    );
}

/// Rule (ported from the e2e case `rawresp_seq_nak_resend`): a PSN
/// sequence NAK in the middle of a 3-packet WRITE makes the requester go
/// back to that PSN and resend the rest with the right opcodes; the ACK of
/// the last PSN then completes the WRITE.
#[test]
fn sequence_nak_resends_the_rest_of_the_message() {
    let mut s = Solo::new(&opts());
    s.node.post(0, 1, SendOp::Write, (0, 3000), (0x1000, 5));
    let first: Vec<u32> = s.recv_all().iter().map(|q| q.psn()).collect();
    assert_eq!(first, [s.at(0), s.at(1), s.at(2)]);
    s.aeth(s.at(1), NAK_SEQ, 0);
    assert_eq!(
        psn_ops(&s.recv_all()),
        [
            (s.at(1), Opcode::RcWriteMiddle),
            (s.at(2), Opcode::RcWriteLast)
        ]
    );
    s.ack(s.at(2), 1);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert!(s.recv().is_none());
}

/// Rule: with a silent peer, the retransmission timer fires every
/// 4.096 us x 2^timeout and resends every outstanding packet from the
/// oldest unacknowledged PSN; after exactly retry_cnt + 1 timeouts (so
/// retry_cnt + 1 transmissions of each PSN) the head WQE completes with
/// RETRY_EXC_ERR, the QP moves to ERR with no asynchronous event, the WQEs
/// behind it complete with WR_FLUSH_ERR and no timer is left.
///
/// Also pins the e2e case `rawresp_retry_exceeded` (retry_cnt 2: three
/// transmissions of the SEND, all with one PSN, then RETRY_EXC_ERR and ERR).
#[test]
fn retry_exhaustion_flushes_the_send_queue() {
    let (mut s, t) = solo_retrying(2);
    s.node.post(0, 1, SendOp::Send, (0, 10), (0, 0));
    s.node.post(0, 2, SendOp::Send, (0, 10), (0, 0));
    s.node.post(0, 3, SendOp::Write, (0, 10), (0x1000, 5));
    let mut sent = vec![s.recv_all()];
    for k in 1..=3u64 {
        assert_eq!(s.node.eng.next_deadline(), Some(k * t));
        s.timers_at(k * t - 1);
        assert!(s.recv().is_none(), "resent before the deadline");
        assert_eq!(s.fire(), k * t);
        assert_eq!(s.node.count(Counter::Timeouts), k);
        sent.push(s.recv_all());
    }
    let want = [
        (s.at(0), Opcode::RcSendOnly),
        (s.at(1), Opcode::RcSendOnly),
        (s.at(2), Opcode::RcWriteOnly),
    ];
    for round in &sent[..3] {
        assert_eq!(psn_ops(round), want);
    }
    assert!(sent[3].is_empty(), "sent after the last retry");
    assert_eq!(s.node.count(Counter::Retransmits), 6);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [
            (1, WcStatus::RetryExcErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::Send),
            (3, WcStatus::WrFlushErr, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(s.node.state(), QpState::Err);
    assert!(s.node.eng.take_events().is_empty());
    assert_eq!(s.node.eng.next_deadline(), None);
}

/// Rule: retries left are reset by progress. A timeout spends one retry,
/// the ACK that follows restores retry_cnt, so a later message gets the
/// full retry_cnt + 1 transmissions again.
#[test]
fn progress_restores_the_retry_budget() {
    let (mut s, t) = solo_retrying(1);
    s.node.post(0, 1, SendOp::Send, (0, 10), (0, 0));
    assert_eq!(s.must_recv().psn(), s.at(0));
    assert_eq!(s.fire(), t);
    assert_eq!(s.must_recv().psn(), s.at(0));
    s.ack(s.at(0), 1);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    s.node.post(s.now, 2, SendOp::Send, (0, 10), (0, 0));
    assert_eq!(s.must_recv().psn(), s.at(1));
    assert_eq!(s.fire(), 2 * t);
    assert_eq!(
        s.must_recv().psn(),
        s.at(1),
        "one retry left after progress"
    );
    assert_eq!(s.fire(), 3 * t);
    assert!(s.recv().is_none());
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(2, WcStatus::RetryExcErr, WcOpcode::Send)]
    );
    assert_eq!(s.node.count(Counter::Timeouts), 3);
}

/// Rule: a packet overtaken by the next one causes one sequence NAK and the
/// early packet is dropped, not kept; when the late one arrives it is
/// accepted in order, so the go-back resend that follows the NAK meets a
/// responder that has seen it: the resent middle packet is a silent
/// duplicate and the resent last one is executed and acknowledged.
#[test]
fn reordered_packet_then_go_back_resend() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts()).go_back_n();
    let data = pattern(3000, 7);
    p.n[A].write(0, &data);
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 3000), (va, rkey));
    p.swap(A, 1, 2);
    let order: Vec<u32> = p.deliver_all(A).iter().map(|x| x.psn()).collect();
    assert_eq!(order, [0x40, 0x42, 0x41]);
    assert_eq!(p.n[B].rq_psn(), 0x42, "the late packet was accepted");
    assert_eq!(p.n[B].count(Counter::Dropped), 1);
    let nak = p.n[B].peek();
    assert_eq!(psn_ops(&nak), [(0x41, Opcode::RcAck)]);
    assert_eq!(nak[0].syndrome(), Some(NAK_SEQ));
    p.deliver_all(B);
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [(0x41, Opcode::RcWriteMiddle), (0x42, Opcode::RcWriteLast)]
    );
    p.deliver_all(A);
    assert_eq!(p.n[B].count(Counter::Duplicates), 1);
    let acks = p.n[B].peek();
    assert_eq!(psn_ops(&acks), [(0x42, Opcode::RcAck)]);
    p.deliver_all(B);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0, 3000), data);
}

/// Rule: a second sequence NAK for the same PSN arriving soon after the
/// first (a network duplicate, here held and injected again 1 us later)
/// causes no second go-back and spends no retry: within a quarter of the
/// ACK timeout, stale signs of loss below the resend horizon are ignored.
/// With retry_cnt 3, the first NAK leaves 2 retries, so once everything
/// is lost the QP still takes 3 timeouts (2 resends) to give up.
#[test]
fn duplicate_nak_does_not_rewind_again() {
    let oa = ConnectOptions {
        retry_cnt: 3,
        ..opts()
    };
    let t = ack_timeout(oa.timeout);
    let (mut p, nak) = write_with_lost_middle(&oa);
    assert_eq!(nak.len(), 1);
    p.advance_to(1_000);
    p.inject(A, &nak[0].data);
    assert_eq!(p.take_all(A).len(), 2, "go-back resend of 0x41 and 0x42");
    p.advance_to(2_000);
    p.inject(A, &nak[0].data);
    assert!(
        p.n[A].out.is_empty(),
        "a duplicate NAK caused a second go-back"
    );
    assert_eq!(p.n[A].count(Counter::SeqNaksReceived), 2);
    for k in 1..=2 {
        assert_eq!(p.fire(), 1_000 + k * t);
        assert_eq!(p.take_all(A).len(), 2, "resend after timeout {k}");
    }
    assert_eq!(p.fire(), 1_000 + 3 * t);
    assert!(p.n[A].out.is_empty());
    assert_eq!(p.n[A].count(Counter::Timeouts), 3);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::RetryExcErr, WcOpcode::RdmaWrite)]
    );
}

/// A duplicate of a NAK already acted on causes no go-back, so it cannot
/// exhaust the retries either, even when the first NAK spent the last
/// one: the resend is acknowledged and the WRITE succeeds.
#[test]
fn duplicate_nak_with_no_retry_left_is_ignored() {
    let oa = ConnectOptions {
        retry_cnt: 1,
        ..opts()
    };
    let (mut p, nak) = write_with_lost_middle(&oa);
    p.advance_to(1_000);
    p.inject(A, &nak[0].data);
    p.advance_to(2_000);
    p.deliver_all(A);
    p.inject(A, &nak[0].data);
    let wcs = p.n[A].send_wcs();
    assert!(
        wcs.is_empty(),
        "a stale NAK failed the WRITE: {:?}",
        wc_summary(&wcs)
    );
    assert_eq!(p.n[A].state(), crate::types::QpState::Rts);
    p.deliver_all(B);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
}

/// A hand-made peer's engine whose QP has `retry_cnt` retries, and its
/// ACK timeout in ns.
fn solo_retrying(retry_cnt: u8) -> (Solo, u64) {
    let o = ConnectOptions {
        retry_cnt,
        ..opts()
    };
    (Solo::new(&o), ack_timeout(o.timeout))
}

/// A pair where A (options `oa`) WRITEs 3000 bytes to B and the second
/// packet is lost: B's sequence NAK, held back, is returned.
fn write_with_lost_middle(oa: &ConnectOptions) -> (Pair, Vec<Pkt>) {
    let mut p = Pair::new(0x40, oa, 0x50, &opts()).go_back_n();
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 3000), (va, rkey));
    p.drop_pkt(A, 1);
    p.deliver_all(A);
    let nak = p.take_all(B);
    (p, nak)
}

/// Rule: an ACK timeout code below the floor (code 4, 65.5 us, as some
/// programs ask for) waits the floor before resending; code 0 still
/// means no timer at all.
#[test]
fn small_timeout_codes_are_raised_to_the_floor() {
    let floor = crate::engine::qp::MIN_ACK_TIMEOUT_NS;
    for (code, want) in [(4u8, Some(floor)), (0, None)] {
        let oa = ConnectOptions {
            timeout: code,
            ..opts()
        };
        let mut p = Pair::new(0x1000, &oa, 0x2000, &opts());
        p.n[A].write(0, &pattern(64, 0x11));
        let (va, rkey) = (p.n[B].va(0x100), p.n[B].mr.rkey);
        p.n[A].post(0, 1, SendOp::Write, (0, 64), (va, rkey));
        let sent = p.n[A].peek();
        assert_eq!(sent.len(), 1);
        let deadline = p.n[A].eng.next_deadline();
        match want {
            Some(t) => assert_eq!(deadline, Some(t), "code {code}"),
            None => assert!(
                deadline.is_none_or(|d| d < floor),
                "code 0 arms no ACK timer (only a loss probe)"
            ),
        }
    }
}

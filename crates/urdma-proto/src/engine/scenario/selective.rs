//! Selective retransmission between urdma engines: marked requests after a
//! loss are kept by the responder, the marked sequence NAK names the one
//! missing packet, and the requester resends that packet alone. With a
//! peer that does not mark (either end switched off), IBTA go-back-N.

use super::{opts, pattern, psn_ops, wc_summary, Pair, Pkt, A, B};
use crate::engine::{Counter, SendOp};
use crate::types::{WcOpcode, WcStatus};
use urdma_wire::{AckSyndrome, NakCode, Opcode};

const NAK_SEQ: AckSyndrome = AckSyndrome::Nak(NakCode::PsnSequenceError);
const ACK: AckSyndrome = AckSyndrome::Ack { credits: 31 };

/// `(psn, syndrome, selective mark)` of an ACK or NAK.
fn aeth_of(p: &Pkt) -> (u32, Option<AckSyndrome>, bool) {
    (p.psn(), p.syndrome(), p.repr.bth.selective)
}

/// A writes `len` bytes of a pattern to B's region at offset 0; returns
/// the data.
fn post_write(p: &mut Pair, len: usize) -> Vec<u8> {
    let data = pattern(len, 0x3C);
    p.n[A].write(0, &data);
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(p.now, 1, SendOp::Write, (0, len), (va, rkey));
    data
}

/// Rule: a lost middle packet: the packet after it is kept (not dropped)
/// and NAKed once with the mark (and, as it asks for an ACK, answered
/// with a marked ACK of what ran); the requester resends only the lost one
/// (asking for an ACK); the responder then executes it and the kept one,
/// and the WRITE completes with the right data.
#[test]
fn a_lost_packet_is_resent_alone() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 3000);
    let first = p.n[A].peek();
    assert!(
        first.iter().all(|x| x.repr.bth.selective),
        "requests marked"
    );
    assert_eq!(p.drop_pkt(A, 1).psn(), 0x41);
    p.deliver_all(A);
    assert_eq!(p.n[B].rq_psn(), 0x41);
    assert_eq!(p.n[B].count(Counter::HeldOutOfSequence), 1);
    assert_eq!(p.n[B].count(Counter::Dropped), 0, "kept, not dropped");
    let nak = p.n[B].peek();
    assert_eq!(
        nak.iter().map(aeth_of).collect::<Vec<_>>(),
        [(0x41, Some(NAK_SEQ), true), (0x40, Some(ACK), true)]
    );

    p.deliver_all(B);
    let again = p.n[A].peek();
    assert_eq!(psn_ops(&again), [(0x41, Opcode::RcWriteMiddle)]);
    assert!(again[0].repr.bth.ack_req);
    assert_eq!(again[0].payload, first[1].payload);
    assert_eq!(p.n[A].count(Counter::Retransmits), 1);

    p.deliver_all(A);
    assert_eq!(p.n[B].rq_psn(), 0x43);
    let acks = p.n[B].peek();
    assert_eq!(acks.last().map(aeth_of).map(|a| a.0), Some(0x42));
    p.settle();
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0, 3000), data);
    assert_eq!(p.n[A].count(Counter::Retransmits), 1);
    assert_eq!(p.n[A].count(Counter::Timeouts), 0);
}

/// Rule: two gaps in one window: each is NAKed as soon as a later packet
/// shows it, and a marked NAK acknowledges nothing; both lost packets
/// are resent at once, two packets in all.
#[test]
fn two_gaps_are_repaired_together() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 6000);
    assert_eq!(p.n[A].peek().len(), 6);
    assert_eq!(p.drop_pkt(A, 3).psn(), 0x43);
    assert_eq!(p.drop_pkt(A, 1).psn(), 0x41);
    p.deliver_all(A);
    assert_eq!(p.n[B].count(Counter::HeldOutOfSequence), 3);
    let nak = p.n[B].peek();
    assert_eq!(
        nak.iter().map(aeth_of).collect::<Vec<_>>(),
        [
            (0x41, Some(NAK_SEQ), true),
            (0x43, Some(NAK_SEQ), true),
            (0x40, Some(ACK), true)
        ],
        "the LAST asks for an ACK: the one of what ran, reaching past 0x41"
    );
    p.deliver_all(B);
    assert!(p.n[A].send_wcs().is_empty(), "nothing completed");
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [(0x41, Opcode::RcWriteMiddle), (0x43, Opcode::RcWriteMiddle)]
    );
    p.deliver_all(A);
    assert_eq!(p.n[B].rq_psn(), 0x46);
    p.settle();
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0, 6000), data);
    assert_eq!(p.n[A].count(Counter::Retransmits), 2);
    assert_eq!(p.n[B].count(Counter::SeqNaksSent), 2);
}

/// Rule: a responder that does not take part (as rxe) drops the marked
/// packet and sends a plain NAK: the requester goes back N. A requester
/// that does not mark its requests gets the same from a urdma responder.
#[test]
fn a_peer_without_the_mark_gets_go_back_n() {
    for off in [B, A] {
        let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
        p.n[off].eng.set_selective(false);
        let data = post_write(&mut p, 3000);
        assert_eq!(p.n[A].peek()[0].repr.bth.selective, off == B);
        p.drop_pkt(A, 1);
        p.deliver_all(A);
        assert_eq!(p.n[B].count(Counter::HeldOutOfSequence), 0);
        assert_eq!(p.n[B].count(Counter::Dropped), 1);
        let nak = p.n[B].peek();
        assert_eq!(
            nak.iter().map(aeth_of).collect::<Vec<_>>(),
            [(0x41, Some(NAK_SEQ), false)]
        );
        p.deliver_all(B);
        assert_eq!(
            psn_ops(&p.n[A].peek()),
            [(0x41, Opcode::RcWriteMiddle), (0x42, Opcode::RcWriteLast)],
            "go-back-N"
        );
        p.settle();
        assert_eq!(p.n[B].read(0, 3000), data);
        assert_eq!(p.n[A].send_wcs().len(), 1);
    }
}

/// Rule: when the resent packet is lost too, the probe timer (not the ACK
/// timeout) resends the oldest unacknowledged packet, which fills the gap,
/// and the last one sent, both asking for an ACK. No retry is spent.
#[test]
fn a_lost_resend_is_repaired_after_a_probe() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 4000);
    p.drop_pkt(A, 1);
    p.deliver_all(A);
    assert_eq!(p.n[B].count(Counter::HeldOutOfSequence), 2);
    p.deliver_all(B);
    assert_eq!(psn_ops(&p.take_all(A)), [(0x41, Opcode::RcWriteMiddle)]);
    let t = p.fire();
    assert!(
        t < super::ack_timeout(10),
        "the probe comes before the ACK timeout"
    );
    let probe = p.n[A].peek();
    assert_eq!(
        psn_ops(&probe),
        [(0x41, Opcode::RcWriteMiddle), (0x43, Opcode::RcWriteLast)]
    );
    assert!(probe.iter().all(|x| x.repr.bth.ack_req));
    assert_eq!(p.n[A].count(Counter::Probes), 1);
    p.settle();
    assert_eq!(p.n[B].rq_psn(), 0x44);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0, 4000), data);
    assert_eq!(p.n[A].count(Counter::Timeouts), 0);
}

/// Rule: resent packets arrive in the order they were NAKed, so one that
/// arrives shows the resends NAKed before it lost: the responder NAKs
/// those again at once (not those NAKed after it), and the requester
/// resends them without waiting for its loss probe.
#[test]
fn a_lost_resend_is_nakked_again_when_a_later_resend_arrives() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 7000);
    assert_eq!(p.n[A].peek().len(), 7);
    for i in [5, 3, 1] {
        p.drop_pkt(A, i);
    }
    p.deliver_all(A);
    let naks: Vec<_> = p.n[B].peek().iter().map(aeth_of).collect();
    assert_eq!(
        naks[..3],
        [
            (0x41, Some(NAK_SEQ), true),
            (0x43, Some(NAK_SEQ), true),
            (0x45, Some(NAK_SEQ), true)
        ]
    );
    p.deliver_all(B);
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [
            (0x41, Opcode::RcWriteMiddle),
            (0x43, Opcode::RcWriteMiddle),
            (0x45, Opcode::RcWriteMiddle)
        ]
    );
    // The resend of 0x41 is lost; the one of 0x43 arrives.
    p.drop_pkt(A, 0);
    p.deliver(A, 0);
    let again: Vec<_> = p.n[B].peek().iter().map(aeth_of).collect();
    assert!(again.contains(&(0x41, Some(NAK_SEQ), true)), "{again:?}");
    assert!(!again.iter().any(|a| a.0 == 0x45 && a.1 == Some(NAK_SEQ)));
    assert_eq!(p.n[B].count(Counter::SeqNaksSent), 4);
    p.deliver_all(A);
    // Half a round trip later (no estimate yet: the shortest probe time).
    p.advance_to(p.now + crate::engine::rtt::MIN_PROBE_NS / 2);
    p.deliver_all(B);
    assert_eq!(psn_ops(&p.n[A].peek()), [(0x41, Opcode::RcWriteMiddle)]);
    p.settle();
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(p.n[B].read(0, 7000), data);
    assert_eq!(p.n[A].count(Counter::Probes), 0);
    assert_eq!(p.n[A].count(Counter::Timeouts), 0);
    assert_eq!(p.n[A].count(Counter::Retransmits), 4);
}

/// Rule: a lost last packet, which no later packet reveals, is resent by
/// the probe once the peer is known to be selective (its ACKs carry the
/// mark); with a go-back-N peer only the ACK timeout runs.
#[test]
fn a_lost_last_packet_is_probed() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    post_write(&mut p, 100);
    p.settle();
    assert_eq!(p.n[A].send_wcs().len(), 1);
    let data = post_write(&mut p, 3000);
    assert_eq!(p.drop_pkt(A, 2).psn(), 0x43);
    p.deliver_all(A);
    assert!(p.n[B].out.is_empty(), "nothing asked for an ACK");
    p.fire();
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [(0x41, Opcode::RcWriteFirst), (0x43, Opcode::RcWriteLast)]
    );
    p.settle();
    assert_eq!(p.n[A].send_wcs().len(), 1);
    assert_eq!(p.n[B].read(0, 3000), data);
    assert_eq!(p.n[A].count(Counter::Probes), 1);

    let mut q = Pair::new(0x40, &opts(), 0x50, &opts());
    q.n[B].eng.set_selective(false);
    post_write(&mut q, 100);
    q.settle();
    post_write(&mut q, 3000);
    assert_eq!(q.next_deadline(), Some(super::ack_timeout(10)));
}

/// Rule: a kept request is checked when its turn comes: a SEND with no
/// receive WQE left is refused then with an RNR NAK, what was kept after
/// it is forgotten, and the requester's RNR retry delivers it later.
#[test]
fn a_kept_request_refused_in_its_turn() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    p.n[B].post_recv(0, 70, 0x8000, 100);
    p.n[A].write(0, &pattern(100, 1));
    p.n[A].post(0, 1, SendOp::Send, (0, 100), (0, 0));
    p.n[A].post(0, 2, SendOp::Send, (0, 100), (0, 0));
    p.n[A].post(0, 3, SendOp::Send, (0, 100), (0, 0));
    p.drop_pkt(A, 0);
    p.deliver_all(A);
    assert_eq!(p.n[B].count(Counter::HeldOutOfSequence), 2);
    p.deliver_all(B);
    assert_eq!(psn_ops(&p.deliver_all(A)), [(0x40, Opcode::RcSendOnly)]);
    assert_eq!(p.n[B].count(Counter::RnrNaksSent), 1);
    assert_eq!(p.n[B].rq_psn(), 0x41);
    let rnr = p.n[B].peek();
    assert!(matches!(
        rnr.last().and_then(Pkt::syndrome),
        Some(AckSyndrome::RnrNak { .. })
    ));
    assert_eq!(rnr.last().map(Pkt::psn), Some(0x41));
    p.deliver_all(B);
    p.n[B].post_recv(p.now, 71, 0x8000, 100);
    p.n[B].post_recv(p.now, 72, 0x8000, 100);
    let mut wcs = Vec::new();
    while wcs.len() < 3 {
        p.fire();
        p.settle();
        wcs.extend(p.n[A].send_wcs());
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(p.n[B].recv_wcs().len(), 3);
    assert_eq!(p.n[B].count(Counter::RnrNaksSent), 1);
}

/// Rule: selective recovery works across the PSN wrap: the packet at
/// 0xFFFFFF is lost, the one at 0 is kept.
#[test]
fn selective_recovery_across_the_psn_wrap() {
    let mut p = Pair::new(0xFF_FFFE, &opts(), 0x10, &opts());
    let data = post_write(&mut p, 3000);
    assert_eq!(p.drop_pkt(A, 1).psn(), 0xFF_FFFF);
    p.deliver_all(A);
    let nak = p.n[B].peek();
    assert_eq!(
        nak.iter().map(aeth_of).collect::<Vec<_>>(),
        [
            (0xFF_FFFF, Some(NAK_SEQ), true),
            (0xFF_FFFE, Some(ACK), true)
        ]
    );
    p.deliver_all(B);
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [(0xFF_FFFF, Opcode::RcWriteMiddle)]
    );
    p.settle();
    assert_eq!(p.n[B].rq_psn(), 1);
    assert_eq!(p.n[B].read(0, 3000), data);
    assert_eq!(p.n[A].send_wcs().len(), 1);
}

/// Rule: a marked NAK acknowledges nothing, even when it names a READ
/// request the requester cannot resend alone: the requester goes back to
/// its oldest unacknowledged PSN, and nothing completes before the
/// responder has it all.
#[test]
fn a_nak_of_a_read_goes_back_and_acknowledges_nothing() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    for k in 0..3 {
        p.n[B].post_recv(0, 70 + k, 0x8000 + 0x100 * k as usize, 100);
    }
    let rdata = pattern(100, 9);
    p.n[B].write(0x4000, &rdata);
    p.n[A].write(0, &pattern(100, 1));
    let (va, rkey) = (p.n[B].va(0x4000), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Send, (0, 100), (0, 0));
    p.n[A].post(0, 2, SendOp::Read, (0x1000, 100), (va, rkey));
    p.n[A].post(0, 3, SendOp::Send, (0, 100), (0, 0));
    p.n[A].post(0, 4, SendOp::Send, (0, 100), (0, 0));
    p.drop_pkt(A, 0);
    assert_eq!(p.drop_pkt(A, 0).opcode(), Opcode::RcReadRequest);
    p.deliver_all(A);
    let nak = p.n[B].peek();
    assert_eq!(
        nak.iter().map(aeth_of).collect::<Vec<_>>(),
        [
            (0x40, Some(NAK_SEQ), true),
            (0x41, Some(NAK_SEQ), true),
            (0x3F, Some(ACK), true),
            (0x3F, Some(ACK), true)
        ],
        "each SEND asks for an ACK"
    );
    p.deliver_all(B);
    assert!(p.n[A].send_wcs().is_empty(), "nothing acknowledged");
    let again = psn_ops(&p.n[A].peek());
    assert!(again.contains(&(0x41, Opcode::RcReadRequest)), "{again:?}");
    let mut wcs = Vec::new();
    for _ in 0..10 {
        p.settle();
        wcs.extend(p.n[A].send_wcs());
        if wcs.len() == 4 {
            break;
        }
        p.fire();
    }
    assert_eq!(
        wc_summary(&wcs),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::RdmaRead),
            (3, WcStatus::Success, WcOpcode::Send),
            (4, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(p.n[A].read(0x1000, 100), rdata);
    assert_eq!(p.n[B].recv_wcs().len(), 3);
}

/// Rule: a marked NAK also says how far the responder received (in the
/// AETH's MSN field): the requester's window moves past what arrived, so
/// it goes on sending new packets while the lost one is resent.
#[test]
fn the_window_moves_past_what_arrived() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 40 * 1024);
    let first = p.n[A].peek();
    let window = first.len() as u32;
    assert_eq!(window, crate::engine::cwnd::INITIAL_WINDOW);
    assert_eq!(p.drop_pkt(A, 0).psn(), 0x40);
    p.deliver_all(A);
    let replies = p.n[B].peek();
    let reach: Vec<_> = replies
        .iter()
        .map(|r| (aeth_of(r), r.repr.aeth.map(|a| a.msn)))
        .collect();
    assert_eq!(
        reach,
        [
            ((0x40, Some(NAK_SEQ), true), Some(0x42)),
            ((0x3F, Some(ACK), true), Some(0x40 + window))
        ],
        "the NAK, then the ACK the last packet asked for"
    );
    p.deliver_all(B);
    let next = psn_ops(&p.n[A].peek());
    assert_eq!(next[0], (0x40, Opcode::RcWriteFirst));
    assert_eq!(next[1].0, 0x40 + window, "new packets past the window");
    assert_eq!(next.len(), 1 + 40 - window as usize);
    p.settle();
    assert_eq!(p.n[A].send_wcs().len(), 1);
    assert_eq!(p.n[B].read(0, 40 * 1024), data);
}

/// Rule: a marked ACK that reaches past the requester's oldest
/// unacknowledged PSN says that packet is missing: when its NAK was lost,
/// the ACK alone has it resent, without waiting for a probe.
#[test]
fn a_lost_nak_is_made_up_by_the_next_ack() {
    let mut p = Pair::new(0x40, &opts(), 0x50, &opts());
    let data = post_write(&mut p, 3000);
    p.drop_pkt(A, 1);
    p.deliver_all(A);
    let replies = p.n[B].peek();
    assert_eq!(replies.len(), 2, "a NAK and an ACK");
    assert_eq!(p.drop_pkt(B, 0).syndrome(), Some(NAK_SEQ));
    p.deliver_all(B);
    assert_eq!(psn_ops(&p.n[A].peek()), [(0x41, Opcode::RcWriteMiddle)]);
    assert_eq!(p.n[A].count(Counter::Probes), 0);
    p.settle();
    assert_eq!(p.n[A].send_wcs().len(), 1);
    assert_eq!(p.n[B].read(0, 3000), data);
}

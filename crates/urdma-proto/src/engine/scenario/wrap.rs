//! PSNs wrap from 2^24 - 1 to 0.

use super::{opts, pattern, psn_ops, wc_summary, Pair, Pkt, A, B};
use crate::engine::{Counter, SendOp};
use crate::types::{WcOpcode, WcStatus};
use urdma_wire::{AckSyndrome, NakCode, Opcode};

const ACK: AckSyndrome = AckSyndrome::Ack { credits: 31 };

/// `(psn, opcode)` of the packets of `log` that `from` sent.
fn sent_by(log: &[(usize, Pkt)], from: usize) -> Vec<(u32, Opcode)> {
    log.iter()
        .filter(|(f, _)| *f == from)
        .map(|(_, p)| (p.psn(), p.opcode()))
        .collect()
}

/// Rule: PSNs are 24-bit and wrap from 0xFFFFFF to 0 in every role
/// (here with go-back-N; the selective scenarios cross the wrap too). A
/// sends from 0xFFFFFE a 3-packet WRITE (0xFFFFFE, 0xFFFFFF, 0), a SEND (1)
/// and a 3-packet READ (2..=4); the packet at PSN 0 is lost, so the
/// responder NAKs PSN 0 (it expected 0 after 0xFFFFFF), the requester goes
/// back to 0 and everything completes with ACKs and READ responses at the
/// wrapped PSNs. Then B, sending from 0xFFFFFF, sends a 2-packet SEND
/// (0xFFFFFF, 0) and a WRITE (1), acknowledged at 0 and 1.
#[test]
fn traffic_across_the_psn_wrap() {
    let mut p = Pair::new(0xFF_FFFE, &opts(), 0xFF_FFFF, &opts()).go_back_n();
    let wdata = pattern(3000, 1);
    let sdata = pattern(100, 2);
    let rdata = pattern(2500, 3);
    p.n[A].write(0, &wdata);
    p.n[A].write(0x1000, &sdata);
    p.n[B].write(0x4000, &rdata);
    p.n[B].post_recv(0, 70, 0x8000, 200);
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 3000), (va, rkey));
    p.n[A].post(0, 2, SendOp::Send, (0x1000, 100), (0, 0));
    p.n[A].post(0, 3, SendOp::Read, (0x2000, 2500), (va + 0x4000, rkey));
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [
            (0xFF_FFFE, Opcode::RcWriteFirst),
            (0xFF_FFFF, Opcode::RcWriteMiddle),
            (0, Opcode::RcWriteLast),
            (1, Opcode::RcSendOnly),
            (2, Opcode::RcReadRequest)
        ]
    );

    assert_eq!(p.drop_pkt(A, 2).psn(), 0);
    p.deliver_all(A);
    let nak = p.n[B].peek();
    assert_eq!(nak.len(), 1);
    assert_eq!(
        (nak[0].psn(), nak[0].syndrome()),
        (0, Some(AckSyndrome::Nak(NakCode::PsnSequenceError)))
    );
    assert_eq!(p.n[B].rq_psn(), 0);
    p.deliver_all(B);
    assert!(
        p.n[A].send_wcs().is_empty(),
        "WRITE acked before its last PSN"
    );
    assert_eq!(
        psn_ops(&p.n[A].peek()),
        [
            (0, Opcode::RcWriteLast),
            (1, Opcode::RcSendOnly),
            (2, Opcode::RcReadRequest)
        ]
    );
    let log = p.settle();
    assert_eq!(sent_by(&log, A).len(), 3);
    assert_eq!(
        sent_by(&log, B),
        [
            (0, Opcode::RcAck),
            (1, Opcode::RcAck),
            (2, Opcode::RcReadResponseFirst),
            (3, Opcode::RcReadResponseMiddle),
            (4, Opcode::RcReadResponseLast)
        ]
    );
    assert!(log
        .iter()
        .filter(|(f, x)| *f == B && x.opcode() == Opcode::RcAck)
        .all(|(_, x)| x.syndrome() == Some(ACK)));
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    assert_eq!(wcs[2].byte_len, 2500);
    let rwc = p.n[B].recv_wcs();
    assert_eq!(wc_summary(&rwc), [(70, WcStatus::Success, WcOpcode::Recv)]);
    assert_eq!(rwc[0].byte_len, 100);
    assert_eq!(p.n[B].read(0, 3000), wdata);
    assert_eq!(p.n[B].read(0x8000, 100), sdata);
    assert_eq!(p.n[A].read(0x2000, 2500), rdata);
    assert_eq!(p.n[B].rq_psn(), 5);
    let a_attr = p.n[A].eng.query_qp(p.n[A].qpn).expect("qp");
    assert_eq!(a_attr.sq_psn, 5);
    assert_eq!(p.n[A].count(Counter::SeqNaksReceived), 1);

    // The other way: B sends from 0xFFFFFF.
    let sdata = pattern(1500, 4);
    p.n[B].write(0x9000, &sdata);
    p.n[A].post_recv(p.now, 80, 0x8000, 2000);
    let (va, rkey) = (p.n[A].va(0xA000), p.n[A].mr.rkey);
    p.n[B].post(p.now, 4, SendOp::Send, (0x9000, 1500), (0, 0));
    p.n[B].post(p.now, 5, SendOp::Write, (0x9000, 10), (va, rkey));
    let log = p.settle();
    assert_eq!(
        sent_by(&log, B),
        [
            (0xFF_FFFF, Opcode::RcSendFirst),
            (0, Opcode::RcSendLast),
            (1, Opcode::RcWriteOnly)
        ]
    );
    assert_eq!(sent_by(&log, A), [(0, Opcode::RcAck), (1, Opcode::RcAck)]);
    assert_eq!(
        wc_summary(&p.n[B].send_wcs()),
        [
            (4, WcStatus::Success, WcOpcode::Send),
            (5, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    let rwc = p.n[A].recv_wcs();
    assert_eq!(wc_summary(&rwc), [(80, WcStatus::Success, WcOpcode::Recv)]);
    assert_eq!(rwc[0].byte_len, 1500);
    assert_eq!(p.n[A].read(0x8000, 1500), sdata);
    assert_eq!(p.n[A].read(0xA000, 10), sdata[..10]);
    assert_eq!(p.n[A].rq_psn(), 2);
    assert_eq!(p.next_deadline(), None);
}

//! Duplicate READ and atomic requests at the responder: answered again
//! from what it remembers, never executed twice.

use super::{ack_timeout, opts, pattern, psn_ops, wc_summary, Pair, Solo, A, B, MTU};
use crate::engine::{Counter, SendOp};
use crate::types::{WcOpcode, WcStatus};
use urdma_wire::{Opcode, Reth};

/// Read the u64 at `off` of node `i`'s MR (native byte order, as atomics
/// store it).
fn word(p: &Pair, i: usize, off: usize) -> u64 {
    u64::from_ne_bytes(p.n[i].read(off, 8).try_into().expect("8 bytes"))
}

/// Rule: an atomic request retransmitted with the same PSN (its ACK was
/// lost, the requester's ACK timeout fired) is answered from the
/// responder's atomic cache with the original value, and the target
/// changes only once; network duplicates of the retransmission get the
/// same answer. The requester completes the FETCH_ADD with the original
/// value and ignores the extra atomic ACKs.
#[test]
fn duplicate_fetch_add_is_replayed_from_the_cache() {
    let mut p = Pair::new(0x700, &opts(), 0x800, &opts());
    p.n[B].write(0x100, &100u64.to_ne_bytes());
    let (va, rkey) = (p.n[B].va(0x100), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::FetchAdd { add: 5 }, (0x200, 8), (va, rkey));
    let req = p.deliver_all(A);
    assert_eq!(psn_ops(&req), [(0x700, Opcode::RcFetchAdd)]);
    assert_eq!(word(&p, B, 0x100), 105);
    let ack = p.drop_pkt(B, 0);
    assert_eq!(ack.opcode(), Opcode::RcAtomicAck);
    assert_eq!(ack.repr.atomic_ack_eth.map(|a| a.orig), Some(100));

    assert_eq!(p.fire(), ack_timeout(10));
    let again = p.n[A].peek();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].data, req[0].data, "the same request, same PSN");
    p.duplicate(A, 0);
    p.deliver_all(A);
    assert_eq!(word(&p, B, 0x100), 105, "the atomic ran twice");
    assert_eq!(p.n[B].count(Counter::Duplicates), 2);
    assert_eq!(p.n[B].rq_psn(), 0x701);
    let answers = p.n[B].peek();
    assert_eq!(answers.len(), 2);
    for a in &answers {
        assert_eq!(a.data, ack.data, "a replay differs from the first answer");
    }
    p.deliver_all(B);
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [(1, WcStatus::Success, WcOpcode::FetchAdd)]
    );
    assert_eq!(wcs[0].byte_len, 8);
    assert_eq!(word(&p, A, 0x200), 100);
    assert_eq!(p.n[A].count(Counter::Duplicates), 1, "second ACK dropped");
    assert_eq!(p.next_deadline(), None);
}

/// Rule: a duplicate COMPARE_SWAP is answered with the value the first
/// execution saw, not re-executed (a second execution would compare
/// against the swapped value and answer it instead).
#[test]
fn duplicate_compare_swap_is_not_executed_again() {
    let mut p = Pair::new(0x10, &opts(), 0x20, &opts());
    p.n[B].write(0, &7u64.to_ne_bytes());
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    let op = SendOp::CompSwap {
        compare: 7,
        swap: 9,
    };
    p.n[A].post(0, 1, op, (0x40, 8), (va, rkey));
    p.duplicate(A, 0);
    p.deliver_all(A);
    assert_eq!(word(&p, B, 0), 9);
    let answers = p.n[B].peek();
    assert_eq!(answers.len(), 2);
    for a in &answers {
        assert_eq!((a.opcode(), a.psn()), (Opcode::RcAtomicAck, 0x10));
        assert_eq!(a.repr.atomic_ack_eth.map(|x| x.orig), Some(7));
    }
    p.settle();
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::CompSwap)]
    );
    assert_eq!(word(&p, A, 0x40), 7);
}

/// Rule: a READ request retransmitted with the same PSN (all its responses
/// were lost) is answered again from the responder's READ history: the
/// same response packets, byte for byte, without moving its expected PSN
/// or message sequence number; the READ then completes with the data.
#[test]
fn duplicate_read_is_answered_again() {
    let mut p = Pair::new(0x900, &opts(), 0xA00, &opts());
    let data = pattern(2500, 9);
    p.n[B].write(0x1000, &data);
    let (va, rkey) = (p.n[B].va(0x1000), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, 2500), (va, rkey));
    let req = p.deliver_all(A);
    assert_eq!(psn_ops(&req), [(0x900, Opcode::RcReadRequest)]);
    assert_eq!(p.n[B].rq_psn(), 0x903);
    let first = p.take_all(B);
    assert_eq!(
        psn_ops(&first),
        [
            (0x900, Opcode::RcReadResponseFirst),
            (0x901, Opcode::RcReadResponseMiddle),
            (0x902, Opcode::RcReadResponseLast)
        ]
    );

    assert_eq!(p.fire(), ack_timeout(10));
    let again = p.deliver_all(A);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].data, req[0].data, "the same request, same PSN");
    assert_eq!(p.n[B].count(Counter::Duplicates), 1);
    assert_eq!(p.n[B].rq_psn(), 0x903);
    let second = p.n[B].peek();
    assert_eq!(second.len(), 3);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.data, b.data, "answer to the duplicate differs");
    }
    p.deliver_all(B);
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [(1, WcStatus::Success, WcOpcode::RdmaRead)]
    );
    assert_eq!(wcs[0].byte_len, 2500);
    assert_eq!(p.n[A].read(0, 2500), data);
}

/// Rule: when a READ response in the middle is lost, the requester asks
/// again from the missing PSN (a READ request at that PSN for the rest of
/// the original range); the responder answers it from its READ history
/// as a new response sequence starting at that PSN, with the data from
/// the matching offset.
#[test]
fn read_resumed_from_a_lost_middle_response() {
    let mut p = Pair::new(0xB00, &opts(), 0xC00, &opts());
    let data = pattern(2500, 4);
    p.n[B].write(0x1000, &data);
    let (va, rkey) = (p.n[B].va(0x1000), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, 2500), (va, rkey));
    p.deliver_all(A);
    assert_eq!(p.drop_pkt(B, 1).psn(), 0xB01);
    p.deliver_all(B);
    let resume = p.n[A].peek();
    assert_eq!(psn_ops(&resume), [(0xB01, Opcode::RcReadRequest)]);
    let reth = resume[0].repr.reth.expect("RETH");
    assert_eq!(reth.va, va + MTU as u64);
    assert_eq!(reth.dma_len as usize, 2500 - MTU);

    p.deliver_all(A);
    assert_eq!(p.n[B].count(Counter::Duplicates), 1);
    assert_eq!(p.n[B].rq_psn(), 0xB03);
    let answer = p.n[B].peek();
    assert_eq!(
        psn_ops(&answer),
        [
            (0xB01, Opcode::RcReadResponseFirst),
            (0xB02, Opcode::RcReadResponseLast)
        ]
    );
    assert_eq!(answer[0].payload, data[MTU..2 * MTU]);
    p.deliver_all(B);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaRead)]
    );
    assert_eq!(p.n[A].read(0, 2500), data);
}

/// Rule: copies of one READ request that arrive in one receive batch (a
/// requester that timed out several times while the first answer was
/// being built) are answered once, not once each; a copy in a later batch
/// is answered again.
#[test]
fn copies_of_a_read_in_one_batch_are_answered_once() {
    let mut s = Solo::new(&opts());
    s.node.write(0x1000, &pattern(2500, 4));
    let mut req = s.bth(Opcode::RcReadRequest, 0);
    req.reth = Some(Reth {
        va: s.node.va(0x1000),
        rkey: s.node.mr.rkey,
        dma_len: 2500,
    });
    s.send(&req, &[]);
    let first = s.recv_all();
    assert_eq!(first.len(), 3, "2500 bytes at MTU {MTU}");
    s.now += 1_000_000;
    s.send_batch(&[(&req, &[]), (&req, &[]), (&req, &[])]);
    let again = s.recv_all();
    assert_eq!(
        psn_ops(&again),
        psn_ops(&first),
        "one answer for three copies"
    );
    assert_eq!(s.node.count(Counter::Duplicates), 3);
    s.now += 1_000_000;
    s.send(&req, &[]);
    assert_eq!(s.recv_all().len(), 3, "a later copy is answered again");
}

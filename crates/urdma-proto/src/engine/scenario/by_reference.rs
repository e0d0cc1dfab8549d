//! Payloads by reference between devices of one NIC
//! ([`crate::engine::dma`]): two engines whose QPs were connected as
//! internal peers, the datagrams handed over as internal loopback hands
//! them ([`Engine::handle_internal_batch`]).

use super::{opts, pattern, Node, Pair, A, B, MR_LEN};
use crate::engine::command::ModifyQp;
use crate::engine::dma::Delivered;
use crate::engine::{Counter, Engine, SendOp, Transmit, INTERNAL_UNIT};
use crate::types::{QpAttrMask, QpState, QpType, WcOpcode, WcStatus};
use crate::verbs::QpAttr;
use std::sync::Arc;
use urdma_wire::{BTH_LEN, ICRC_LEN, RETH_LEN};

/// Two engines whose `qp_type` QPs take each other for devices of the
/// same NIC.
fn internal_pair(qp_type: QpType) -> Pair {
    let (mut a, mut b) = (Node::of_type(1, qp_type), Node::of_type(2, qp_type));
    for n in [&mut a, &mut b] {
        n.eng.set_internal_peer_test(Arc::new(|_| true));
    }
    let (aa, ab, qa, qb) = (a.addr(), b.addr(), a.qpn, b.qpn);
    a.connect(0, ab, qb, 100, &opts());
    b.connect(100, aa, qa, 0, &opts());
    Pair { now: 0, n: [a, b] }
}

/// What internal loopback hands over of `t`, sent from `src`.
fn delivered(src: std::net::SocketAddr, t: &Transmit) -> Delivered<'_> {
    Delivered {
        src,
        data: &t.data,
        source: t.source.as_ref(),
        sink: t.sink.as_ref(),
    }
}

/// Hand the first datagram `from` queued to the other engine as internal
/// loopback does; returns whether it held its payload by reference.
fn hand_over(p: &mut Pair, from: usize) -> bool {
    let t = p.n[from].out.pop_front().expect("a queued datagram");
    let src = p.n[from].addr();
    let to = &mut p.n[1 - from];
    to.eng.handle_internal_batch(p.now, [delivered(src, &t)]);
    to.collect();
    t.source.is_some()
}

/// `(wr_id, status, opcode)` of the completions on A's send queue.
fn a_sent(p: &Pair) -> Vec<(u64, WcStatus, WcOpcode)> {
    super::wc_summary(&p.n[A].send_wcs())
}

/// A device counter of engine `e`.
fn device_count(e: &Engine, c: Counter) -> u64 {
    e.counters()[c]
}

/// An RC WRITE's packet carries its headers only; the receiving device
/// copies the payload from the sender's region into its own, answers,
/// and the WRITE completes.
#[test]
fn an_rc_write_is_copied_from_the_senders_region() {
    let mut p = internal_pair(QpType::Rc);
    let data = pattern(8192, 3);
    p.n[A].write(0, &data);
    let to = (p.n[B].va(4096), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, data.len()), to);
    let headers = p.n[A].out[0].data.len();
    assert_eq!(headers, BTH_LEN + RETH_LEN + ICRC_LEN);
    assert!(hand_over(&mut p, A), "the payload stayed in A's region");
    assert_eq!(p.n[B].read(4096, data.len()), data);
    assert!(!hand_over(&mut p, B), "an ACK has no payload");
    assert_eq!(a_sent(&p), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
}

/// A SEND by reference lands in the receive WQE it consumes.
#[test]
fn an_rc_send_is_copied_into_its_receive_buffer() {
    let mut p = internal_pair(QpType::Rc);
    let data = pattern(4096, 9);
    p.n[A].write(8192, &data);
    p.n[B].post_recv(0, 7, 16384, 8192);
    p.n[A].post(0, 1, SendOp::Send, (8192, data.len()), (0, 0));
    assert!(hand_over(&mut p, A));
    assert_eq!(p.n[B].read(16384, data.len()), data);
    let wcs = p.n[B].recv_wcs();
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::Success));
    assert_eq!(wcs[0].byte_len as usize, data.len());
}

/// A READ request names the requester's buffer; the responding device
/// copies the data straight into it when it executes the READ, and the
/// responses name the bytes in place. A WRITE the requester sent after
/// the READ to the same bytes, handled in the same batch, does not change
/// what the READ returns (IBTA executes an RC QP's requests in order).
#[test]
fn read_data_is_placed_in_the_reads_turn() {
    let mut p = internal_pair(QpType::Rc);
    let len = 16384;
    let before = pattern(len, 5);
    p.n[B].write(0, &before);
    p.n[A].write(MR_LEN - 4096, &pattern(4096, 6));
    let at_b = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, len), at_b);
    p.n[A].post(0, 2, SendOp::Write, (MR_LEN - 4096, 4096), at_b);
    // Both requests reach B in one batch.
    let src = p.n[A].addr();
    let reqs: Vec<_> = p.n[A].out.drain(..).collect();
    assert!(reqs[0].sink.is_some(), "the READ names its buffer");
    assert!(reqs[1].source.is_some(), "the WRITE's payload by reference");
    p.n[B]
        .eng
        .handle_internal_batch(0, reqs.iter().map(|t| delivered(src, t)));
    p.n[B].collect();
    assert!(p.n[B].read(0, 4096) == pattern(4096, 6), "the WRITE ran");
    assert!(p.n[A].read(0, len) == before, "placed in the READ's turn");
    assert!(
        hand_over(&mut p, B),
        "the response names the bytes in place"
    );
    while !p.n[B].out.is_empty() {
        hand_over(&mut p, B);
    }
    assert!(p.n[A].read(0, len) == before);
    assert_eq!(
        a_sent(&p),
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead),
            (2, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
}

/// A READ of more than one piece is placed whole and answered piece by
/// piece, each naming its bytes in place.
#[test]
fn a_read_of_two_pieces_is_placed_whole() {
    let mut p = internal_pair(QpType::Rc);
    let len = INTERNAL_UNIT + 4096;
    let data = pattern(len, 4);
    p.n[B].write(0, &data);
    let at_b = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, len), at_b);
    assert!(!hand_over(&mut p, A));
    assert!(
        p.n[A].read(0, len) == data,
        "placed when B executed the READ"
    );
    assert!(hand_over(&mut p, B));
    assert!(hand_over(&mut p, B));
    assert_eq!(a_sent(&p), [(1, WcStatus::Success, WcOpcode::RdmaRead)]);
}

/// A placed READ whose last piece is too short to travel by reference
/// (here 6 bytes) carries that piece's bytes from the region, and
/// completes with all of them.
#[test]
fn a_placed_read_sends_a_short_last_piece_in_the_packet() {
    let mut p = internal_pair(QpType::Rc);
    let len = INTERNAL_UNIT + 6;
    let data = pattern(len, 8);
    p.n[B].write(0, &data);
    let at_b = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, len), at_b);
    assert!(!hand_over(&mut p, A));
    assert!(hand_over(&mut p, B), "the first piece by reference");
    assert!(!hand_over(&mut p, B), "the short one in the packet");
    assert_eq!(a_sent(&p), [(1, WcStatus::Success, WcOpcode::RdmaRead)]);
    assert!(p.n[A].read(0, len) == data);
}

/// A READ whose buffer at the requester spans two scatter elements gets
/// responses that carry their bytes.
#[test]
fn a_read_into_two_buffers_gets_its_bytes_in_the_responses() {
    let mut p = internal_pair(QpType::Rc);
    let data = pattern(8192, 8);
    p.n[B].write(0, &data);
    let at_b = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post_sgl(0, 1, SendOp::Read, &[(0, 4096), (16384, 4096)], at_b);
    assert!(p.n[A].out[0].sink.is_none());
    assert!(!hand_over(&mut p, A));
    assert!(!hand_over(&mut p, B), "the response carries its bytes");
    assert_eq!(p.n[A].read(0, 4096), data[..4096]);
    assert_eq!(p.n[A].read(16384, 4096), data[4096..]);
}

/// A packet whose source region was deregistered before the receiving
/// device took it is lost, as on a link: counted as dropped, nothing
/// written, no answer.
#[test]
fn a_payload_deregistered_in_flight_is_lost() {
    let mut p = internal_pair(QpType::Rc);
    p.n[A].write(0, &pattern(4096, 1));
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 4096), to);
    p.n[A].mr.mem.invalidate();
    let before = device_count(&p.n[B].eng, Counter::Dropped);
    assert!(hand_over(&mut p, A));
    assert_eq!(device_count(&p.n[B].eng, Counter::Dropped), before + 1);
    assert_eq!(p.n[B].read(0, 4096), vec![0; 4096]);
    assert!(p.n[B].out.is_empty(), "no ACK or NAK");
    assert_eq!(p.n[B].rq_psn(), 0, "the packet is still expected");
}

/// A WRITE flushed before its receiver took its payload (the QP went to
/// ERR) ended for the program, whose buffer may hold other bytes by now:
/// its packet is lost, as on a link, and nothing is written.
#[test]
fn a_payload_of_a_flushed_request_is_lost() {
    let mut p = internal_pair(QpType::Rc);
    p.n[A].write(0, &pattern(4096, 1));
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 4096), to);
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let qpn = p.n[A].qpn;
    let mask = QpAttrMask::STATE;
    p.n[A]
        .eng
        .call(0, ModifyQp { qpn, attr, mask })
        .expect("modify");
    assert_eq!(a_sent(&p)[0].1, WcStatus::WrFlushErr);
    p.n[A].write(0, &pattern(4096, 2));
    let before = device_count(&p.n[B].eng, Counter::Dropped);
    assert!(hand_over(&mut p, A));
    assert_eq!(device_count(&p.n[B].eng, Counter::Dropped), before + 1);
    assert_eq!(p.n[B].read(0, 4096), vec![0; 4096]);
    assert!(p.n[B].out.is_empty(), "no ACK or NAK");
}

/// UC completes a WRITE once it is sent, before its receiver has taken
/// it: its payloads always travel in the packet.
#[test]
fn uc_payloads_travel_in_the_packet() {
    let mut p = internal_pair(QpType::Uc);
    let data = pattern(4096, 2);
    p.n[A].write(0, &data);
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, data.len()), to);
    assert!(!hand_over(&mut p, A));
    assert_eq!(p.n[B].read(0, data.len()), data);
}

/// Short payloads are copied into their packet.
#[test]
fn short_payloads_travel_in_the_packet() {
    let mut p = internal_pair(QpType::Rc);
    p.n[A].write(0, b"short");
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 5), to);
    assert!(!hand_over(&mut p, A));
    assert_eq!(p.n[B].read(0, 5), b"short");
}

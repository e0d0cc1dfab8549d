//! Payloads by reference between devices of one NIC
//! ([`crate::engine::dma`]): two engines whose QPs were connected as
//! internal peers, the datagrams handed over as internal loopback hands
//! them ([`Engine::handle_internal_batch`]).

use super::{opts, pattern, Node, Pair, A, B, MR_LEN};
use crate::engine::{Counter, Engine, SendOp, INTERNAL_UNIT};
use crate::types::{QpType, WcOpcode, WcStatus};
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

/// Hand the first datagram `from` queued to the other engine as internal
/// loopback does; returns whether it held its payload by reference.
fn hand_over(p: &mut Pair, from: usize) -> bool {
    let t = p.n[from].out.pop_front().expect("a queued datagram");
    let src = p.n[from].addr();
    let to = &mut p.n[1 - from];
    to.eng
        .handle_internal_batch(p.now, [(src, t.data.as_slice(), t.source.as_ref())]);
    to.collect();
    t.source.is_some()
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
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        super::wc_summary(&wcs),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
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

/// READ responses leave their payload in the responder's region and land
/// in the requester's memory; a READ longer than a piece takes several.
#[test]
fn read_responses_are_copied_from_the_responders_region() {
    let mut p = internal_pair(QpType::Rc);
    let len = INTERNAL_UNIT + 4096;
    assert!(len <= MR_LEN);
    let data = pattern(len, 5);
    p.n[B].write(0, &data);
    let from = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Read, (0, len), from);
    assert!(!hand_over(&mut p, A), "a READ request has no payload");
    assert!(hand_over(&mut p, B));
    assert!(hand_over(&mut p, B));
    assert_eq!(p.n[A].read(0, len), data);
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        super::wc_summary(&wcs),
        [(1, WcStatus::Success, WcOpcode::RdmaRead)]
    );
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

//! How the requester takes responses: coalesced and implicit
//! acknowledgements, ACKs for PSNs never sent, error NAKs and READ
//! responses that do not fit the request.

use super::{opts, pattern, psn_ops, wc_summary, Pair, Solo, A, B};
use crate::engine::{Counter, SendOp};
use crate::types::{QpState, WcOpcode, WcStatus};
use urdma_wire::{AckSyndrome, Aeth, NakCode, Opcode};

const ACK: AckSyndrome = AckSyndrome::Ack { credits: 31 };

/// Rule: a READ response for a later PSN implicitly acknowledges every
/// SEND and WRITE before it. A sends a SEND, a WRITE and a READ; both ACKs
/// B sends are lost and only the READ response arrives: all three WQEs
/// complete, in order, and no timer is left.
#[test]
fn read_response_acknowledges_earlier_send_and_write() {
    let mut p = Pair::new(0x500, &opts(), 0x600, &opts());
    p.n[A].write(0, &pattern(300, 1));
    let remote = pattern(100, 2);
    p.n[B].write(0x2000, &remote);
    p.n[B].post_recv(0, 9, 0x4000, 200);
    let (va, rkey) = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Send, (0, 100), (0, 0));
    p.n[A].post(0, 2, SendOp::Write, (100, 100), (va + 0x1000, rkey));
    p.n[A].post(0, 3, SendOp::Read, (0x800, 100), (va + 0x2000, rkey));
    let req = p.deliver_all(A);
    assert_eq!(
        psn_ops(&req),
        [
            (0x500, Opcode::RcSendOnly),
            (0x501, Opcode::RcWriteOnly),
            (0x502, Opcode::RcReadRequest)
        ]
    );
    let resp = p.n[B].peek();
    assert_eq!(
        psn_ops(&resp),
        [
            (0x500, Opcode::RcAck),
            (0x501, Opcode::RcAck),
            (0x502, Opcode::RcReadResponseOnly)
        ]
    );
    p.drop_pkt(B, 0);
    p.drop_pkt(B, 0);
    p.deliver_all(B);
    let wcs = p.n[A].send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    assert_eq!(wcs[2].byte_len, 100);
    assert_eq!(p.n[A].read(0x800, 100), remote);
    assert_eq!(p.n[A].eng.next_deadline(), None);
    assert!(p.n[A].out.is_empty(), "nothing resent");
}

/// Rule (ported from the e2e case `rawresp_implicit_ack`): one ACK of the
/// last PSN completes every earlier WR (WRITE, WRITE, SEND); a READ
/// response implicitly acknowledges the WRITE before it, and the READ
/// completes with its byte count and data.
#[test]
fn coalesced_ack_and_read_response_complete_earlier_wrs() {
    let mut s = Solo::new(&opts());
    s.node.post(0, 1, SendOp::Write, (0, 100), (0x1000, 5));
    s.node.post(0, 2, SendOp::Write, (0, 100), (0x1000, 5));
    s.node.post(0, 3, SendOp::Send, (0, 100), (0, 0));
    let psns: Vec<u32> = s.recv_all().iter().map(|q| q.psn()).collect();
    assert_eq!(psns, [s.at(0), s.at(1), s.at(2)]);
    s.ack(s.at(2), 3);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaWrite),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    s.node.post(0, 4, SendOp::Write, (0, 100), (0x1000, 5));
    s.node.post(0, 5, SendOp::Read, (1000, 8), (0x2000, 5));
    assert_eq!(s.must_recv().psn(), s.at(3));
    let rd = s.must_recv();
    assert_eq!((rd.opcode(), rd.psn()), (Opcode::RcReadRequest, s.at(4)));
    let mut resp = s.bth(Opcode::RcReadResponseOnly, s.at(4));
    resp.aeth = Some(Aeth {
        syndrome: ACK,
        msn: 5,
    });
    s.send(&resp, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let wcs = s.node.send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [
            (4, WcStatus::Success, WcOpcode::RdmaWrite),
            (5, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    assert_eq!(wcs[1].byte_len, 8);
    assert_eq!(s.node.read(1000, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// Rule (ported from the e2e case `rawresp_ghost_ack_and_access_nak`): an
/// ACK for a PSN never sent is dropped and completes nothing; a remote
/// access error NAK fails the WR it names with REM_ACCESS_ERR (the NAK
/// syndrome as vendor error), flushes the WR behind it with WR_FLUSH_ERR
/// and moves the QP to ERR.
#[test]
fn ghost_ack_ignored_and_access_nak_fails_the_wr() {
    let mut s = Solo::new(&opts());
    s.ack(s.at(1000), 9);
    assert_eq!(s.node.count(Counter::Dropped), 1);
    s.node.post(0, 1, SendOp::Write, (0, 10), (0x1000, 5));
    s.node.post(0, 2, SendOp::Write, (0, 10), (0x1000, 5));
    assert_eq!(s.must_recv().psn(), s.at(0));
    assert_eq!(s.must_recv().psn(), s.at(1));
    s.ack(s.at(1000), 9);
    assert!(s.node.send_wcs().is_empty(), "ghost ACK completed a WR");
    assert_eq!(s.node.count(Counter::Dropped), 2);
    let nak = AckSyndrome::Nak(NakCode::RemoteAccessError);
    s.aeth(s.at(0), nak, 0);
    let wcs = s.node.send_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [
            (1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite),
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaWrite)
        ]
    );
    assert_eq!(wcs[0].vendor_err, u32::from(nak.to_u8()));
    assert_eq!(s.node.count(Counter::ErrorNaksReceived), 1);
    assert_eq!(s.node.state(), QpState::Err);
    assert_eq!(s.node.eng.next_deadline(), None);
}

/// Rule (ported from the e2e case `rawresp_short_read_response`): a READ
/// response shorter than the READ asked for fails the READ with
/// BAD_RESP_ERR and writes nothing past the data received.
#[test]
fn short_read_response_is_a_bad_response() {
    let mut s = Solo::new(&opts());
    s.node.write(0, &[0xEE; 200]);
    s.node.post(0, 1, SendOp::Read, (0, 100), (0x2000, 5));
    let rd = s.must_recv();
    assert_eq!(rd.repr.reth.map(|r| r.dma_len), Some(100));
    let mut resp = s.bth(Opcode::RcReadResponseOnly, rd.psn());
    resp.aeth = Some(Aeth {
        syndrome: ACK,
        msn: 1,
    });
    s.send(&resp, &[1; 50]);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::BadRespErr, WcOpcode::RdmaRead)]
    );
    let b = s.node.read(0, 200);
    assert!(
        b[100..].iter().all(|&x| x == 0xEE),
        "bytes past the READ buffer written"
    );
    assert_eq!(s.node.state(), QpState::Err);
}

/// Rule: an RC QP knows its peer by address, never by UDP source port
/// (RoCEv2 senders choose it per QP or per flow). An ACK from another
/// host is dropped and counted; the same ACK from the peer's address and
/// any source port completes the WRITE.
#[test]
fn peer_known_by_address_whatever_its_source_port() {
    let mut s = Solo::new(&opts());
    s.node.post(0, 1, SendOp::Write, (0, 16), (0x1000, 0x77));
    let w = s.must_recv();
    assert_eq!(w.opcode(), Opcode::RcWriteOnly);
    let mut ack = s.bth(Opcode::RcAck, w.psn());
    ack.aeth = Some(Aeth {
        syndrome: ACK,
        msn: 1,
    });
    let dropped = s.node.count(Counter::Dropped);
    let stranger = std::net::SocketAddr::from(([127, 0, 0, 8], 4791));
    s.send_from(stranger, &ack, &[]);
    assert_eq!(s.node.count(Counter::Dropped), dropped + 1);
    assert!(
        s.node.send_wcs().is_empty(),
        "a stranger's ACK completed the WRITE"
    );
    let other_port = std::net::SocketAddr::new(s.peer.ip(), 49_152);
    s.send_from(other_port, &ack, &[]);
    assert_eq!(
        wc_summary(&s.node.send_wcs()),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
}

use super::*;
use urdma_wire::cm::{Dreq, Mra, Rej};

const A: &str = "169.254.0.1:4791";
const B: &str = "169.254.0.2:4791";
const SERVICE: u64 = 0x0106_4A4B;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn cm(guid: u64) -> Cm {
    let ip = if guid == 1 { A } else { B };
    let mut c = Cm::new(addr(ip).ip(), guid, guid * 1000);
    c.set_packet_lifetime(0);
    c
}

fn params(qpn: u32) -> ConnectParams {
    ConnectParams {
        // 4.096 µs × 2^10 ≈ 4.2 ms per try.
        response_timeout: 10,
        max_retries: 3,
        private_data: b"hello".to_vec(),
        ..ConnectParams::rc(addr(B), SERVICE, qpn, 0x1234)
    }
}

/// Move every MAD `from` sent to `to` (all of them, or those `keep` lets
/// through); returns how many were sent.
fn deliver(
    now: u64,
    from: &mut Cm,
    from_addr: &str,
    to: &mut Cm,
    keep: impl Fn(&CmMad) -> bool,
) -> usize {
    let out: Vec<Outgoing> = from.drain_tx().collect();
    for o in &out {
        if keep(&o.mad) {
            to.handle(now, addr(from_addr), &o.mad);
        }
    }
    out.len()
}

fn all(_: &CmMad) -> bool {
    true
}

fn events(c: &mut Cm) -> Vec<CmEvent> {
    c.take_events().collect()
}

/// The connection of the one connect request `c` reported.
fn request(c: &mut Cm) -> ConnId {
    match &events(c)[..] {
        [CmEvent::ConnectRequest { id, .. }] => *id,
        ev => panic!("no connect request: {ev:?}"),
    }
}

/// a (QP 0x11) sends a REQ that b, listening, reports; returns (a's id,
/// b's id).
fn requested(a: &mut Cm, b: &mut Cm) -> (ConnId, ConnId) {
    b.listen(SERVICE).unwrap();
    let ida = a.connect(0, &params(0x11)).unwrap();
    deliver(0, a, A, b, all);
    (ida, request(b))
}

/// Connect a (QP 0x11) to b (QP 0x22); returns (a's id, b's id).
fn establish(a: &mut Cm, b: &mut Cm) -> (ConnId, ConnId) {
    b.listen(SERVICE).unwrap();
    let ida = a.connect(0, &params(0x11)).unwrap();
    assert_eq!(deliver(0, a, A, b, all), 1);
    let [CmEvent::ConnectRequest { id: idb, req, .. }] = &events(b)[..] else {
        panic!("no connect request");
    };
    assert_eq!((req.local_qpn, req.starting_psn), (0x11, 0x1234));
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(
        req.primary.local_gid,
        crate::verbs::Gid::from_ip(addr(A).ip()).0
    );
    assert_eq!(req.primary.remote_gid[10..], [0xFF, 0xFF, 169, 254, 0, 2]);
    assert_eq!(
        (req.primary.hop_limit, req.primary.local_ack_timeout),
        (64, 14)
    );
    let accept = AcceptParams {
        qpn: 0x22,
        starting_psn: 0x5678,
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 7,
        ..AcceptParams::default()
    };
    b.accept(0, *idb, &accept).unwrap();
    deliver(0, b, B, a, all);
    let [CmEvent::ConnectResponse { id, rep }] = &events(a)[..] else {
        panic!("no connect response");
    };
    assert_eq!((*id, rep.local_qpn, rep.starting_psn), (ida, 0x22, 0x5678));
    a.ready_to_use(ida, &[]).unwrap();
    assert_eq!(events(a), vec![CmEvent::Established { id: ida }]);
    deliver(0, a, A, b, all);
    assert_eq!(events(b), vec![CmEvent::Established { id: *idb }]);
    (ida, *idb)
}

#[test]
fn connect_accept_and_disconnect_end_in_timewait_on_both_sides() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    assert_eq!(a.state(ida), Some("ESTABLISHED"));
    assert_eq!(
        a.next_deadline(),
        None,
        "nothing to resend once established"
    );

    a.disconnect(0, ida, &[]).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    assert_eq!(events(&mut b), vec![CmEvent::Disconnected { id: idb }]);
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(events(&mut a), vec![CmEvent::Disconnected { id: ida }]);
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some("TIMEWAIT"), Some("TIMEWAIT"))
    );

    let end = a.next_deadline().unwrap().max(b.next_deadline().unwrap());
    a.on_timer(end);
    b.on_timer(end);
    assert_eq!(events(&mut a), vec![CmEvent::TimewaitExit { id: ida }]);
    assert_eq!(events(&mut b), vec![CmEvent::TimewaitExit { id: idb }]);
    assert_eq!((a.state(ida), b.state(idb)), (None, None));
}

#[test]
fn a_req_nobody_listens_for_is_rejected_with_reason_8() {
    let (mut a, mut b) = (cm(1), cm(2));
    let ida = a.connect(0, &params(0x11)).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    assert!(events(&mut b).is_empty());
    deliver(0, &mut b, B, &mut a, all);
    let ev = events(&mut a);
    assert!(matches!(
        &ev[..],
        [CmEvent::Rejected { id, reason: 8, .. }] if *id == ida
    ));
    assert_eq!(a.state(ida), None);
}

#[test]
fn a_lost_req_is_resent_with_its_tid_and_an_unanswered_one_becomes_unreachable() {
    let (mut a, mut b) = (cm(1), cm(2));
    b.listen(SERVICE).unwrap();
    let ida = a.connect(0, &params(0x11)).unwrap();
    let first: Vec<Outgoing> = a.drain_tx().collect();
    let deadline = a.next_deadline().unwrap();
    a.on_timer(deadline - 1);
    assert_eq!(a.drain_tx().count(), 0, "not before the response timeout");
    a.on_timer(deadline);
    let again: Vec<Outgoing> = a.drain_tx().collect();
    assert_eq!(again, first, "the same MAD, TID included");

    // Nothing answers: three more tries, then unreachable.
    let mut sent = 1;
    while let Some(d) = a.next_deadline() {
        a.on_timer(d);
        sent += a.drain_tx().count();
    }
    assert_eq!(sent, 3, "max_retries resends after the first");
    assert_eq!(events(&mut a), vec![CmEvent::Unreachable { id: ida }]);
    assert!(events(&mut b).is_empty());
}

#[test]
fn a_duplicate_req_while_the_consumer_decides_gets_an_mra_that_holds_the_requester() {
    let (mut a, mut b) = (cm(1), cm(2));
    b.listen(SERVICE).unwrap();
    let ida = a.connect(0, &params(0x11)).unwrap();
    let req: Vec<Outgoing> = a.drain_tx().collect();
    b.handle(0, addr(A), &req[0].mad);
    b.handle(1, addr(A), &req[0].mad);
    assert_eq!(
        events(&mut b).len(),
        1,
        "one connect request for both copies"
    );
    let mra: Vec<Outgoing> = b.drain_tx().collect();
    assert!(
        matches!(&mra[..], [Outgoing { mad: CmMad { msg: CmMessage::Mra(m), .. }, .. }]
        if m.remote_comm_id == ida && m.message_mraed == msg_ref::REQ)
    );
    let before = a.next_deadline().unwrap();
    a.handle(1, addr(B), &mra[0].mad);
    assert_eq!(a.state(ida), Some("MRA_REQ_RCVD"));
    assert!(
        a.next_deadline().unwrap() > before,
        "the MRA extends the wait"
    );
    a.on_timer(before);
    assert_eq!(a.drain_tx().count(), 0, "no resend while the MRA holds");
}

#[test]
fn a_lost_rtu_is_recovered_by_the_resent_rep() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = requested(&mut a, &mut b);
    b.accept(
        0,
        idb,
        &AcceptParams {
            qpn: 0x22,
            ..Default::default()
        },
    )
    .unwrap();
    deliver(0, &mut b, B, &mut a, all);
    a.ready_to_use(ida, &[]).unwrap();
    // The RTU is lost.
    assert_eq!(deliver(0, &mut a, A, &mut b, |_| false), 1);
    let d = b.next_deadline().unwrap();
    b.on_timer(d);
    deliver(d, &mut b, B, &mut a, all);
    // The established side answers the duplicate REP with the RTU again.
    deliver(d, &mut a, A, &mut b, all);
    events(&mut a);
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: idb }]);
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn first_data_establishes_the_passive_side_without_the_rtu() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (_, idb) = requested(&mut a, &mut b);
    assert!(b.established(idb).is_err(), "not before the REP");
    b.accept(0, idb, &AcceptParams::default()).unwrap();
    b.established(idb).unwrap();
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: idb }]);
    assert_eq!(b.next_deadline(), None, "the REP is no longer resent");
}

#[test]
fn a_consumer_reject_carries_reason_and_private_data() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = requested(&mut a, &mut b);
    b.reject(idb, rej_reason::CONSUMER_DEFINED, b"busy")
        .unwrap();
    assert_eq!(b.state(idb), None);
    deliver(0, &mut b, B, &mut a, all);
    let ev = events(&mut a);
    let [CmEvent::Rejected {
        id,
        reason,
        private_data,
    }] = &ev[..]
    else {
        panic!("no reject: {ev:?}");
    };
    assert_eq!((*id, *reason), (ida, 28));
    assert_eq!(&private_data[..4], b"busy");
    assert_eq!(private_data.len(), REJ_PRIVATE_LEN);
}

#[test]
fn a_restarted_peer_reusing_its_qp_is_rejected_as_stale_and_the_old_connection_ends() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (_, idb) = establish(&mut a, &mut b);
    // a restarts: a new CM with the same GUID connects from the same QP.
    let mut a2 = Cm::new(addr(A).ip(), 1, 99);
    a2.set_packet_lifetime(0);
    let id2 = a2.connect(0, &params(0x11)).unwrap();
    deliver(0, &mut a2, A, &mut b, all);
    assert_eq!(events(&mut b), vec![CmEvent::Disconnected { id: idb }]);
    assert_eq!(b.state(idb), Some("DREQ_SENT"));
    let out: Vec<Outgoing> = b.drain_tx().collect();
    let rej = out.iter().find_map(|o| match &o.mad.msg {
        CmMessage::Rej(r) => Some(r.clone()),
        _ => None,
    });
    assert_eq!(rej.map(|r| (r.reason, r.remote_comm_id)), Some((10, id2)));
    assert!(out.iter().any(|o| matches!(o.mad.msg, CmMessage::Dreq(_))));
}

#[test]
fn dreqs_are_checked_against_the_qp_and_answered_when_the_connection_is_gone() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    let wrong = CmMad {
        tid: 5,
        msg: CmMessage::Dreq(Dreq {
            local_comm_id: ida,
            remote_comm_id: idb,
            remote_qpn: 0x99,
            ..Dreq::default()
        }),
    };
    b.handle(0, addr(A), &wrong);
    assert_eq!(b.drain_tx().count(), 0, "a DREQ for another QP is dropped");
    assert_eq!(b.state(idb), Some("ESTABLISHED"));
    let unknown = CmMad {
        tid: 6,
        msg: CmMessage::Dreq(Dreq {
            local_comm_id: 7,
            remote_comm_id: 0xDEAD,
            remote_qpn: 0x22,
            ..Dreq::default()
        }),
    };
    b.handle(0, addr(A), &unknown);
    let out: Vec<Outgoing> = b.drain_tx().collect();
    assert!(
        matches!(&out[..], [Outgoing { mad: CmMad { tid: 6, msg: CmMessage::Drep(d) }, .. }]
        if d.remote_comm_id == 7)
    );
    assert!(events(&mut b).is_empty());
}

#[test]
fn an_unanswered_dreq_still_disconnects() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, _) = establish(&mut a, &mut b);
    a.disconnect(0, ida, &[]).unwrap();
    while events(&mut a).is_empty() {
        let d = a.next_deadline().unwrap();
        a.on_timer(d);
    }
    assert_eq!(a.state(ida), Some("TIMEWAIT"));
}

#[test]
fn bad_calls_are_refused_and_change_nothing() {
    let (mut a, mut b) = (cm(1), cm(2));
    let mut p = params(0x11);
    p.private_data = vec![0; REQ_PRIVATE_LEN + 1];
    assert!(matches!(a.connect(0, &p), Err(Error::InvalidArgument(_))));
    p.private_data.clear();
    p.transport = 2;
    assert!(a.connect(0, &p).is_err());
    assert_eq!(a.drain_tx().count(), 0);
    assert!(matches!(
        a.accept(0, 42, &AcceptParams::default()),
        Err(Error::NotFound(_))
    ));
    let ida = a.connect(0, &params(0x11)).unwrap();
    assert!(a.ready_to_use(ida, &[]).is_err(), "no REP yet");
    assert!(a.disconnect(0, ida, &[]).is_err());
    assert!(
        a.reject(ida, 28, &[]).is_err(),
        "the active side rejects only a REP"
    );
    assert_eq!(a.state(ida), Some("REQ_SENT"));
    b.listen(SERVICE).unwrap();
    assert!(matches!(b.listen(SERVICE), Err(Error::Busy(_))));
    assert!(b.unlisten(SERVICE));
}

#[test]
fn crossing_dreqs_disconnect_both_sides_once() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    a.disconnect(0, ida, &[]).unwrap();
    b.disconnect(0, idb, &[]).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    deliver(0, &mut b, B, &mut a, all);
    // Each side answered the other's DREQ; the DREPs find TimeWait.
    deliver(0, &mut a, A, &mut b, all);
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(events(&mut a), vec![CmEvent::Disconnected { id: ida }]);
    assert_eq!(events(&mut b), vec![CmEvent::Disconnected { id: idb }]);
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some("TIMEWAIT"), Some("TIMEWAIT"))
    );
}

#[test]
fn a_req_left_unanswered_or_withdrawn_is_freed() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (_, idb) = requested(&mut a, &mut b);
    // Nobody answers: once the requester has surely given up, so does b.
    let d = b.next_deadline().expect("a deadline for the answer");
    b.on_timer(d);
    assert_eq!(events(&mut b), vec![CmEvent::Unreachable { id: idb }]);
    assert_eq!((b.state(idb), b.next_deadline()), (None, None));

    // The requester withdraws (REJ naming only its own ID).
    let ida = a.connect(0, &params(0x12)).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    let idb = request(&mut b);
    let rej = CmMad {
        tid: 9,
        msg: CmMessage::Rej(Rej {
            local_comm_id: ida,
            remote_comm_id: 0,
            reason: rej_reason::TIMEOUT,
            ..Rej::default()
        }),
    };
    b.handle(0, addr(A), &rej);
    let ev = events(&mut b);
    assert!(matches!(&ev[..], [CmEvent::Rejected { id, reason: 4, .. }] if *id == idb));
    assert_eq!(b.state(idb), None);
}

#[test]
fn an_accepted_connection_keeps_no_stale_deadline() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (_, idb) = establish(&mut a, &mut b);
    assert_eq!(b.state(idb), Some("ESTABLISHED"));
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn repeated_mras_keep_holding_the_requester() {
    let (mut a, mut b) = (cm(1), cm(2));
    b.listen(SERVICE).unwrap();
    let ida = a.connect(0, &params(0x11)).unwrap();
    let mra = |t| CmMad {
        tid: 1,
        msg: CmMessage::Mra(Mra {
            local_comm_id: 5,
            remote_comm_id: ida,
            message_mraed: msg_ref::REQ,
            service_timeout: t,
            ..Mra::default()
        }),
    };
    a.handle(0, addr(B), &mra(10));
    let first = a.next_deadline().unwrap();
    a.handle(first - 1, addr(B), &mra(10));
    assert!(
        a.next_deadline().unwrap() > first,
        "the second MRA restarts the wait"
    );
    assert_eq!(a.state(ida), Some("MRA_REQ_RCVD"));
    drop(b);
}

mod ends;
mod forged;

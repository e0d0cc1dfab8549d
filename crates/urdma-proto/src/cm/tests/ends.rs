//! Service ID resolution, and what a consumer that goes away leaves.

use super::*;
use urdma_wire::cm::{SIDR_STATUS_REJECT, SIDR_STATUS_UNSUPPORTED, SIDR_STATUS_VALID};

const UDP_QKEY: u32 = 0x0123_4567;

fn resolve_params() -> ResolveParams {
    ResolveParams {
        response_timeout: 10,
        max_retries: 2,
        private_data: b"who".to_vec(),
        ..ResolveParams::new(addr(B), SERVICE)
    }
}

/// a asks b for SERVICE; answers a's request and b's.
fn sidr_request(a: &mut Cm, b: &mut Cm) -> (ConnId, ConnId) {
    b.listen(SERVICE).unwrap();
    let ida = a.resolve(0, &resolve_params()).unwrap();
    assert_eq!(a.state(ida), Some("SIDR_REQ_SENT"));
    assert_eq!(deliver(0, a, A, b, all), 1);
    let [CmEvent::ServiceRequest { id, peer, req }] = &events(b)[..] else {
        panic!("no service request");
    };
    assert_eq!((*peer, req.service_id), (addr(A), SERVICE));
    assert_eq!(&req.private_data[..3], b"who");
    (ida, *id)
}

/// The one SIDR_REP a heard.
fn reply(a: &mut Cm, ida: ConnId) -> Box<SidrRep> {
    match events(a).pop() {
        Some(CmEvent::ServiceReply { id, rep }) if id == ida => rep,
        ev => panic!("no service reply: {ev:?}"),
    }
}

#[test]
fn sidr_answers_the_serving_qp_and_qkey_and_forgets_the_request() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = sidr_request(&mut a, &mut b);
    // A resent SIDR_REQ while the consumer decides is not a new request.
    a.on_timer(a.next_deadline().unwrap());
    assert_eq!(deliver(0, &mut a, A, &mut b, all), 1);
    assert_eq!(events(&mut b), vec![]);

    b.answer_resolve(idb, 0x33, UDP_QKEY, b"ok").unwrap();
    assert_eq!(b.state(idb), None);
    deliver(0, &mut b, B, &mut a, all);
    let rep = reply(&mut a, ida);
    assert_eq!(
        (rep.status, rep.qpn, rep.qkey, rep.service_id),
        (SIDR_STATUS_VALID, 0x33, UDP_QKEY, SERVICE)
    );
    assert_eq!(&rep.private_data[..2], b"ok");
    assert_eq!(a.state(ida), None);
    assert_eq!(a.next_deadline(), None, "nothing left to resend");
}

#[test]
fn sidr_for_a_service_nobody_serves_is_unsupported() {
    let (mut a, mut b) = (cm(1), cm(2));
    let ida = a.resolve(0, &resolve_params()).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    assert_eq!(events(&mut b), vec![]);
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(reply(&mut a, ida).status, SIDR_STATUS_UNSUPPORTED);
}

#[test]
fn a_rejected_or_abandoned_sidr_request_answers_reject() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = sidr_request(&mut a, &mut b);
    b.reject(idb, rej_reason::CONSUMER_DEFINED, b"no").unwrap();
    deliver(0, &mut b, B, &mut a, all);
    let rep = reply(&mut a, ida);
    assert_eq!(
        (rep.status, &rep.private_data[..2]),
        (SIDR_STATUS_REJECT, &b"no"[..])
    );

    let ida = a.resolve(0, &resolve_params()).unwrap();
    deliver(0, &mut a, A, &mut b, all);
    let [CmEvent::ServiceRequest { id: idb, .. }] = events(&mut b)[..] else {
        panic!("no service request");
    };
    assert!(b.destroy(0, idb));
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(reply(&mut a, ida).status, SIDR_STATUS_REJECT);
}

#[test]
fn an_unanswered_sidr_request_is_unreachable_after_its_retries() {
    let mut a = cm(1);
    let ida = a.resolve(0, &resolve_params()).unwrap();
    let mut sent = a.drain_tx().count();
    while let Some(t) = a.next_deadline() {
        a.on_timer(t);
        sent += a.drain_tx().count();
    }
    assert_eq!(sent, 3, "the SIDR_REQ and its 2 retries");
    assert_eq!(events(&mut a), vec![CmEvent::Unreachable { id: ida }]);
}

/// a sends a REQ that b accepts (QP 0x22); the REP is not delivered.
fn accepted(a: &mut Cm, b: &mut Cm) -> (ConnId, ConnId) {
    let (ida, idb) = requested(a, b);
    let accept = AcceptParams {
        qpn: 0x22,
        ..AcceptParams::default()
    };
    b.accept(0, idb, &accept).unwrap();
    (ida, idb)
}

/// Hand `rej` to `to` as from A.
fn take_rej(to: &mut Cm, rej: Rej) {
    to.handle(
        0,
        addr(A),
        &CmMad {
            tid: 1,
            msg: CmMessage::Rej(rej),
        },
    );
}

/// `c` reported exactly that connection `id` was rejected for `reason`.
fn assert_rejected(c: &mut Cm, id: ConnId, reason: u16) {
    let ev = events(c);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { id: i, reason: r, .. }] if *i == id && *r == reason),
        "{ev:?}"
    );
}

/// The REJ `from` sent.
fn rej_of(from: &mut Cm) -> Rej {
    let out: Vec<Outgoing> = from.drain_tx().collect();
    match &out[..] {
        [Outgoing {
            mad: CmMad {
                msg: CmMessage::Rej(r),
                ..
            },
            ..
        }] => r.clone(),
        o => panic!("not one REJ: {o:?}"),
    }
}

#[test]
fn a_requester_that_goes_away_withdraws_its_req_with_a_timeout_rej() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = requested(&mut a, &mut b);
    assert!(a.destroy(0, ida));
    assert_eq!(a.state(ida), None);
    let rej = rej_of(&mut a);
    assert_eq!(
        (rej.reason, rej.remote_comm_id, rej.rejected_info_length),
        (rej_reason::TIMEOUT, 0, 8)
    );
    assert_eq!(rej.ari[..8], 1u64.to_be_bytes());
    take_rej(&mut b, rej);
    assert_rejected(&mut b, idb, rej_reason::TIMEOUT);
    assert_eq!(b.state(idb), None);
}

#[test]
fn a_listener_that_goes_away_rejects_the_req_it_holds() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = requested(&mut a, &mut b);
    assert!(b.destroy(0, idb));
    deliver(0, &mut b, B, &mut a, all);
    assert_rejected(&mut a, ida, rej_reason::CONSUMER_DEFINED);
    assert_eq!((a.state(ida), b.state(idb)), (None, None));
}

#[test]
fn a_passive_side_that_goes_away_after_its_rep_rejects_and_waits_in_timewait() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = accepted(&mut a, &mut b);
    deliver(0, &mut b, B, &mut a, all);
    assert!(matches!(
        events(&mut a)[..],
        [CmEvent::ConnectResponse { .. }]
    ));
    assert!(b.destroy(0, idb));
    assert_eq!(b.state(idb), Some("TIMEWAIT"));
    deliver(0, &mut b, B, &mut a, all);
    assert_rejected(&mut a, ida, rej_reason::CONSUMER_DEFINED);
    assert_eq!(events(&mut b), vec![], "its consumer is gone");
}

/// Run `c`'s timers until nothing is left to do; answers its events.
fn run_out(c: &mut Cm) -> Vec<CmEvent> {
    let mut rounds = 0;
    while let Some(t) = c.next_deadline() {
        c.on_timer(t);
        c.drain_tx().for_each(drop);
        rounds += 1;
        assert!(rounds < 100, "timers never end");
    }
    events(c)
}

#[test]
fn a_consumer_that_goes_away_connected_sends_a_dreq_and_hears_nothing() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    assert!(a.destroy(0, ida));
    // As Linux's CM, it does not wait for the DREP.
    assert_eq!(a.state(ida), Some("TIMEWAIT"));
    deliver(0, &mut a, A, &mut b, all);
    assert_eq!(events(&mut b), vec![CmEvent::Disconnected { id: idb }]);
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(run_out(&mut a), vec![], "its consumer is gone");
    assert_eq!(a.state(ida), None);
    assert!(!a.destroy(0, 0x7777), "no such connection");
}

#[test]
fn a_dreq_for_a_destroyed_connection_in_timewait_is_answered() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    assert!(a.destroy(0, ida));
    a.drain_tx().for_each(drop);
    // b's DREQ crosses: a answers from TimeWait.
    b.disconnect(0, idb, &[]).unwrap();
    deliver(0, &mut b, B, &mut a, all);
    let out: Vec<Outgoing> = a.drain_tx().collect();
    assert!(
        matches!(&out[..], [Outgoing { mad: CmMad { msg: CmMessage::Drep(d), .. }, .. }]
            if d.remote_comm_id == idb),
        "{out:?}"
    );
    assert_eq!(events(&mut a), vec![]);
}

#[test]
fn a_destroy_in_every_state_leaves_no_event_and_no_timer_behind() {
    // REQ_SENT after an MRA (the REJ then names the peer's ID).
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = requested(&mut a, &mut b);
    let mut req: Vec<Outgoing> = a.drain_tx().collect();
    a.on_timer(a.next_deadline().unwrap());
    req.extend(a.drain_tx());
    b.handle(0, addr(A), &req[0].mad);
    deliver(0, &mut b, B, &mut a, all);
    assert_eq!(a.state(ida), Some("MRA_REQ_RCVD"));
    assert!(a.destroy(0, ida));
    let rej = rej_of(&mut a);
    assert_eq!((rej.remote_comm_id, rej.reason), (idb, rej_reason::TIMEOUT));
    take_rej(&mut b, rej);
    assert!(matches!(events(&mut b)[..], [CmEvent::Rejected { id, .. }] if id == idb));
    assert_eq!((run_out(&mut a), b.state(idb)), (vec![], None));

    // REP_RCVD: the consumer never sent the RTU.
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = accepted(&mut a, &mut b);
    deliver(0, &mut b, B, &mut a, all);
    events(&mut a);
    assert!(a.destroy(0, ida));
    deliver(0, &mut a, A, &mut b, all);
    assert_rejected(&mut b, idb, rej_reason::CONSUMER_DEFINED);
    assert_eq!(run_out(&mut a), vec![]);

    // SIDR_REQ_SENT: a late SIDR_REP is neither claimed nor reported.
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = sidr_request(&mut a, &mut b);
    assert!(a.destroy(0, ida));
    b.answer_resolve(idb, 0x33, UDP_QKEY, &[]).unwrap();
    let out: Vec<Outgoing> = b.drain_tx().collect();
    assert!(!a.claims(&out[0].mad));
    a.handle(0, addr(B), &out[0].mad);
    assert_eq!(run_out(&mut a), vec![]);
}

#[test]
fn a_rej_after_the_rtu_ends_the_connection_with_rejected() {
    // b destroys in REP_SENT while a, having sent its RTU (lost), is
    // established: a hears the reject, then nothing more.
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = accepted(&mut a, &mut b);
    deliver(0, &mut b, B, &mut a, all);
    events(&mut a);
    a.ready_to_use(ida, &[]).unwrap();
    events(&mut a);
    a.drain_tx().for_each(drop);
    assert!(b.destroy(0, idb));
    deliver(0, &mut b, B, &mut a, all);
    assert_rejected(&mut a, ida, rej_reason::CONSUMER_DEFINED);
    assert_eq!(a.state(ida), Some("TIMEWAIT"));
    assert_eq!(run_out(&mut a), vec![]);
}

#[test]
fn sidr_messages_are_claimed_only_when_they_are_ours() {
    let (mut a, mut b) = (cm(1), cm(2));
    let ida = a.resolve(0, &resolve_params()).unwrap();
    let req: Vec<Outgoing> = a.drain_tx().collect();
    assert!(!b.claims(&req[0].mad), "no listener");
    b.listen(SERVICE).unwrap();
    assert!(b.claims(&req[0].mad));
    b.handle(0, addr(A), &req[0].mad);
    let [CmEvent::ServiceRequest { id: idb, .. }] = events(&mut b)[..] else {
        panic!("no service request");
    };
    b.answer_resolve(idb, 0x33, UDP_QKEY, &[]).unwrap();
    let rep: Vec<Outgoing> = b.drain_tx().collect();
    assert!(a.claims(&rep[0].mad));
    // From another address: not the answer.
    a.handle(0, addr("169.254.0.9:4791"), &rep[0].mad);
    assert_eq!(events(&mut a), vec![]);
    a.handle(0, addr(B), &rep[0].mad);
    assert_eq!(reply(&mut a, ida).qpn, 0x33);
    assert!(!a.claims(&rep[0].mad), "answered already");
}

#[test]
fn a_withdrawal_reaches_a_passive_side_whose_rep_was_lost() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = accepted(&mut a, &mut b);
    b.drain_tx().for_each(drop);
    assert!(a.destroy(0, ida));
    let rej = rej_of(&mut a);
    // Another CA's withdrawal of the same ID is not ours.
    let mut other = rej.clone();
    other.ari[..8].copy_from_slice(&9u64.to_be_bytes());
    take_rej(&mut b, other);
    assert_eq!(b.state(idb), Some("REP_SENT"));
    take_rej(&mut b, rej);
    assert_rejected(&mut b, idb, rej_reason::TIMEOUT);
    assert_eq!(b.state(idb), None);
}

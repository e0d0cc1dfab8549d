//! MADs from an address that is not the connection's peer, and floods.

use super::*;

/// An address that never connected.
const EVE: &str = "169.254.0.66:4791";

#[test]
fn a_forged_stale_req_from_elsewhere_ends_nothing() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    // Eve names a's GUID and sweeps QPNs around a's.
    let mut eve = Cm::new(addr(EVE).ip(), 1, 77);
    eve.set_packet_lifetime(0);
    for qpn in 0x10..0x14 {
        eve.connect(0, &params(qpn)).unwrap();
    }
    deliver(0, &mut eve, EVE, &mut b, all);
    assert_eq!(b.state(idb), Some("ESTABLISHED"));
    assert!(b.drain_tx().all(|o| o.to == addr(EVE)), "nothing goes to a");
    assert!(events(&mut b)
        .iter()
        .all(|e| !matches!(e, CmEvent::Disconnected { .. })));
    assert_eq!(a.state(ida), Some("ESTABLISHED"));
}

#[test]
fn messages_naming_a_connection_count_only_from_its_peer() {
    let (mut a, mut b) = (cm(1), cm(2));
    let (ida, idb) = establish(&mut a, &mut b);
    let dreq = CmMad {
        tid: 9,
        msg: CmMessage::Dreq(Dreq {
            local_comm_id: ida,
            remote_comm_id: idb,
            remote_qpn: 0x22,
            ..Dreq::default()
        }),
    };
    let rej = CmMad {
        tid: 10,
        msg: CmMessage::Rej(super::super::rej(
            ida,
            idb,
            msg_ref::REP,
            rej_reason::CONSUMER_DEFINED,
            &[],
            [0; REJ_PRIVATE_LEN],
        )),
    };
    for mad in [&dreq, &rej] {
        b.handle(0, addr(EVE), mad);
    }
    assert_eq!(b.state(idb), Some("ESTABLISHED"));
    assert_eq!(b.drain_tx().count(), 0);
    assert!(events(&mut b).is_empty());
    assert_eq!(b.refused(), 2);
    // From the peer itself, the same DREQ disconnects.
    b.handle(0, addr(A), &dreq);
    assert_eq!(events(&mut b), vec![CmEvent::Disconnected { id: idb }]);
}

#[test]
fn a_req_flood_holds_a_bounded_number_for_a_bounded_time() {
    let mut b = cm(2);
    b.listen(SERVICE).unwrap();
    let mut eve = Cm::new(addr(EVE).ip(), 66, 5);
    eve.set_packet_lifetime(0);
    let n = handle::MAX_HALF_OPEN + 50;
    for qpn in 0..n as u32 {
        let mut p = params(0x100 + qpn);
        // The longest patience the codes allow.
        p.response_timeout = 31;
        p.max_retries = 15;
        eve.connect(0, &p).unwrap();
    }
    deliver(0, &mut eve, EVE, &mut b, all);
    let requests = events(&mut b)
        .iter()
        .filter(|e| matches!(e, CmEvent::ConnectRequest { .. }))
        .count();
    assert_eq!(requests, handle::MAX_HALF_OPEN);
    let rejected = b
        .drain_tx()
        .filter(|o| matches!(&o.mad.msg, CmMessage::Rej(r) if r.reason == rej_reason::NO_RESOURCES))
        .count();
    assert_eq!(rejected, 50);
    // None outlives the cap on a request's patience.
    b.on_timer(handle::MAX_REQ_PATIENCE_NS);
    let gone = events(&mut b)
        .iter()
        .filter(|e| matches!(e, CmEvent::Unreachable { .. }))
        .count();
    assert_eq!(gone, handle::MAX_HALF_OPEN);
}

#[test]
fn a_sidr_flood_holds_a_bounded_number() {
    let mut b = cm(2);
    b.listen(SERVICE).unwrap();
    let mut eve = Cm::new(addr(EVE).ip(), 66, 5);
    let n = handle::MAX_HALF_OPEN + 10;
    for _ in 0..n {
        eve.resolve(0, &ResolveParams::new(addr(B), SERVICE))
            .unwrap();
    }
    deliver(0, &mut eve, EVE, &mut b, all);
    let asked = events(&mut b)
        .iter()
        .filter(|e| matches!(e, CmEvent::ServiceRequest { .. }))
        .count();
    assert_eq!(asked, handle::MAX_HALF_OPEN);
    assert_eq!(b.refused(), 10);
}

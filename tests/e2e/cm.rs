//! The communication manager on QP 1: two devices of the shared NIC
//! connect RC QPs with REQ, REP and RTU, exchange a SEND over them and
//! disconnect with DREQ and DREP; a REQ for a service nobody listens on
//! is rejected.

use crate::harness::{address_pair, expect_ok, WAIT};
use urdma::cm::{AcceptParams, CmEvent, CmOp, ConnectParams};
use urdma::{
    AccessFlags, ConnectOptions, Device, DeviceConfig, Endpoint, Gid, Mtu, QpInitAttr, RecvWr,
    SendWr, WcOpcode,
};

const SERVICE: u64 = 0x0106_1D4F;

fn next(dev: &Device) -> CmEvent {
    dev.next_cm_event(Some(WAIT)).expect("a CM event in time")
}

fn connect_params(dev_b: &Device, qpn: u32, psn: u32, service_id: u64) -> ConnectParams {
    ConnectParams {
        // Short retries: a lost MAD costs a test little.
        response_timeout: 16,
        max_retries: 3,
        private_data: b"urdma".to_vec(),
        ..ConnectParams::rc(dev_b.local_addr(), service_id, qpn, psn)
    }
}

fn endpoint(ip: std::net::IpAddr, port: u16, qpn: u32, psn: u32) -> Endpoint {
    Endpoint {
        gid: Gid::from_ip(ip),
        port,
        qpn,
        psn,
        mtu: Mtu::Mtu1024,
    }
}

/// REQ, REP, RTU; a SEND from the active to the passive side; DREQ, DREP.
pub fn connect_send_disconnect() {
    let (ia, ib) = address_pair();
    let a = Device::open(DeviceConfig::new(ia)).unwrap();
    let b = Device::open(DeviceConfig::new(ib)).unwrap();
    let opts = ConnectOptions::default();
    b.cm(CmOp::Listen {
        service_id: SERVICE,
    })
    .unwrap();

    let (pda, cqa) = (a.alloc_pd().unwrap(), a.create_cq(16).unwrap());
    let qpa = pda.create_qp(&QpInitAttr::rc(&cqa, &cqa)).unwrap();
    let me = qpa.endpoint();
    let ida = a
        .cm(CmOp::Connect(connect_params(&b, me.qpn, me.psn, SERVICE)))
        .unwrap()
        .expect("a connection ID");

    // Passive side: a QP for the request, connected with what it says.
    let CmEvent::ConnectRequest { id: idb, peer, req } = next(&b) else {
        panic!("no connect request");
    };
    assert_eq!(peer.ip(), ia);
    assert_eq!((req.local_qpn, req.starting_psn), (me.qpn, me.psn));
    assert_eq!(&req.private_data[..5], b"urdma");
    let (pdb, cqb) = (b.alloc_pd().unwrap(), b.create_cq(16).unwrap());
    let qpb = pdb.create_qp(&QpInitAttr::rc(&cqb, &cqb)).unwrap();
    let buf = pdb.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    // Each side advertises the PSN it expects and sends from its peer's.
    let mine_b = qpb.endpoint().psn;
    let peer_a = endpoint(ia, peer.port(), req.local_qpn, mine_b);
    qpb.connect_sending_from(&peer_a, req.starting_psn, &opts)
        .unwrap();
    qpb.post_recv(RecvWr::new(7, &[buf.slice(0, 64).unwrap()]))
        .unwrap();
    let them = qpb.endpoint();
    let accept = AcceptParams {
        qpn: them.qpn,
        starting_psn: them.psn,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..Default::default()
    };
    b.cm(CmOp::Accept {
        id: idb,
        params: accept,
    })
    .unwrap();

    // Active side: the REP, the QP to RTS, the RTU.
    let CmEvent::ConnectResponse { id, rep } = next(&a) else {
        panic!("no connect response");
    };
    assert_eq!(
        (id, rep.local_qpn, rep.starting_psn),
        (ida, them.qpn, them.psn)
    );
    let peer_b = endpoint(ib, b.local_addr().port(), rep.local_qpn, me.psn);
    qpa.connect_sending_from(&peer_b, rep.starting_psn, &opts)
        .unwrap();
    let (qa, qb) = (qpa.query().unwrap(), qpb.query().unwrap());
    assert_eq!((qa.sq_psn, qa.rq_psn), (qb.rq_psn, qb.sq_psn));
    a.cm(CmOp::ReadyToUse {
        id: ida,
        private_data: vec![],
    })
    .unwrap();
    assert_eq!(next(&a), CmEvent::Established { id: ida });
    assert_eq!(next(&b), CmEvent::Established { id: idb });

    let src = pda.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    src.write_at(0, b"over a CM connection").unwrap();
    qpa.post_send(SendWr::send(1, &[src.slice(0, 20).unwrap()]))
        .unwrap();
    expect_ok(&cqa, 1, WcOpcode::Send);
    let wc = expect_ok(&cqb, 7, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 20);
    let mut got = [0u8; 20];
    buf.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"over a CM connection");

    // Another program on b's address cannot touch b's connection.
    let other = Device::open(DeviceConfig::new(ib)).unwrap();
    let dreq = |id| CmOp::Disconnect {
        id,
        private_data: vec![],
    };
    assert!(matches!(
        other.cm(dreq(idb)),
        Err(urdma::Error::NotFound(_))
    ));
    a.cm(dreq(ida)).unwrap();
    assert_eq!(next(&b), CmEvent::Disconnected { id: idb });
    assert_eq!(next(&a), CmEvent::Disconnected { id: ida });
    assert!(other
        .next_cm_event(Some(std::time::Duration::ZERO))
        .is_none());
}

/// A REQ for a service nobody listens on: REJ 8, as Linux's CM answers.
pub fn no_listener_rejects() {
    let (ia, ib) = address_pair();
    let a = Device::open(DeviceConfig::new(ia)).unwrap();
    let b = Device::open(DeviceConfig::new(ib)).unwrap();
    let (pd, cq) = (a.alloc_pd().unwrap(), a.create_cq(4).unwrap());
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let me = qp.endpoint();
    let id = a
        .cm(CmOp::Connect(connect_params(
            &b,
            me.qpn,
            me.psn,
            SERVICE + 1,
        )))
        .unwrap()
        .unwrap();
    match next(&a) {
        CmEvent::Rejected {
            id: got, reason, ..
        } => assert_eq!((got, reason), (id, 8)),
        ev => panic!("expected a reject, got {ev:?}"),
    }
    // A QP of another program cannot be named in a connect.
    let err = a.cm(CmOp::Connect(connect_params(&b, 0x7F_FFFF, 0, SERVICE)));
    assert!(err.is_err());
    drop(b);
}

use super::*;
use std::net::IpAddr;

fn sample_path() -> PathInfo {
    let mut local_gid = [0u8; 16];
    local_gid[10] = 0xFF;
    local_gid[11] = 0xFF;
    local_gid[12..].copy_from_slice(&[169, 254, 0, 1]);
    let mut remote_gid = local_gid;
    remote_gid[15] = 2;
    PathInfo {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFF,
        local_gid,
        remote_gid,
        flow_label: 0xA_BCDE,
        packet_rate: 0x2A,
        traffic_class: 0x60,
        hop_limit: 64,
        sl: 5,
        subnet_local: true,
        local_ack_timeout: 18,
    }
}

fn sample_req() -> Req {
    let mut private_data = [0u8; conn::REQ_PRIVATE_LEN];
    for (i, b) in private_data.iter_mut().enumerate() {
        *b = i as u8;
    }
    Req {
        local_comm_id: 0x1122_3344,
        service_id: 0x0000_0000_0106_4A4B,
        local_ca_guid: 0x0102_0304_0506_0708,
        local_qkey: 0x0123_4567,
        local_qpn: 0x00AB_CDEF,
        responder_resources: 16,
        initiator_depth: 8,
        remote_cm_response_timeout: 20,
        transport: 1,
        flow_control: true,
        starting_psn: 0x0012_3456,
        local_cm_response_timeout: 21,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rnr_retry_count: 6,
        max_cm_retries: 15,
        srq: true,
        extended_transport: 3,
        primary: sample_path(),
        alternate: PathInfo::default(),
        private_data,
    }
}

fn round_trip(msg: CmMessage) -> [u8; MAD_LEN] {
    let mad = CmMad {
        tid: 0xDEAD_BEEF_0000_0001,
        msg,
    };
    let bytes = mad.emit();
    assert_eq!(CmMad::parse(&bytes), Ok(mad));
    bytes
}

#[test]
fn req_fields_sit_where_the_ibta_table_puts_them() {
    let b = round_trip(CmMessage::Req(sample_req()));
    // Common header: base version, class, class version, method, TID, attribute.
    assert_eq!(b[..4], [1, 0x07, 2, 0x03]);
    assert_eq!(b[8..16], 0xDEAD_BEEF_0000_0001u64.to_be_bytes());
    assert_eq!(b[16..18], [0x00, 0x10]);
    assert_eq!(b[24..28], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(b[32..40], [0, 0, 0, 0, 0x01, 0x06, 0x4A, 0x4B]);
    assert_eq!(b[40..48], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(b[52..56], [0x01, 0x23, 0x45, 0x67]);
    assert_eq!(b[56..60], [0xAB, 0xCD, 0xEF, 16]);
    assert_eq!(b[63], 8);
    // Remote CM response timeout 20, transport UC, flow control.
    assert_eq!(b[67], (20 << 3) | (1 << 1) | 1);
    assert_eq!(b[68..72], [0x12, 0x34, 0x56, (21 << 3) | 7]);
    assert_eq!(b[72..74], [0xFF, 0xFF]);
    // Path MTU 3 (1024), RNR retry 6; max CM retries 15, SRQ, XRC.
    assert_eq!(b[74], (3 << 4) | 6);
    assert_eq!(b[75], (15 << 4) | (1 << 3) | 3);
    assert_eq!(b[76..80], [0xFF, 0xFF, 0xFF, 0xFF]);
    assert_eq!(b[92..96], [169, 254, 0, 1]);
    assert_eq!(b[108..112], [169, 254, 0, 2]);
    // Flow label 0xABCDE in the top 20 bits, rate in the low 6 bits of 115.
    assert_eq!(b[112..116], [0xAB, 0xCD, 0xE0, 0x2A]);
    assert_eq!(b[116..120], [0x60, 64, (5 << 4) | (1 << 3), 18 << 3]);
    // No alternate path.
    assert!(b[120..164].iter().all(|&x| x == 0));
    assert_eq!(b[164], 0);
    assert_eq!(b[255], 91);
}

#[test]
fn rep_fields_sit_where_the_ibta_table_puts_them() {
    let mut private_data = [0u8; conn::REP_PRIVATE_LEN];
    private_data[0] = 0x5A;
    private_data[conn::REP_PRIVATE_LEN - 1] = 0xA5;
    let rep = Rep {
        local_comm_id: 7,
        remote_comm_id: 0x1122_3344,
        local_qkey: 0,
        local_qpn: 0x11,
        starting_psn: 0xFF_FFFF,
        responder_resources: 4,
        initiator_depth: 2,
        target_ack_delay: 15,
        failover_accepted: 2,
        flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0xAAAA_BBBB_CCCC_DDDD,
        private_data,
    };
    let b = round_trip(CmMessage::Rep(rep));
    assert_eq!(b[16..18], [0x00, 0x13]);
    assert_eq!(b[24..32], [0, 0, 0, 7, 0x11, 0x22, 0x33, 0x44]);
    assert_eq!(b[36..39], [0, 0, 0x11]);
    assert_eq!(b[44..47], [0xFF, 0xFF, 0xFF]);
    assert_eq!(
        b[48..52],
        [4, 2, (15 << 3) | (2 << 1) | 1, (7 << 5) | (1 << 4)]
    );
    assert_eq!(b[52..60], 0xAAAA_BBBB_CCCC_DDDDu64.to_be_bytes());
    assert_eq!((b[60], b[255]), (0x5A, 0xA5));
}

#[test]
fn short_messages_round_trip_with_their_private_data_in_place() {
    let mut rej = Rej {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_rejected: msg_ref::REQ,
        rejected_info_length: 0,
        reason: rej_reason::INVALID_SERVICE_ID,
        ..Rej::default()
    };
    rej.private_data[0] = 9;
    let b = round_trip(CmMessage::Rej(rej));
    assert_eq!((b[32], b[34], b[35], b[108]), (0, 0, 8, 9));

    let mut dreq = Dreq {
        local_comm_id: 3,
        remote_comm_id: 4,
        remote_qpn: 0x12_3456,
        ..Dreq::default()
    };
    dreq.private_data[0] = 1;
    let b = round_trip(CmMessage::Dreq(dreq));
    assert_eq!(b[32..37], [0x12, 0x34, 0x56, 0, 1]);

    let mra = Mra {
        local_comm_id: 5,
        remote_comm_id: 0,
        message_mraed: msg_ref::REQ,
        service_timeout: 23,
        ..Mra::default()
    };
    let b = round_trip(CmMessage::Mra(mra));
    assert_eq!((b[32], b[33]), (0, 23 << 3));

    let mut rtu = Rtu::default();
    rtu.private_data[223] = 1;
    assert_eq!(round_trip(CmMessage::Rtu(rtu))[255], 1);
    round_trip(CmMessage::Drep(Drep::default()));

    let sreq = SidrReq {
        request_id: 77,
        pkey: 0xFFFF,
        service_id: CmaHeader::service_id(0x0111, 7174),
        ..SidrReq::default()
    };
    let b = round_trip(CmMessage::SidrReq(sreq));
    assert_eq!(b[32..40], 0x0000_0000_0111_1C06u64.to_be_bytes());
    let srep = SidrRep {
        request_id: 77,
        status: sidr::SIDR_STATUS_VALID,
        qpn: 0x42,
        qkey: 0x0123_4567,
        service_id: CmaHeader::service_id(0x0111, 7174),
        ..SidrRep::default()
    };
    let b = round_trip(CmMessage::SidrRep(srep));
    assert_eq!(b[32..35], [0, 0, 0x42]);
    assert_eq!(b[44..48], [0x01, 0x23, 0x45, 0x67]);
}

#[test]
fn fields_are_masked_to_their_width() {
    let mut req = sample_req();
    req.local_qpn = 0xFF00_0001;
    req.retry_count = 0xFF;
    req.primary.flow_label = 0xFFF0_0001;
    let b = CmMad {
        tid: 1,
        msg: CmMessage::Req(req),
    }
    .emit();
    let CmMessage::Req(back) = CmMad::parse(&b).unwrap().msg else {
        panic!("a REQ parses as a REQ");
    };
    assert_eq!(back.local_qpn, 1);
    assert_eq!(back.retry_count, 7);
    assert_eq!(back.local_cm_response_timeout, 21);
    assert_eq!(back.primary.flow_label, 1);
}

#[test]
fn what_is_not_a_cm_send_is_refused() {
    let good = CmMad {
        tid: 1,
        msg: CmMessage::Rtu(Rtu::default()),
    }
    .emit();
    assert_eq!(CmMad::parse(&good[..255]), Err(WireError::Truncated(255)));
    let mut longer = good.to_vec();
    longer.extend_from_slice(&[0; 8]);
    assert!(CmMad::parse(&longer).is_ok());
    let mut b = good;
    b[1] = 0x01; // subnet management
    assert_eq!(CmMad::parse(&b), Err(WireError::NotCmMad));
    let mut b = good;
    b[2] = 1;
    assert_eq!(CmMad::parse(&b), Err(WireError::BadMadVersion(1)));
    let mut b = good;
    b[3] = 0x81; // a GetResp
    assert_eq!(CmMad::parse(&b), Err(WireError::NotCmMad));
    let mut b = good;
    b[17] = 0x19; // LAP is not modelled
    assert_eq!(CmMad::parse(&b), Err(WireError::UnknownAttribute(0x19)));
}

#[test]
fn cma_header_carries_the_ip_addresses() {
    let h = CmaHeader {
        src_port: 0xC000,
        src: "169.254.0.1".parse().unwrap(),
        dst: "169.254.0.2".parse().unwrap(),
    };
    let mut req = sample_req();
    h.emit(&mut req.private_data).unwrap();
    let b = round_trip(CmMessage::Req(req.clone()));
    // At MAD offsets 164.. as the REQ's private data.
    assert_eq!(b[164..168], [0, 0x40, 0xC0, 0x00]);
    assert!(b[168..180].iter().all(|&x| x == 0));
    assert_eq!(b[180..184], [169, 254, 0, 1]);
    assert_eq!(b[196..200], [169, 254, 0, 2]);
    assert_eq!(b[200], 36, "user data follows the header");
    assert_eq!(CmaHeader::parse(&req.private_data), Ok(h));

    let v6 = CmaHeader {
        src_port: 1,
        src: "fe80::1".parse().unwrap(),
        dst: "fe80::2".parse().unwrap(),
    };
    let mut pd = [0u8; 40];
    v6.emit(&mut pd).unwrap();
    assert_eq!(pd[1], 0x60);
    assert_eq!(CmaHeader::parse(&pd), Ok(v6));

    let mixed = CmaHeader {
        dst: IpAddr::V6("::1".parse().unwrap()),
        ..h
    };
    assert_eq!(mixed.emit(&mut pd), Err(WireError::AddressFamily));
    assert_eq!(h.emit(&mut pd[..35]), Err(WireError::BufferTooSmall));
    assert_eq!(CmaHeader::parse(&pd[..35]), Err(WireError::Truncated(35)));
    pd[0] = 1;
    assert_eq!(CmaHeader::parse(&pd), Err(WireError::BadCmaHeader(1)));
    pd[0] = 0;
    pd[1] = 0x50;
    assert_eq!(CmaHeader::parse(&pd), Err(WireError::BadCmaHeader(5)));
}

#[test]
fn cm_timeouts_are_powers_of_two_of_4096_ns() {
    assert_eq!(timeout_micros(0), 4);
    assert_eq!(timeout_micros(20), 4_294_967);
    assert_eq!(timeout_micros(31), timeout_micros(200));
}

#[test]
fn rdma_cm_service_ids_name_their_port() {
    let id = CmaHeader::service_id(0x0106, 7471);
    assert_eq!(id, 0x0106_1d2f);
    assert_eq!(CmaHeader::port_of(id), Some(("TCP", 7471)));
    assert_eq!(
        CmaHeader::port_of(CmaHeader::service_id(0x0111, 7174)),
        Some(("UDP", 7174))
    );
    assert_eq!(CmaHeader::port_of(0x1234_0000_0106_0001), None);
    assert_eq!(CmaHeader::port_of(0x0107_0001), None);
}

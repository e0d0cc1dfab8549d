use super::*;
use crate::engine::{RecvRequest, SendData, SendOp, SendRequest, SgEntry, UdDest};

fn dup(fd: Option<BorrowedFd<'_>>) -> OwnedFd {
    fd.expect("memfd").try_clone_to_owned().expect("dup")
}

fn recv(id: u64, n: usize) -> RecvRequest {
    RecvRequest {
        wr_id: id,
        sges: (0..n)
            .map(|i| SgEntry {
                addr: u64::MAX - i as u64,
                length: u32::MAX,
                lkey: u32::MAX,
            })
            .collect(),
    }
}

#[test]
fn requests_cross_mappings_in_order_and_the_queue_fills_at_capacity() {
    let driver = WorkRing::new_shared(4, recv_slot_len(2)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 4, recv_slot_len(2)).unwrap();
    for i in 0..4 {
        driver.push(&recv(i, 2)).unwrap();
    }
    assert_eq!(driver.push(&recv(9, 1)), Err(PushError::Full));
    assert_eq!(nic.pending(), Ok(4));
    for i in 0..4 {
        let r: RecvRequest = nic.pop().unwrap().unwrap();
        assert_eq!(r, recv(i, 2));
    }
    assert!(nic.pop::<RecvRequest>().is_none());
    // Taken but not retired: still full for the driver.
    assert_eq!(driver.push(&recv(9, 1)), Err(PushError::Full));
    nic.retire(1);
    assert_eq!(driver.outstanding(), 3);
    driver.push(&recv(9, 1)).unwrap();
    assert_eq!(driver.push(&recv(10, 1)), Err(PushError::Full));
}

#[test]
fn wraps_many_times() {
    let driver = WorkRing::new_shared(3, recv_slot_len(1)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 3, recv_slot_len(1)).unwrap();
    for i in 0..1000 {
        driver.push(&recv(i, 1)).unwrap();
        let r: RecvRequest = nic.pop().unwrap().unwrap();
        assert_eq!(r.wr_id, i);
        nic.retire(1);
    }
}

#[test]
fn worst_case_send_requests_fit_their_slots() {
    let sges = (0..32)
        .map(|_| SgEntry {
            addr: u64::MAX,
            length: u32::MAX,
            lkey: u32::MAX,
        })
        .collect();
    let wr = SendRequest {
        wr_id: u64::MAX,
        op: SendOp::SendImm(u32::MAX),
        data: SendData::Sges(sges),
        remote_va: u64::MAX,
        rkey: u32::MAX,
        signaled: true,
        solicited: true,
        ud: Some(UdDest {
            addr: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
                .parse()
                .unwrap(),
            qpn: u32::MAX,
            qkey: u32::MAX,
        }),
        fence: true,
    };
    let ring = WorkRing::new_shared(1, send_slot_len(32, 0)).unwrap();
    ring.push(&wr).unwrap();
    // The largest operation: a window bind.
    let bind = SendRequest {
        op: SendOp::BindMw(crate::engine::mw::BindMw {
            mw_rkey: u32::MAX,
            new_rkey: u32::MAX,
            lkey: u32::MAX,
            addr: u64::MAX,
            len: u64::MAX,
            access: u32::MAX,
        }),
        ..wr.clone()
    };
    WorkRing::new_shared(1, send_slot_len(32, 0))
        .unwrap()
        .push(&bind)
        .unwrap();
    let inline = SendRequest {
        op: SendOp::CompSwap {
            compare: u64::MAX,
            swap: u64::MAX,
        },
        data: SendData::Inline(vec![0xff; 512]),
        ..wr
    };
    let ring = WorkRing::new_shared(1, send_slot_len(1, 512)).unwrap();
    ring.push(&inline).unwrap();
    let small = WorkRing::new_shared(1, send_slot_len(1, 16)).unwrap();
    assert_eq!(small.push(&inline), Err(PushError::TooLarge));
}

#[test]
fn doorbell_rings_once_per_arming() {
    let driver = WorkRing::new_shared(8, recv_slot_len(1)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 8, recv_slot_len(1)).unwrap();
    assert_eq!(driver.push(&recv(1, 1)), Ok(false));
    // Something is waiting: arming fails and leaves the bell quiet.
    assert!(!nic.arm());
    assert_eq!(driver.push(&recv(2, 1)), Ok(false));
    while nic.pop::<RecvRequest>().is_some() {}
    assert!(nic.arm());
    assert_eq!(driver.push(&recv(3, 1)), Ok(true));
    assert_eq!(driver.push(&recv(4, 1)), Ok(false));
}

#[test]
fn a_polled_ring_takes_posts_without_doorbells_and_arms_again_when_polling_stops() {
    let driver = WorkRing::new_shared(8, recv_slot_len(1)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 8, recv_slot_len(1)).unwrap();
    // Armed before polling starts: the doorbell comes down, and the poller
    // is owed the next post.
    assert!(nic.arm());
    nic.start_polling();
    assert!(!nic.poll_due());
    assert_eq!(driver.push(&recv(1, 1)), Ok(false));
    assert!(nic.poll_due());
    assert!(nic.take_bell());
    assert!(!nic.poll_due());
    assert!(nic.pop::<RecvRequest>().is_some());
    // Arming while polled leaves the bell down and tells the poller.
    assert!(nic.arm());
    assert_eq!(driver.push(&recv(2, 1)), Ok(false));
    assert!(nic.poll_due());
    // Arming with a post waiting fails, as without polling.
    assert!(!nic.arm());
    while nic.pop::<RecvRequest>().is_some() {}
    assert!(nic.arm());
    // A post that came while the poller stopped is handed to it.
    assert_eq!(driver.push(&recv(3, 1)), Ok(false));
    assert!(!nic.stop_polling());
    while nic.pop::<RecvRequest>().is_some() {}
    assert!(nic.arm());
    assert_eq!(driver.push(&recv(4, 1)), Ok(true));
    // Stopping when nothing is owed leaves the ring as the engine left it.
    nic.start_polling();
    assert!(nic.stop_polling());
    assert_eq!(driver.push(&recv(5, 1)), Ok(false));
    while nic.pop::<RecvRequest>().is_some() {}
    // Polling again, then stopping while owed and idle: armed for real.
    nic.start_polling();
    assert!(nic.arm());
    assert!(nic.stop_polling());
    assert_eq!(driver.push(&recv(6, 1)), Ok(true));
}

#[test]
fn hostile_producer_state_is_refused_without_panic() {
    let driver = WorkRing::new_shared(4, recv_slot_len(1)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 4, recv_slot_len(1)).unwrap();
    // A producer index far past the ring.
    driver.map.atomic_u64(PROD).store(1 << 40, SeqCst);
    assert_eq!(nic.pending(), Err(TakeError::Corrupt));
    assert_eq!(nic.pop::<RecvRequest>(), Some(Err(TakeError::Corrupt)));
    assert!(nic.pop::<RecvRequest>().is_none());
    // A slot with a huge length, then one with garbage bytes.
    let prod = 1u64 << 40;
    driver
        .map
        .write_bytes(driver.slot_off(prod), &u32::MAX.to_ne_bytes())
        .unwrap();
    driver
        .map
        .write_bytes(
            driver.slot_off(prod + 1),
            &[8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        )
        .unwrap();
    driver.map.atomic_u64(PROD).store(prod + 2, SeqCst);
    assert_eq!(
        nic.pop::<RecvRequest>(),
        Some(Err(TakeError::Malformed(prod)))
    );
    assert_eq!(
        nic.pop::<RecvRequest>(),
        Some(Err(TakeError::Malformed(prod + 1)))
    );
    // Retiring more than was taken stops at what was taken.
    nic.retire(100);
    assert_eq!(driver.outstanding(), 0);
}

#[test]
fn a_small_or_unsealed_file_is_refused() {
    let small = WorkRing::new_shared(2, recv_slot_len(1)).unwrap();
    assert!(WorkRing::from_fd(dup(small.fd()), 64, recv_slot_len(1)).is_err());
    let fd = crate::shm::unsealed_memfd(1 << 16);
    assert!(WorkRing::from_fd(fd, 2, recv_slot_len(1)).is_err());
}

#[test]
fn discard_drops_everything_and_frees_the_room() {
    let driver = WorkRing::new_shared(2, recv_slot_len(1)).unwrap();
    let nic = WorkRing::from_fd(dup(driver.fd()), 2, recv_slot_len(1)).unwrap();
    driver.push(&recv(1, 1)).unwrap();
    driver.push(&recv(2, 1)).unwrap();
    nic.discard();
    assert!(nic.pop::<RecvRequest>().is_none());
    assert_eq!(driver.outstanding(), 0);
    driver.push(&recv(3, 1)).unwrap();
    assert_eq!(nic.pop::<RecvRequest>().unwrap().unwrap().wr_id, 3);
}

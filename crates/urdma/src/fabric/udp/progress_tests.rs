//! A thread polling an empty CQ of an embedded device moves the device's
//! NIC on itself.

use crate::fabric::loopback;
use crate::{AccessFlags, Device, DeviceConfig, QpInitAttr, SendWr, WcStatus};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(name: &str, addr: Ipv4Addr) -> DeviceConfig {
    DeviceConfig {
        name: name.into(),
        addr: IpAddr::V4(addr),
        // A port of its own for this test process.
        port: 40_000 + (std::process::id() % 20_000) as u16,
    }
}

/// Take the device off internal loopback: its peers of this process
/// then reach it through its socket, as a peer on another host does.
fn over_udp(d: &Device) {
    let driver = d.driver().expect("an embedded device has its driver");
    loopback::detach(driver.local(), Arc::as_ptr(driver));
}

/// The requester's device runs no receive thread, so every datagram it
/// gets (the ACK of each WRITE) is taken by the thread that spins on its
/// CQ, and only that lets the WRITEs complete.
#[test]
fn a_thread_spinning_on_an_empty_cq_takes_the_acknowledgements() {
    let a = Device::open_embedded_unthreaded(config("poll-a", Ipv4Addr::new(127, 0, 0, 3)))
        .expect("open the polled device");
    let b = Device::open_embedded(config("poll-b", Ipv4Addr::new(127, 0, 0, 4)))
        .expect("open its peer");
    over_udp(&a);
    over_udp(&b);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb)).unwrap();
    qa.connect(&qb.endpoint(), &Default::default()).unwrap();
    qb.connect(&qa.endpoint(), &Default::default()).unwrap();
    let target = pb
        .reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let remote = target.remote();
    let driver = a.driver().unwrap();

    let messages = 20u64;
    for i in 0..messages {
        let payload = format!("ping {i:02}");
        qa.post_send(SendWr::write_inline(
            i,
            payload.as_bytes(),
            remote.addr,
            remote.rkey,
        ))
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let wc = loop {
            if let Some(wc) = ca.poll(1).unwrap().pop() {
                break wc;
            }
            assert!(Instant::now() < deadline, "WRITE {i} did not complete");
        };
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        let mut landed = vec![0u8; payload.len()];
        target.read_at(0, &mut landed).unwrap();
        assert_eq!(landed, payload.as_bytes());
    }
    assert!(
        driver.polled_batches() >= messages,
        "{} batches taken by polls for {messages} WRITEs",
        driver.polled_batches()
    );
}

/// A CQ polled once now and then (an event loop) leaves the datagrams to
/// the receive thread: a single empty poll takes nothing.
#[test]
fn a_single_empty_poll_leaves_the_datagrams() {
    let a = Device::open_embedded_unthreaded(config("poll-c", Ipv4Addr::new(127, 0, 0, 5)))
        .expect("open the polled device");
    let b = Device::open_embedded(config("poll-d", Ipv4Addr::new(127, 0, 0, 6)))
        .expect("open its peer");
    over_udp(&a);
    over_udp(&b);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb)).unwrap();
    qa.connect(&qb.endpoint(), &Default::default()).unwrap();
    qb.connect(&qa.endpoint(), &Default::default()).unwrap();
    let target = pb
        .reg_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let remote = target.remote();
    qa.post_send(SendWr::write_inline(1, b"ping", remote.addr, remote.rkey))
        .unwrap();
    // The ACK has long arrived at a's socket.
    std::thread::sleep(Duration::from_millis(50));
    let other = a.create_cq(4).unwrap();
    for _ in 0..10 {
        // Polls alternating between two CQs: never the same one twice
        // in a row, so neither waits.
        assert!(ca.poll(1).unwrap().is_empty());
        assert!(other.poll(1).unwrap().is_empty());
    }
    assert_eq!(a.driver().unwrap().polled_batches(), 0);
    // Spinning on it, the thread takes the ACK.
    let deadline = Instant::now() + Duration::from_secs(5);
    let wc = loop {
        if let Some(wc) = ca.poll(1).unwrap().pop() {
            break wc;
        }
        assert!(Instant::now() < deadline, "the WRITE did not complete");
    };
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(a.driver().unwrap().polled_batches(), 1);
}

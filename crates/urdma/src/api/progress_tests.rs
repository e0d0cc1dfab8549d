//! A thread polling an empty CQ of an embedded device moves the device's
//! NIC on itself.

use super::write_pair::{config, driver, WritePair};
use crate::{Cq, Device, SendWr, WcStatus, WorkCompletion};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use urdma_nic::fabric::udp::loopback;

/// Device `a` (at `a_addr`) with no receive thread and device `b`, a QP
/// pair between them, both devices off internal loopback: they reach
/// each other through their sockets, as peers on two hosts do.
fn pair_over_udp(name: &str, a_addr: Ipv4Addr, b_addr: Ipv4Addr) -> WritePair {
    let a = Device::open_embedded_unthreaded(config(&format!("{name}-a"), a_addr))
        .expect("open the polled device");
    let b = Device::open_embedded(config(&format!("{name}-b"), b_addr)).expect("open its peer");
    for d in [&a, &b] {
        let driver = driver(d);
        loopback::detach(driver.local(), driver);
    }
    WritePair::new(a, b, 4096)
}

/// Poll `cq` until a completion comes (at most 5 s).
fn spin_for_completion(cq: &Cq) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(wc) = cq.poll(1).unwrap().pop() {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion came");
    }
}

/// The requester's device runs no receive thread, so every datagram it
/// gets (the ACK of each WRITE) is taken by the thread that spins on its
/// CQ, and only that lets the WRITEs complete.
#[test]
fn a_thread_spinning_on_an_empty_cq_takes_the_acknowledgements() {
    let p = pair_over_udp(
        "poll",
        Ipv4Addr::new(127, 0, 0, 3),
        Ipv4Addr::new(127, 0, 0, 4),
    );
    let messages = 20u64;
    for i in 0..messages {
        let payload = format!("ping {i:02}");
        let wr = SendWr::write_inline(i, payload.as_bytes(), p.remote.addr, p.remote.rkey);
        p.qa.post_send(wr).unwrap();
        let wc = spin_for_completion(&p.ca);
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        let mut landed = vec![0u8; payload.len()];
        p.target.read_at(0, &mut landed).unwrap();
        assert_eq!(landed, payload.as_bytes());
    }
    let batches = driver(&p.a).polled_batches();
    assert!(
        batches >= messages,
        "{batches} batches taken by polls for {messages} WRITEs"
    );
}

/// A thread that polls other devices in between (an event loop) leaves
/// the datagrams to the receive thread: its empty polls take nothing.
#[test]
fn polls_that_alternate_between_devices_leave_the_datagrams() {
    let p = pair_over_udp(
        "look",
        Ipv4Addr::new(127, 0, 0, 5),
        Ipv4Addr::new(127, 0, 0, 6),
    );
    let wr = SendWr::write_inline(1, b"ping", p.remote.addr, p.remote.rkey);
    p.qa.post_send(wr).unwrap();
    // The ACK has long arrived at a's socket.
    std::thread::sleep(Duration::from_millis(50));
    let other = p.b.create_cq(4).unwrap();
    for _ in 0..10 {
        // Polls alternating between CQs of two devices: never one
        // device's twice in a row, so neither waits for its NIC.
        assert!(p.ca.poll(1).unwrap().is_empty());
        assert!(other.poll(1).unwrap().is_empty());
    }
    assert_eq!(driver(&p.a).polled_batches(), 0);
    // Spinning on it, the thread takes the ACK.
    let wc = spin_for_completion(&p.ca);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(driver(&p.a).polled_batches(), 1);
}

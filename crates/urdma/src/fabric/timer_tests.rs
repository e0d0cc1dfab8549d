//! The receive thread's timer, seen from a device pair of this process.

use crate::{AccessFlags, Device, DeviceConfig, QpInitAttr, SendWr, WcStatus};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// An embedded device on `addr`, on a port of its own for this test
/// process.
fn device(name: &str, addr: Ipv4Addr) -> Device {
    let port = 40_000 + (std::process::id() % 20_000) as u16;
    Device::open_embedded(DeviceConfig {
        name: name.into(),
        addr: IpAddr::V4(addr),
        port,
    })
    .expect("open an embedded device")
}

/// Each WRITE arms its QP's timers (retransmission, loss probe) and its
/// acknowledgement stops them at once. The receive thread, asleep all
/// along, is not woken for those gone deadlines: before, it woke once per
/// message, a context switch each on a busy machine.
#[test]
fn acknowledged_messages_leave_the_receive_thread_asleep() {
    let a = device("timer-a", Ipv4Addr::new(127, 0, 0, 1));
    let b = device("timer-b", Ipv4Addr::new(127, 0, 0, 2));
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
    let driver = a.driver().expect("an embedded device has its driver");

    let messages = 10u64;
    let before = driver.rx_wakeups();
    for i in 0..messages {
        qa.post_send(SendWr::write_inline(i, b"ping", remote.addr, remote.rkey))
            .unwrap();
        let wc = ca
            .wait_one(Some(Duration::from_secs(5)))
            .expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        // Longer than any timer a message arms with this round trip
        // (the loss probe's first is 1 ms).
        std::thread::sleep(Duration::from_millis(20));
    }
    let woke = driver.rx_wakeups() - before;
    // Publishing the counters (once a second at most) may wake it.
    assert!(
        woke <= 2,
        "the receive thread woke {woke} times for {messages} acknowledged messages"
    );
}

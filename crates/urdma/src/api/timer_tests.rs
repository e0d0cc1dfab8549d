//! The receive thread's timer, seen from a device pair of this process.

use super::write_pair::{config, driver, WritePair};
use crate::{Device, SendWr, WcStatus};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Each WRITE arms its QP's timers (retransmission, loss probe) and its
/// acknowledgement stops them at once. The receive thread, asleep all
/// along, is not woken for those gone deadlines: before, it woke once per
/// message, a context switch each on a busy machine.
#[test]
fn acknowledged_messages_leave_the_receive_thread_asleep() {
    let open = |name, addr| Device::open_embedded(config(name, addr)).expect("open a device");
    let p = WritePair::new(
        open("timer-a", Ipv4Addr::new(127, 0, 0, 1)),
        open("timer-b", Ipv4Addr::new(127, 0, 0, 2)),
        4096,
    );
    let driver = driver(&p.a);

    let messages = 10u64;
    let before = driver.rx_wakeups();
    for i in 0..messages {
        p.qa.post_send(SendWr::write_inline(
            i,
            b"ping",
            p.remote.addr,
            p.remote.rkey,
        ))
        .unwrap();
        let wc =
            p.ca.wait_one(Some(Duration::from_secs(5)))
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

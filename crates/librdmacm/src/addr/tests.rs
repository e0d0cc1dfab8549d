//! Which device a bind takes, and which destinations loop back.

use super::{bind_dev, loops_back};
use crate::state::{Dev, IdState, Phase, State};
use std::net::SocketAddr;

fn dev(addr: &str) -> Dev {
    Dev {
        ctx: 0,
        addr: addr.parse().unwrap(),
        gids: Vec::new(),
        pd: 0,
        mtu: 3,
        max_responder: 16,
        max_initiator: 16,
    }
}

/// An ID bound to `src`, listening on device 0 when `listens`.
fn id(src: &str, listens: bool) -> IdState {
    IdState {
        chan: 0,
        sync: false,
        dev: None,
        src: Some(src.parse().unwrap()),
        dst: None,
        conn: None,
        phase: Phase::Idle,
        listens: if listens { vec![(0, 1)] } else { Vec::new() },
        psn: 0,
        remote: None,
        outstanding: 0,
        tos: 0,
        sgid_index: 0,
        ack_timeout: None,
        own_cqs: false,
        path: None,
        ep_qp: None,
        own_srq: false,
        owns_port: true,
    }
}

/// A program with devices on 127.0.0.2 and 169.254.102.1.
fn program() -> State {
    State {
        devs: vec![dev("127.0.0.2:4791"), dev("169.254.102.1:4791")],
        ..State::default()
    }
}

#[test]
fn binds_take_the_device_of_their_address_or_every_device() {
    let st = program();
    let ip = |s: &str| s.parse().unwrap();
    assert_eq!(bind_dev(&st, ip("127.0.0.2")), Ok(Some(0)));
    assert_eq!(bind_dev(&st, ip("169.254.102.1")), Ok(Some(1)));
    // The wildcard and loopback addresses no device holds: every device,
    // as Linux's rdma_cm takes both as "any".
    for any in ["0.0.0.0", "::", "127.0.0.1", "127.9.9.9", "::1"] {
        assert_eq!(bind_dev(&st, ip(any)), Ok(None), "{any}");
    }
    assert_eq!(bind_dev(&st, ip("169.254.102.2")), Err(libc::EADDRNOTAVAIL));
    assert_eq!(bind_dev(&State::default(), ip("127.0.0.1")), Ok(None));
}

#[test]
fn loopback_destinations_loop_back_only_to_this_programs_listeners() {
    let mut st = program();
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    // The zero address is this host, always.
    assert!(loops_back(&st, a("0.0.0.0:7471")));
    assert!(loops_back(&st, a("[::]:7471")));
    // Another loopback address is some device's (maybe another
    // program's), unless this program listens there itself.
    assert!(!loops_back(&st, a("127.0.0.1:7471")));
    st.ids.insert(1, id("127.0.0.1:7471", true));
    assert!(loops_back(&st, a("127.0.0.1:7471")));
    assert!(!loops_back(&st, a("127.0.0.1:7472")), "another port");
    assert!(!loops_back(&st, a("127.0.0.3:7471")), "another address");
    // Bound but not listening: nothing to reach.
    st.ids.insert(2, id("127.0.0.4:7471", false));
    assert!(!loops_back(&st, a("127.0.0.4:7471")));
    // A device's own address is that device, listener or not.
    st.ids.insert(3, id("127.0.0.2:7471", true));
    assert!(!loops_back(&st, a("127.0.0.2:7471")));
}

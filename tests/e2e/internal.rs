//! Two devices of one NIC deliver to each other internally, and RC
//! packets between them carry no ICRC. When one stops, what its peer QP
//! still sends goes to the network, where it must be a complete RoCEv2
//! packet: a plain UDP socket takes the stopped device's address and
//! checks the ICRC of what arrives; unanswered, the QP's retries run out.

use crate::harness::{address_pair, PORT, WAIT};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use urdma::{Device, DeviceConfig, QpInitAttr, SendWr, WcStatus};
use urdma_wire::{IcrcContext, Ipv4Ident};

/// Bind `addr`, waiting up to 10 s for the device that held it to let go.
fn bind_when_free(addr: SocketAddr) -> UdpSocket {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match UdpSocket::bind(addr) {
            Ok(s) => return s,
            Err(e) if Instant::now() < end => {
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "bind {addr}: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{addr} still held after 10 s: {e}"),
        }
    }
}

/// A SEND from a QP whose internal peer device stopped reaches the
/// network with a valid ICRC.
pub fn packets_to_a_stopped_internal_peer_are_sealed() {
    let (ia, ib) = address_pair();
    let a = Device::open(DeviceConfig::new(ia)).expect("open device a");
    let b = Device::open(DeviceConfig::new(ib)).expect("open device b");
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb)).unwrap();
    qa.connect(&qb.endpoint(), &Default::default()).unwrap();
    qb.connect(&qa.endpoint(), &Default::default()).unwrap();
    drop((qb, cb, pb, b));

    let sock = bind_when_free(SocketAddr::new(ib, PORT));
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    qa.post_send(SendWr::send_inline(1, b"to a stopped peer"))
        .unwrap();
    let mut buf = vec![0u8; 9000];
    let (n, from) = sock.recv_from(&mut buf).expect("a datagram from device a");
    assert_eq!(from, SocketAddr::new(ia, PORT));
    let ctx = IcrcContext::new(from, SocketAddr::new(ib, PORT));
    let ident = urdma_wire::check_icrc_any_ident(&buf[..n], &ctx);
    assert_eq!(
        ident,
        Ok(Some(Ipv4Ident::SENT)),
        "{n} bytes from {from}: the ICRC of the header urdma sends"
    );
    // Nobody answers for the stopped peer: the QP's retries run out.
    let wc = ca.wait_one(Some(WAIT)).expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RetryExcErr));
}

//! Two devices of one NIC deliver to each other internally, and RC
//! packets between them carry no ICRC. When one stops, what its peer QP
//! still sends goes to the network, where it must be a complete RoCEv2
//! packet: a plain UDP socket takes the stopped device's address and
//! checks the ICRC of what arrives; unanswered, the QP's retries run out.

use crate::harness::{address_pair, PORT, WAIT};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use urdma::{AccessFlags, Device, DeviceConfig, QpInitAttr, SendWr, WcStatus};
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

/// Connect two devices of one NIC, stop the second, take its address with
/// a UDP socket, post the SEND `make(pd)` builds on the first and return
/// the datagram that reaches the network (the region `make` returns
/// stays registered meanwhile), checked to carry the ICRC urdma
/// sends; then wait for the QP's retries to run out.
fn sent_to_a_stopped_peer(make: impl FnOnce(&urdma::Pd) -> (SendWr, Option<urdma::Mr>)) -> Vec<u8> {
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
    let (wr, _mr) = make(&pa);
    qa.post_send(wr).unwrap();
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
    buf.truncate(n);
    buf
}

/// A SEND from a QP whose internal peer device stopped reaches the
/// network with a valid ICRC.
pub fn packets_to_a_stopped_internal_peer_are_sealed() {
    sent_to_a_stopped_peer(|_| (SendWr::send_inline(1, b"to a stopped peer"), None));
}

/// A SEND from registered memory, whose payload a device of the same NIC
/// would take by reference, reaches the network whole: the payload's
/// bytes are in the datagram, under its ICRC.
pub fn payload_by_reference_reaches_the_network_whole() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let got = sent_to_a_stopped_peer(|pd| {
        let mr = pd.reg_mr(data.len(), AccessFlags::LOCAL_WRITE).unwrap();
        mr.write_at(0, &data).unwrap();
        (
            SendWr::send(1, &[mr.slice(0, data.len()).unwrap()]),
            Some(mr),
        )
    });
    assert_eq!(
        got.len(),
        urdma_wire::BTH_LEN + data.len() + urdma_wire::ICRC_LEN
    );
    assert_eq!(
        &got[urdma_wire::BTH_LEN..got.len() - urdma_wire::ICRC_LEN],
        &data[..]
    );
}

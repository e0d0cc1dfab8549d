//! For the tests of embedded devices: two embedded devices of this process with a
//! connected RC QP pair, device `a` writing into a region of device `b`.

use crate::api::RemoteBuf;
use crate::{AccessFlags, Cq, Device, DeviceConfig, Mr, Qp, QpInitAttr};
use std::net::{IpAddr, Ipv4Addr};
use urdma_nic::fabric::udp::UdpDriver;

/// The configuration of a device on `addr`, on a port of its own for
/// this test process.
pub(crate) fn config(name: &str, addr: Ipv4Addr) -> DeviceConfig {
    DeviceConfig {
        name: name.into(),
        addr: IpAddr::V4(addr),
        port: 40_000 + (std::process::id() % 20_000) as u16,
    }
}

/// A QP of device `a` connected to one of device `b`, and a region of
/// `b` open to `a`'s RDMA WRITEs.
pub(crate) struct WritePair {
    /// The writing QP (on `a`).
    pub qa: Qp,
    /// The CQ of `qa`.
    pub ca: Cq,
    /// The region written (on `b`).
    pub target: Mr,
    /// Where `target` is, for `a`'s WRITEs.
    pub remote: RemoteBuf,
    /// The peer QP (on `b`), kept open.
    _qb: Qp,
    /// The writing device.
    pub a: Device,
    /// The written device.
    pub b: Device,
}

impl WritePair {
    /// Connect a QP of `a` to one of `b` and register `len` bytes of `b`.
    pub fn new(a: Device, b: Device, len: usize) -> Self {
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
        let qa = pa.create_qp(&QpInitAttr::rc(&ca, &ca)).unwrap();
        let qb = pb.create_qp(&QpInitAttr::rc(&cb, &cb)).unwrap();
        qa.connect(&qb.endpoint(), &Default::default()).unwrap();
        qb.connect(&qa.endpoint(), &Default::default()).unwrap();
        let target = pb
            .reg_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        let remote = target.remote();
        WritePair {
            qa,
            ca,
            target,
            remote,
            _qb: qb,
            a,
            b,
        }
    }
}

/// The engine and socket of embedded device `d`.
pub(crate) fn driver(d: &Device) -> &UdpDriver {
    let nic = d.local_nic().expect("an embedded device has its NIC");
    nic.as_any()
        .downcast_ref::<UdpDriver>()
        .expect("an embedded NIC is a UDP driver")
}

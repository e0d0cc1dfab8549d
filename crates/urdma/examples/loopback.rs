//! Two urdma devices in one process (127.0.0.1 and 127.0.0.2, UDP port
//! 4791): connect an RC QP pair, then SEND, RDMA WRITE, RDMA READ and a
//! fetch-and-add, checking the data.
//!
//! Run with `cargo run -p urdma --example loopback`.

use std::time::Duration;
use urdma::{AccessFlags, Device, DeviceConfig, QpInitAttr, RecvWr, SendWr, WcStatus};

fn main() -> urdma::Result<()> {
    let mut cfg_b = DeviceConfig::new("127.0.0.2".parse().unwrap());
    cfg_b.name = "urdma1".into();
    let a = Device::open(DeviceConfig::new("127.0.0.1".parse().unwrap()))?;
    let b = Device::open(cfg_b)?;
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ma, mb) = (pa.reg_mr(1 << 20, access)?, pb.reg_mr(1 << 20, access)?);
    let (ca, cb) = (a.create_cq(256)?, b.create_cq(256)?);
    let (qa, qb) = (
        pa.create_qp(&QpInitAttr::rc(&ca, &ca))?,
        pb.create_qp(&QpInitAttr::rc(&cb, &cb))?,
    );
    qa.connect(&qb.endpoint(), &Default::default())?;
    qb.connect(&qa.endpoint(), &Default::default())?;
    let wait = Some(Duration::from_secs(10));

    // SEND 100 KiB from a to b.
    let msg: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
    ma.write_at(0, &msg)?;
    qb.post_recv(RecvWr::new(1, &[mb.slice(0, msg.len())?]))?;
    qa.post_send(SendWr::send(2, &[ma.slice(0, msg.len())?]))?;
    assert_eq!(ca.wait_one(wait)?.status, WcStatus::Success);
    let wc = cb.wait_one(wait)?;
    assert_eq!(
        (wc.status, wc.byte_len as usize),
        (WcStatus::Success, msg.len())
    );
    let mut got = vec![0; msg.len()];
    mb.read_at(0, &mut got)?;
    assert_eq!(got, msg);
    println!("SEND ok: {} bytes", msg.len());

    // RDMA WRITE 300 KiB from a into b at offset 500 000; b does nothing.
    let data: Vec<u8> = (0..300 * 1024).map(|i| (i * 7 % 256) as u8).collect();
    ma.write_at(0, &data)?;
    qa.post_send(SendWr::write(
        3,
        &[ma.slice(0, data.len())?],
        mb.addr() + 500_000,
        mb.rkey(),
    ))?;
    assert_eq!(ca.wait_one(wait)?.status, WcStatus::Success);
    let mut got = vec![0; data.len()];
    mb.read_at(500_000, &mut got)?;
    assert_eq!(got, data);
    println!("WRITE ok: {} bytes", data.len());

    // RDMA READ it back into a at offset 400 000.
    qa.post_send(SendWr::read(
        4,
        &[ma.slice(400_000, data.len())?],
        mb.addr() + 500_000,
        mb.rkey(),
    ))?;
    let wc = ca.wait_one(wait)?;
    assert_eq!(
        (wc.status, wc.byte_len as usize),
        (WcStatus::Success, data.len())
    );
    let mut got = vec![0; data.len()];
    ma.read_at(400_000, &mut got)?;
    assert_eq!(got, data);
    println!("READ ok: {} bytes", data.len());

    // Fetch-and-add on b's first word.
    mb.write_at(0, &40u64.to_ne_bytes())?;
    qa.post_send(SendWr::fetch_add(
        5,
        &ma.slice(0, 8)?,
        mb.addr(),
        mb.rkey(),
        2,
    ))?;
    assert_eq!(ca.wait_one(wait)?.status, WcStatus::Success);
    let mut w = [0u8; 8];
    ma.read_at(0, &mut w)?;
    assert_eq!(u64::from_ne_bytes(w), 40);
    mb.read_at(0, &mut w)?;
    assert_eq!(u64::from_ne_bytes(w), 42);
    println!("FETCH_ADD ok: 40 + 2 = 42");
    Ok(())
}

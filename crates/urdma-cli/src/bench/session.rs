//! One side of a benchmark connection: device, buffer, CQs and a connected RC QP.

use super::proto::{Channel, Msg};
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::time::Duration;
use urdma::api::RemoteBuf;
use urdma::{
    AccessFlags, ConnectOptions, Cq, Device, DeviceConfig, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType,
    WcStatus, WorkCompletion,
};
use urdma::{MrSlice, SendWr};

/// How long any single wait may take before the run is declared stuck.
pub const WAIT: Duration = Duration::from_secs(30);

/// Parameters both sides agree on.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// UDP port of the devices.
    pub udp_port: u16,
    /// Largest message.
    pub max_size: usize,
    /// Outstanding work requests in bandwidth tests.
    pub depth: usize,
    /// Path MTU.
    pub mtu: Mtu,
}

/// A connected benchmark endpoint.
pub struct Session {
    /// The device.
    pub dev: Device,
    /// Local buffer: [0, half) receives, [half, 2*half) sends.
    pub mr: Mr,
    /// Send CQ.
    pub scq: Cq,
    /// Receive CQ.
    pub rcq: Cq,
    /// The QP.
    pub qp: Qp,
    /// The peer's buffer.
    pub peer: RemoteBuf,
    /// Offset of the send half of `mr` (and of the peer's).
    pub half: usize,
}

impl Session {
    /// Open the device on `ip`, create the objects and connect through `ch`.
    /// The client speaks first.
    pub fn connect(ip: IpAddr, p: &Params, ch: &mut Channel, client: bool) -> Result<Session> {
        let cfg = DeviceConfig {
            name: if client { "urdma0" } else { "urdma1" }.into(),
            addr: ip,
            port: p.udp_port,
        };
        let dev = Device::open(cfg)
            .with_context(|| format!("cannot open a device on {ip}:{}", p.udp_port))?;
        let pd = dev.alloc_pd()?;
        let half = p.max_size.max(64);
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let mr = pd.reg_mr(2 * half, access)?;
        let depth = p.depth as u32;
        let scq = dev.create_cq(4 * p.depth + 16)?;
        let rcq = dev.create_cq(4 * p.depth + 16)?;
        let cap = QpCap {
            max_send_wr: 2 * depth + 4,
            max_recv_wr: 2 * depth + 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qp = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &scq,
            recv_cq: &rcq,
            cap,
            sq_sig_all: false,
        })?;
        let hello = Msg::Hello {
            endpoint: qp.endpoint().with_mtu_at_most(p.mtu),
            buf: mr.remote(),
        };
        let theirs = if client {
            ch.send(&hello)?;
            ch.recv()?
        } else {
            let m = ch.recv()?;
            ch.send(&hello)?;
            m
        };
        let Msg::Hello { endpoint, buf } = theirs else {
            bail!("expected Hello, got {theirs:?}");
        };
        let opts = ConnectOptions {
            mtu: p.mtu,
            access,
            ..ConnectOptions::default()
        };
        qp.connect(&endpoint, &opts)?;
        Ok(Session {
            dev,
            mr,
            scq,
            rcq,
            qp,
            peer: buf,
            half,
        })
    }
}

impl Session {
    /// Stamp the last byte of `src` (at `half + last` of the buffer) and
    /// RDMA WRITE it, unsignaled, to the start of the peer's buffer.
    pub fn write_stamped(&self, src: &MrSlice, last: usize, stamp: u8, wr_id: u64) -> Result<()> {
        set_stamp(&self.mr, self.half + last, stamp)?;
        let wr = SendWr::write(
            wr_id,
            std::slice::from_ref(src),
            self.peer.addr,
            self.peer.rkey,
        );
        self.qp.post_send(wr.unsignaled())?;
        Ok(())
    }
}

/// Wait for up to `max` completions on `cq` and insist that all succeeded.
fn reap(cq: &Cq, max: usize) -> Result<Vec<WorkCompletion>> {
    let wcs = cq
        .wait(max, Some(WAIT))
        .context("waiting for completions")?;
    wcs.iter().try_for_each(succeeded)?;
    Ok(wcs)
}

/// An error unless `wc` reports success.
fn succeeded(wc: &WorkCompletion) -> Result<()> {
    if wc.status != WcStatus::Success {
        bail!("work request {} failed: {:?}", wc.wr_id, wc.status);
    }
    Ok(())
}

/// Call `look` until it finds something, yielding the CPU between looks,
/// for at most [`WAIT`]; `what` names what did not come.
fn spin_for<T>(what: &str, mut look: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = look()? {
            return Ok(v);
        }
        if std::time::Instant::now() > deadline {
            bail!("no {what} within {WAIT:?}");
        }
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}

/// Poll `cq` for up to [`POLL_BEFORE_SLEEP`], then sleep on it until
/// completions come (up to `max`); insist that they succeeded.
pub fn reap_adaptive(cq: &Cq, max: usize) -> Result<Vec<WorkCompletion>> {
    let until = std::time::Instant::now() + POLL_BEFORE_SLEEP;
    loop {
        let v = cq.poll(max)?;
        if !v.is_empty() {
            v.iter().try_for_each(succeeded)?;
            return Ok(v);
        }
        if std::time::Instant::now() >= until {
            return reap(cq, max);
        }
        std::thread::yield_now();
    }
}

/// How long [`reap_adaptive`] polls before it sleeps.
const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// Poll `cq` until completions come (up to `max`), as perftest's
/// bandwidth tests do, and insist that they succeeded.
pub fn reap_spinning(cq: &Cq, max: usize) -> Result<Vec<WorkCompletion>> {
    let wcs = spin_for("completion", || {
        let v = cq.poll(max)?;
        Ok((!v.is_empty()).then_some(v))
    })?;
    wcs.iter().try_for_each(succeeded)?;
    Ok(wcs)
}

/// Poll `cq` until a completion comes, as perftest's latency tests do
/// (no sleep and wake-up between), and insist that it succeeded.
pub fn reap_polling(cq: &Cq) -> Result<WorkCompletion> {
    Ok(reap_spinning(cq, 1)?.remove(0))
}

/// Spin until byte `off` of `mr` equals `stamp`.
pub fn wait_stamp(mr: &Mr, off: usize, stamp: u8) -> Result<()> {
    let mut b = [0u8];
    spin_for("RDMA WRITE", || {
        mr.read_at(off, &mut b)?;
        Ok((b[0] == stamp).then_some(()))
    })
}

/// Write `stamp` into byte `off` of `mr`, retrying while an earlier
/// work request still holds it.
pub fn set_stamp(mr: &Mr, off: usize, stamp: u8) -> Result<()> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match mr.write_at(off, &[stamp]) {
            Ok(()) => return Ok(()),
            Err(urdma::Error::Busy(_)) if std::time::Instant::now() < deadline => {
                std::thread::yield_now()
            }
            Err(e) => return Err(e.into()),
        }
    }
}

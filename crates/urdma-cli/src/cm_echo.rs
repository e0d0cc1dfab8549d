//! `urdma cm-echo`: one 16-byte message each way over an RC connection
//! that the communication manager sets up, as rdma-core's `rdma_client`
//! and `rdma_server` examples exchange it, and with them: the REQ carries
//! rdma_cm's address header and asks for a port of rdma_cm's TCP port
//! space, so a Linux host's rdma_cm (rxe or an RNIC) answers it.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use urdma::cm::{rej_reason, AcceptParams, CmEvent, CmOp, ConnId, ConnectParams};
use urdma::cm::{CmaHeader, REQ_PRIVATE_LEN};
use urdma::{
    AccessFlags, ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Gid, Mtu, Qp, QpInitAttr,
    RecvWr, SendWr, WcStatus,
};

/// rdma_cm's TCP port space.
const RDMA_PS_TCP: u16 = 0x0106;
/// The message size of rdma_client and rdma_server.
const MSG_LEN: usize = 16;

/// Arguments of `urdma cm-echo`.
#[derive(Args, Debug)]
pub struct CmEchoArgs {
    /// Server to connect to; without it, serve one client.
    server: Option<IpAddr>,
    /// Local address (the device to use, on `URDMA_PORT` or 4791);
    /// default: the first device.
    #[arg(short = 'b', long)]
    bind: Option<IpAddr>,
    /// rdma_cm port (TCP port space).
    #[arg(short, long, default_value_t = 7471)]
    port: u16,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

struct Side {
    dev: Device,
    cq: Cq,
    qp: Qp,
    buf: urdma::Mr,
    deadline: Instant,
}

impl Side {
    fn open(args: &CmEchoArgs) -> Result<Side> {
        let cfg = match args.bind {
            Some(ip) => DeviceConfig {
                port: urdma::config::default_port()?,
                ..DeviceConfig::new(ip)
            },
            None => urdma::config::discover()?
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("no urdma device"))?,
        };
        let dev = Device::open(cfg)?;
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(4)?;
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
        let buf = pd.reg_mr(2 * MSG_LEN, AccessFlags::LOCAL_WRITE)?;
        Ok(Side {
            dev,
            cq,
            qp,
            buf,
            deadline: Instant::now() + Duration::from_secs(args.timeout),
        })
    }

    fn left(&self) -> Result<Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .ok_or_else(|| anyhow!("timed out"))
    }

    fn event(&self) -> Result<CmEvent> {
        let ev = self
            .dev
            .next_cm_event(Some(self.left()?))
            .ok_or_else(|| anyhow!("timed out waiting for the CM"))?;
        tracing::debug!(?ev, "CM event");
        Ok(ev)
    }

    /// Move the QP to RTS towards `peer`'s QP, sending from the PSN the
    /// peer advertised (`send_psn`) and expecting the one this side did,
    /// and post the receive.
    fn ready(&self, peer: IpAddr, qpn: u32, send_psn: u32, mtu: Mtu, rd: u8) -> Result<()> {
        let remote = Endpoint {
            gid: Gid::from_ip(peer),
            port: self.dev.local_addr().port(),
            qpn,
            psn: self.qp.endpoint().psn,
            mtu,
        };
        let opts = ConnectOptions {
            mtu,
            max_rd_atomic: rd.max(1),
            max_dest_rd_atomic: rd.max(1),
            ..ConnectOptions::default()
        };
        self.qp.connect_sending_from(&remote, send_psn, &opts)?;
        let recv = [self.buf.slice(MSG_LEN, MSG_LEN)?];
        self.qp.post_recv(RecvWr::new(2, &recv))?;
        Ok(())
    }

    /// Wait for the completion of `wr_id`.
    fn complete(&self, wr_id: u64) -> Result<usize> {
        loop {
            let wc = self.cq.wait_one(Some(self.left()?))?;
            if wc.status != WcStatus::Success {
                bail!("work request {} failed: {:?}", wc.wr_id, wc.status);
            }
            if wc.wr_id == wr_id {
                return Ok(wc.byte_len as usize);
            }
        }
    }

    fn send(&self, msg: &[u8; MSG_LEN]) -> Result<()> {
        self.buf.write_at(0, msg)?;
        let sgl = [self.buf.slice(0, MSG_LEN)?];
        self.qp.post_send(SendWr::send(1, &sgl))?;
        self.complete(1).map(|_| ())
    }

    fn received(&self) -> Result<[u8; MSG_LEN]> {
        let n = self.complete(2)?;
        if n != MSG_LEN {
            bail!("received {n} bytes, not {MSG_LEN}");
        }
        let mut m = [0u8; MSG_LEN];
        self.buf.read_at(MSG_LEN, &mut m)?;
        Ok(m)
    }

    /// Disconnect (unless the peer did first) and wait for the end.
    fn disconnect(&self, id: ConnId) -> Result<()> {
        let dreq = CmOp::Disconnect {
            id,
            private_data: Vec::new(),
        };
        if self.dev.cm(dreq).is_ok() {
            loop {
                if let CmEvent::Disconnected { id: d } = self.event()? {
                    if d == id {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

fn mtu_code(m: Mtu) -> u8 {
    m as u8
}

fn client(side: &Side, server: IpAddr, port: u16) -> Result<()> {
    let local = side.dev.local_addr();
    let me = side.qp.endpoint();
    let mtu = side.dev.port_attr().active_mtu;
    let mut private_data = vec![0u8; REQ_PRIVATE_LEN];
    CmaHeader {
        src_port: 0xC000 | (std::process::id() as u16 & 0x3FFF),
        src: local.ip(),
        dst: server,
    }
    .emit(&mut private_data)
    .map_err(|e| anyhow!("address header: {e}"))?;
    let params = ConnectParams {
        path_mtu: mtu_code(mtu),
        private_data,
        ..ConnectParams::rc(
            SocketAddr::new(server, local.port()),
            CmaHeader::service_id(RDMA_PS_TCP, port),
            me.qpn,
            me.psn,
        )
    };
    let id = side
        .dev
        .cm(CmOp::Connect(params))?
        .ok_or_else(|| anyhow!("the CM gave no connection"))?;
    let rep = match side.event()? {
        CmEvent::ConnectResponse { rep, .. } => rep,
        CmEvent::Rejected { reason, .. } if reason == rej_reason::INVALID_SERVICE_ID => {
            bail!("connection refused: nobody listens on port {port} of {server}")
        }
        CmEvent::Rejected { reason, .. } => bail!("rejected (reason {reason})"),
        CmEvent::Unreachable { .. } => bail!("{server} did not answer"),
        ev => bail!("unexpected CM event {ev:?}"),
    };
    side.ready(
        server,
        rep.local_qpn,
        rep.starting_psn,
        mtu,
        rep.responder_resources,
    )?;
    side.dev.cm(CmOp::ReadyToUse {
        id,
        private_data: Vec::new(),
    })?;
    let msg = *b"urdma cm-echo 16";
    side.send(&msg)?;
    let back = side.received()?;
    println!(
        "connected to {server} port {port} (QP {:#x}), sent {MSG_LEN} bytes, received {MSG_LEN} bytes",
        rep.local_qpn
    );
    tracing::debug!(?back, "reply");
    side.disconnect(id)
}

fn server(side: &Side, port: u16) -> Result<()> {
    let service_id = CmaHeader::service_id(RDMA_PS_TCP, port);
    side.dev.cm(CmOp::Listen { service_id })?;
    let (id, peer, req) = loop {
        if let CmEvent::ConnectRequest { id, peer, req } = side.event()? {
            break (id, peer, req);
        }
    };
    let from = CmaHeader::parse(&req.private_data)
        .map(|h| h.src)
        .unwrap_or(peer.ip());
    let ours = side.dev.port_attr().active_mtu;
    let mtu = Mtu::from_raw(u32::from(req.path_mtu))
        .unwrap_or(Mtu::Mtu1024)
        .min(ours);
    side.ready(
        peer.ip(),
        req.local_qpn,
        req.starting_psn,
        mtu,
        req.initiator_depth,
    )?;
    let me = side.qp.endpoint();
    side.dev.cm(CmOp::Accept {
        id,
        params: AcceptParams {
            qpn: me.qpn,
            starting_psn: me.psn,
            responder_resources: req.initiator_depth.min(16),
            initiator_depth: req.responder_resources.min(16),
            rnr_retry_count: 7,
            ..AcceptParams::default()
        },
    })?;
    // The message may come before the RTU: it establishes the connection.
    let msg = side.received()?;
    if side.dev.cm(CmOp::Established { id }).is_err() {
        tracing::debug!("established by the RTU");
    }
    side.send(&msg)?;
    println!(
        "connection from {from} (QP {:#x}) on port {port}: echoed {MSG_LEN} bytes",
        req.local_qpn
    );
    side.disconnect(id)
}

/// Run `urdma cm-echo`.
pub fn run(args: &CmEchoArgs) -> Result<()> {
    let side = Side::open(args).context("opening the device")?;
    match args.server {
        Some(s) => client(&side, s, args.port),
        None => server(&side, args.port),
    }
}

//! A host that never connected sends CM REQs naming another host's CA
//! GUID, for the security tests (`tests/security/run`).
//!
//! `cm_forge SERVER_IP CLIENT_IP ATTACKER_IP PORT [QPN_FROM QPN_TO]`
//!
//! From a plain UDP socket on ATTACKER_IP:4791, a REQ for the rdma_cm TCP
//! port PORT goes to QP 1 of SERVER_IP for each QP number in
//! QPN_FROM..=QPN_TO (default 1..=4096), each naming the CA GUID of the
//! device on CLIENT_IP: what a REQ of a restarted CLIENT_IP would say.
//! The server must end none of CLIENT_IP's connections for it.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use urdma::api::node_guid;
use urdma::cm::{Cm, ConnectParams};
use urdma_wire::cm::{CmaHeader, GSI_QKEY};
use urdma_wire::{Bth, Deth, IcrcContext, Opcode, PacketRepr};

const PORT: u16 = 4791;
/// The rdma_cm port space of TCP-like (RC) connections.
const RDMA_PS_TCP: u16 = 0x0106;

fn main() -> ExitCode {
    match run() {
        Ok(n) => {
            println!("{n} forged REQs sent");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cm_forge: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<u32, Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cm_forge SERVER_IP CLIENT_IP ATTACKER_IP PORT [QPN_FROM QPN_TO]";
    let ip = |i: usize| a.get(i).and_then(|s| s.parse::<IpAddr>().ok());
    let (Some(server), Some(client), Some(attacker)) = (ip(0), ip(1), ip(2)) else {
        return Err(usage.into());
    };
    let port: u16 = a.get(3).and_then(|s| s.parse().ok()).ok_or(usage)?;
    let from: u32 = a.get(4).map_or(Some(1), |s| s.parse().ok()).ok_or(usage)?;
    let to: u32 = a
        .get(5)
        .map_or(Some(4096), |s| s.parse().ok())
        .ok_or(usage)?;
    let sock = UdpSocket::bind(SocketAddr::new(attacker, PORT))?;
    let dst = SocketAddr::new(server, PORT);
    let ctx = IcrcContext::new(sock.local_addr()?, dst);
    let guid = node_guid(&SocketAddr::new(client, PORT));
    // A CM that calls itself the client makes the REQs.
    let mut cm = Cm::new(client, guid, 0x5eed);
    let service = CmaHeader::service_id(RDMA_PS_TCP, port);
    let mut sent = 0;
    for qpn in from..=to {
        cm.connect(0, &ConnectParams::rc(dst, service, qpn, 0))?;
        for o in cm.drain_tx() {
            let mut repr = PacketRepr::new(Bth::new(Opcode::UdSendOnly, 1, qpn));
            repr.deth = Some(Deth {
                qkey: GSI_QKEY,
                src_qp: 1,
            });
            sock.send_to(&urdma_wire::build(&repr, &o.mad.emit(), &ctx)?, dst)?;
            sent += 1;
        }
        if qpn % 256 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    Ok(sent)
}

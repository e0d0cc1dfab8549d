//! A peer that asks the shared NIC for huge RDMA READs, for the security
//! tests (`tests/security/run`): the NIC's memory must stay bounded.
//!
//! `read_storm VICTIM_IP ATTACKER_IP [QPS] [LEN] [SECS] [LIMIT_MIB]`
//!
//! A device on VICTIM_IP (through the NIC agent) registers LEN bytes
//! (default 2 GiB) open to remote READs and connects QPS RC QPs (default
//! 64) to a plain UDP socket on ATTACKER_IP:4791, which then sends each
//! QP one READ request of the whole region and reads the responses
//! slowly. For SECS seconds (default 10) the agent's private memory
//! (resident set less the shared memory it maps, which is the region's
//! own pages) is sampled; the run fails as soon as it grows by more than
//! LIMIT_MIB (default 64) over its size before the READs, or if the agent
//! ends. Prints the figures; exit status 0 if the bound held.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use urdma::api::ConnectOptions;
use urdma::nic::{addr, channel};
use urdma::{AccessFlags, Device, DeviceConfig, Endpoint, Gid, Mtu, QpInitAttr};
use urdma_wire::{Bth, IcrcContext, Opcode, PacketRepr, Reth};

const PORT: u16 = 4791;
/// First QP number the attacker claims.
const ATTACKER_QPN: u32 = 0x300;

/// The agent's private resident memory in KiB (VmRSS less RssShmem).
fn private_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    Some(field("VmRSS:")?.saturating_sub(field("RssShmem:").unwrap_or(0)))
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Option<T> {
    match args.get(i) {
        Some(s) => s.parse().ok(),
        None => Some(default),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("read_storm: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: read_storm VICTIM_IP ATTACKER_IP [QPS] [LEN] [SECS] [LIMIT_MIB]";
    let (Some(victim), Some(attacker)) = (
        args.first().and_then(|s| s.parse::<IpAddr>().ok()),
        args.get(1).and_then(|s| s.parse::<IpAddr>().ok()),
    ) else {
        return Err(usage.into());
    };
    let qps: u32 = arg(&args, 2, 64).ok_or(usage)?;
    let len: u32 = arg(&args, 3, 1 << 31).ok_or(usage)?;
    let secs: u64 = arg(&args, 4, 10).ok_or(usage)?;
    let limit_mib: u64 = arg(&args, 5, 64).ok_or(usage)?;

    let probe = addr::connect_first()?;
    let (agent, _) = channel::peer(&probe)?;
    drop(probe);

    let sock = UdpSocket::bind(SocketAddr::new(attacker, PORT))?;
    sock.set_read_timeout(Some(Duration::from_millis(1)))?;
    let dev = Device::open(DeviceConfig {
        name: "urdma0".into(),
        addr: victim,
        port: PORT,
    })?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(64)?;
    let mr = pd.reg_mr(
        len as usize,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let mut held = Vec::new();
    for i in 0..qps {
        let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
        let me = Endpoint {
            gid: Gid::from_ip(attacker),
            port: PORT,
            qpn: ATTACKER_QPN + i,
            psn: 0,
            mtu: Mtu::Mtu4096,
        };
        qp.connect(&me, &ConnectOptions::default())?;
        held.push(qp);
    }
    // Let the agent settle after the setup before it is measured.
    std::thread::sleep(Duration::from_millis(300));
    let idle = private_kib(agent).ok_or("cannot read the agent's memory")?;
    let to = SocketAddr::new(victim, PORT);
    let ctx = IcrcContext::new(sock.local_addr()?, to);
    for qp in &held {
        let mut bth = Bth::new(Opcode::RcReadRequest, qp.qpn(), 0);
        bth.ack_req = true;
        let mut repr = PacketRepr::new(bth);
        repr.reth = Some(Reth {
            va: mr.addr(),
            rkey: mr.rkey(),
            dma_len: len,
        });
        sock.send_to(&urdma_wire::build(&repr, &[], &ctx)?, to)?;
    }
    let start = Instant::now();
    let (mut peak, mut responses) = (idle, 0u64);
    let mut buf = vec![0u8; 9000];
    let limit = limit_mib * 1024;
    let mut held_up = true;
    while start.elapsed() < Duration::from_secs(secs) {
        // Take a few responses, as a slow reader would.
        for _ in 0..16 {
            if sock.recv(&mut buf).is_ok() {
                responses += 1;
            }
        }
        match private_kib(agent) {
            Some(kib) => peak = peak.max(kib),
            None => {
                println!("the agent (pid {agent}) ended");
                held_up = false;
                break;
            }
        }
        if peak > idle + limit {
            held_up = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "{qps} READs of {len} bytes: agent private memory {idle} KiB before, peak {peak} KiB \
         (+{} KiB, limit +{limit} KiB) in {:.1} s; {responses} responses taken",
        peak.saturating_sub(idle),
        start.elapsed().as_secs_f64()
    );
    drop(held);
    Ok(held_up && peak <= idle + limit)
}

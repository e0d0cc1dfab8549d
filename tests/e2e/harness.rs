//! The test side of the two-process harness: spawning and driving the
//! peer process, per-test loopback addresses, a connected-QP fixture and
//! helpers to fill, check and digest local regions.

use crate::pattern;
use crate::proto::{Cmd, ConnOpts, MrInfo, Polled, QpInfo, Sge, WrSpec};
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use urdma::{
    AccessFlags, Cq, Device, DeviceConfig, Mr, Pd, Qp, QpAttr, QpInitAttr, WcOpcode, WcStatus,
    WorkCompletion,
};

/// The environment variable that turns the test binary into the peer.
pub const PEER_ENV: &str = "URDMA_E2E_PEER";
/// The UDP port of every device (the RoCEv2 port).
pub const PORT: u16 = 4791;
/// How long any single wait may take.
pub const WAIT: Duration = Duration::from_secs(20);
/// Every access right.
pub const ALL: AccessFlags = AccessFlags::all();
/// Chunk size for fills, checks and digests of large regions.
const CHUNK: usize = 16 << 20;

/// Counter giving each fixture its own pair of addresses.
static NEXT_NET: AtomicU32 = AtomicU32::new(0);

/// A fresh pair of loopback addresses (127.X.N.1, 127.X.N.2). X depends on
/// the process id so that two concurrent runs of the suite rarely collide.
pub fn address_pair() -> (IpAddr, IpAddr) {
    let n = NEXT_NET.fetch_add(1, Ordering::Relaxed);
    let x = 10 + (std::process::id() % 64) * 3 + n / 256;
    let ip = |h| IpAddr::V4(Ipv4Addr::new(127, x as u8, (n % 256) as u8, h));
    (ip(1), ip(2))
}

/// A running peer process and the pipe to talk to it.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    /// Start the peer (this same binary with [`PEER_ENV`] set).
    pub fn spawn() -> Peer {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .env(PEER_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the peer process");
        let stdout = child.stdout.take().expect("peer stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Peer {
            child,
            stdin,
            lines,
        }
    }

    /// Send a command and wait up to `timeout` for its answer.
    pub fn call_within<T: DeserializeOwned>(
        &mut self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, String> {
        let text = serde_json::to_string(cmd).expect("serialize command");
        let stdin = self.stdin.as_mut().expect("peer stdin open");
        writeln!(stdin, "{text}")
            .and_then(|_| stdin.flush())
            .unwrap_or_else(|err| panic!("peer gone while sending {text}: {err}"));
        let line = self
            .lines
            .recv_timeout(timeout)
            .unwrap_or_else(|err| panic!("no answer from the peer to {text}: {err}"));
        let reply: Result<serde_json::Value, String> =
            serde_json::from_str(&line).unwrap_or_else(|err| panic!("bad reply {line}: {err}"));
        reply.map(|v| {
            serde_json::from_value(v).unwrap_or_else(|err| panic!("reply to {text}: {err}"))
        })
    }

    /// Send a command and wait up to [`WAIT`] for its answer.
    pub fn call<T: DeserializeOwned>(&mut self, cmd: &Cmd) -> Result<T, String> {
        self.call_within(cmd, WAIT)
    }

    /// Send a command that must succeed.
    pub fn ok<T: DeserializeOwned>(&mut self, cmd: &Cmd) -> T {
        self.call(cmd)
            .unwrap_or_else(|err| panic!("peer failed {cmd:?}: {err}"))
    }

    /// Register a peer MR in PD `pd`.
    pub fn reg_mr(&mut self, pd: u32, len: usize, access: AccessFlags) -> MrInfo {
        self.ok(&Cmd::RegMr { pd, len, access })
    }

    /// Post a receive of the given SGEs.
    pub fn post_recv(&mut self, qp: u32, wr_id: u64, sges: &[Sge]) {
        let sges = sges.to_vec();
        self.ok::<()>(&Cmd::PostRecv { qp, wr_id, sges })
    }

    /// Post a signaled send WR.
    pub fn post_send(&mut self, qp: u32, wr_id: u64, wr: WrSpec) {
        self.ok::<()>(&Cmd::PostSend {
            qp,
            wr_id,
            wr,
            signaled: true,
        })
    }

    /// Take completions from a peer CQ for at most `timeout`.
    pub fn poll_for(&mut self, cq: u32, max: usize, timeout: Duration) -> Polled {
        let timeout_ms = timeout.as_millis() as u64;
        let cmd = Cmd::Poll {
            cq,
            max,
            timeout_ms,
        };
        self.call_within(&cmd, timeout + WAIT)
            .unwrap_or_else(|err| panic!("peer poll: {err}"))
    }

    /// Take exactly `n` completions from a peer CQ (waiting up to [`WAIT`]).
    pub fn poll(&mut self, cq: u32, n: usize) -> Vec<WorkCompletion> {
        let p = self.poll_for(cq, n, WAIT);
        assert!(!p.overrun, "peer CQ overrun");
        assert_eq!(p.wcs.len(), n, "peer completions: {:?}", p.wcs);
        p.wcs
    }

    /// Fill `len` bytes at `off` of a peer MR with pattern `seed`.
    pub fn fill(&mut self, mr: u32, off: usize, len: usize, seed: u64) {
        let cmd = Cmd::Fill {
            mr,
            off,
            len,
            seed,
            base: 0,
        };
        self.call_within::<()>(&cmd, WAIT * 3)
            .unwrap_or_else(|err| panic!("peer fill: {err}"))
    }

    /// First mismatch between a peer MR range and pattern `seed` from `base`.
    pub fn check(
        &mut self,
        mr: u32,
        off: usize,
        len: usize,
        seed: u64,
        base: u64,
    ) -> Option<usize> {
        let cmd = Cmd::Check {
            mr,
            off,
            len,
            seed,
            base,
        };
        self.call_within(&cmd, WAIT * 3)
            .unwrap_or_else(|err| panic!("peer check: {err}"))
    }

    /// Digest of a peer MR range.
    pub fn digest(&mut self, mr: u32, off: usize, len: usize) -> u64 {
        let cmd = Cmd::Digest { mr, off, len };
        self.call_within(&cmd, WAIT * 3)
            .unwrap_or_else(|err| panic!("peer digest: {err}"))
    }

    /// Bytes of a peer MR.
    pub fn peek(&mut self, mr: u32, off: usize, len: usize) -> Vec<u8> {
        self.ok(&Cmd::Peek { mr, off, len })
    }

    /// Query a peer QP.
    pub fn query(&mut self, qp: u32) -> QpAttr {
        self.ok(&Cmd::QueryQp { qp })
    }
}

impl Drop for Peer {
    /// Close stdin (the peer exits), wait a little, then kill it.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Payload bytes per packet of an RC QP at path MTU `mtu` between a
/// fixture's two devices: devices of one NIC (the shared agent with
/// internal loopback on) cut messages into pieces of
/// [`urdma::engine::INTERNAL_UNIT`] instead; over UDP
/// (`URDMA_LOOPBACK=udp`, or NICs inside each process) the path MTU holds.
pub fn packet_payload(mtu: usize) -> usize {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("URDMA_LOOPBACK") == "udp" || var("URDMA_NIC") == "embedded" {
        mtu
    } else {
        urdma::engine::INTERNAL_UNIT
    }
}

/// One local device and one peer device, each with a PD and a CQ.
pub struct Fixture {
    /// The peer process (declared first: dropped first).
    pub peer: Peer,
    /// Local device.
    pub dev: Device,
    /// Local PD.
    pub pd: Pd,
    /// Local CQ (1024 entries).
    pub cq: Cq,
    /// Peer PD id.
    pub ppd: u32,
    /// Peer CQ id (1024 entries).
    pub pcq: u32,
    /// Local address.
    pub ip: IpAddr,
    /// Peer address.
    pub peer_ip: IpAddr,
}

/// A connected RC QP pair.
pub struct Link {
    /// Local QP.
    pub qp: Qp,
    /// Peer QP id.
    pub pqp: u32,
    /// Peer QP number.
    pub pqpn: u32,
}

impl Fixture {
    /// Open both devices on a fresh address pair.
    pub fn new() -> Fixture {
        let (ip, peer_ip) = address_pair();
        let dev = Device::open(DeviceConfig::new(ip)).expect("open local device");
        let mut peer = Peer::spawn();
        peer.ok::<()>(&Cmd::Open {
            addr: peer_ip,
            port: PORT,
        });
        let ppd = peer.ok(&Cmd::AllocPd);
        let pcq = peer.ok(&Cmd::CreateCq { cqe: 1024 });
        let pd = dev.alloc_pd().expect("alloc pd");
        let cq = dev.create_cq(1024).expect("create cq");
        Fixture {
            peer,
            dev,
            pd,
            cq,
            ppd,
            pcq,
            ip,
            peer_ip,
        }
    }

    /// Connect a new QP pair using the fixture's CQs.
    pub fn connect(&mut self, opts: &ConnOpts) -> Link {
        let cq = self.cq.clone();
        let pcq = self.pcq;
        self.connect_on(&cq, pcq, opts, opts)
    }

    /// Connect a new QP pair on local CQ `cq` and peer CQ `pcq`, with
    /// options `mine` locally and `theirs` on the peer.
    pub fn connect_on(&mut self, cq: &Cq, pcq: u32, mine: &ConnOpts, theirs: &ConnOpts) -> Link {
        self.connect_with(&QpInitAttr::rc(cq, cq), pcq, mine, theirs)
    }

    /// Connect a new QP pair, the local QP made from `init`.
    pub fn connect_with(
        &mut self,
        init: &QpInitAttr<'_>,
        pcq: u32,
        mine: &ConnOpts,
        theirs: &ConnOpts,
    ) -> Link {
        let qp = self.pd.create_qp(init).expect("create qp");
        let p: QpInfo = self.peer.ok(&Cmd::CreateQp {
            pd: self.ppd,
            cq: pcq,
            cap: None,
        });
        self.peer.ok::<()>(&Cmd::Connect {
            qp: p.id,
            remote: qp.endpoint(),
            opts: theirs.clone(),
        });
        qp.connect(&p.endpoint, &mine.to_options())
            .expect("connect local qp");
        Link {
            qp,
            pqp: p.id,
            pqpn: p.endpoint.qpn,
        }
    }

    /// Register a peer MR in the fixture's peer PD.
    pub fn peer_mr(&mut self, len: usize, access: AccessFlags) -> MrInfo {
        let pd = self.ppd;
        self.peer.reg_mr(pd, len, access)
    }

    /// Register a local MR in the fixture's PD.
    pub fn mr(&self, len: usize, access: AccessFlags) -> Mr {
        self.pd.reg_mr(len, access).expect("reg_mr")
    }
}

/// The next completion of a local CQ (panics after [`WAIT`]).
pub fn wait_wc(cq: &Cq) -> WorkCompletion {
    cq.wait_one(Some(WAIT))
        .unwrap_or_else(|e| panic!("no local completion: {e}"))
}

/// Assert the identifying fields of a completion.
pub fn assert_wc(wc: &WorkCompletion, wr_id: u64, status: WcStatus, opcode: WcOpcode) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, status, opcode),
        "completion {wc:?}"
    );
}

/// Wait for one local completion and check it is a success of `opcode`.
pub fn expect_ok(cq: &Cq, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    let wc = wait_wc(cq);
    assert_wc(&wc, wr_id, WcStatus::Success, opcode);
    wc
}

/// Fill `len` bytes at `off` of a local MR with pattern `seed`.
pub fn fill(mr: &Mr, off: usize, len: usize, seed: u64) {
    let mut buf = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        pattern::fill(seed, done as u64, &mut buf[..n]);
        mr.write_at(off + done, &buf[..n]).expect("write_at");
        done += n;
    }
}

/// First mismatch between a local MR range and pattern `seed` from `base`.
pub fn check(mr: &Mr, off: usize, len: usize, seed: u64, base: u64) -> Option<usize> {
    let mut buf = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        mr.read_at(off + done, &mut buf[..n]).expect("read_at");
        if let Some(i) = pattern::first_mismatch(seed, base + done as u64, &buf[..n]) {
            return Some(done + i);
        }
        done += n;
    }
    None
}

/// Digest of an MR range (used by both processes).
pub fn mr_digest(mr: &Mr, off: usize, len: usize) -> u64 {
    let mut h = pattern::Hasher::default();
    let mut buf = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        mr.read_at(off + done, &mut buf[..n]).expect("read_at");
        h.update(&buf[..n]);
        done += n;
    }
    h.finish()
}

/// A peer SGE.
pub fn sge(mr: &MrInfo, off: usize, len: usize) -> Sge {
    Sge {
        mr: mr.id,
        off,
        len,
    }
}

//! The peer process: a small verbs agent driven by [`Cmd`] JSON lines on
//! stdin. It answers each command with one JSON line on stdout and exits
//! when stdin closes. Between commands it does nothing at all, so RDMA
//! WRITE, READ and atomics aimed at it progress only through the
//! engine's receive thread.

use crate::pattern;
use crate::proto::{Cmd, MrInfo, Polled, QpInfo, Sge, WrSpec};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};
use urdma::{Cq, Device, DeviceConfig, Error, Mr, MrSlice, Pd, Qp, QpInitAttr, RecvWr, SendWr};

/// Chunk size for digests of large regions.
const CHUNK: usize = 16 << 20;

/// The objects the peer holds, addressed by index.
#[derive(Default)]
struct State {
    dev: Option<Device>,
    pds: Vec<Pd>,
    mrs: Vec<Mr>,
    cqs: Vec<Cq>,
    qps: Vec<Option<Qp>>,
}

/// Look up `v[id]` or fail with a message naming `what`.
fn get<'a, T>(v: &'a [T], id: u32, what: &str) -> Result<&'a T, String> {
    v.get(id as usize).ok_or_else(|| format!("no {what} {id}"))
}

/// Turn a verbs error into the reply's error string.
fn e(err: Error) -> String {
    format!("{err:?}")
}

impl State {
    fn dev(&self) -> Result<&Device, String> {
        self.dev
            .as_ref()
            .ok_or_else(|| "device not open".to_string())
    }

    fn qp(&self, id: u32) -> Result<&Qp, String> {
        get(&self.qps, id, "qp")?
            .as_ref()
            .ok_or_else(|| format!("qp {id} destroyed"))
    }

    fn slice(&self, s: &Sge) -> Result<MrSlice, String> {
        get(&self.mrs, s.mr, "mr")?.slice(s.off, s.len).map_err(e)
    }

    fn slices(&self, sges: &[Sge]) -> Result<Vec<MrSlice>, String> {
        sges.iter().map(|s| self.slice(s)).collect()
    }

    fn send_wr(&self, wr_id: u64, wr: &WrSpec) -> Result<SendWr, String> {
        Ok(match wr {
            WrSpec::Send { sges } => SendWr::send(wr_id, &self.slices(sges)?),
            WrSpec::SendImm { sges, imm } => SendWr::send_imm(wr_id, &self.slices(sges)?, *imm),
            WrSpec::SendInline { data } => SendWr::send_inline(wr_id, data),
            WrSpec::Write { sges, raddr, rkey } => {
                SendWr::write(wr_id, &self.slices(sges)?, *raddr, *rkey)
            }
            WrSpec::WriteImm {
                sges,
                raddr,
                rkey,
                imm,
            } => SendWr::write_imm(wr_id, &self.slices(sges)?, *raddr, *rkey, *imm),
            WrSpec::Read { sges, raddr, rkey } => {
                SendWr::read(wr_id, &self.slices(sges)?, *raddr, *rkey)
            }
            WrSpec::CompSwap {
                sge,
                raddr,
                rkey,
                compare,
                swap,
            } => SendWr::compare_swap(wr_id, &self.slice(sge)?, *raddr, *rkey, *compare, *swap),
            WrSpec::FetchAdd {
                sge,
                raddr,
                rkey,
                add,
            } => SendWr::fetch_add(wr_id, &self.slice(sge)?, *raddr, *rkey, *add),
        })
    }

    /// Execute one command.
    fn handle(&mut self, cmd: Cmd) -> Result<Value, String> {
        match cmd {
            Cmd::Open { addr, port } => {
                let mut cfg = DeviceConfig::new(addr);
                cfg.port = port;
                cfg.name = "urdma-peer".into();
                self.dev = Some(Device::open(cfg).map_err(e)?);
                Ok(Value::Null)
            }
            Cmd::AllocPd => {
                let pd = self.dev()?.alloc_pd().map_err(e)?;
                self.pds.push(pd);
                Ok(json!(self.pds.len() - 1))
            }
            Cmd::RegMr { pd, len, access } => {
                let mr = get(&self.pds, pd, "pd")?.reg_mr(len, access).map_err(e)?;
                let info = MrInfo {
                    id: self.mrs.len() as u32,
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                    len: mr.len(),
                };
                self.mrs.push(mr);
                Ok(json!(info))
            }
            Cmd::CreateCq { cqe } => {
                let cq = self.dev()?.create_cq(cqe).map_err(e)?;
                self.cqs.push(cq);
                Ok(json!(self.cqs.len() - 1))
            }
            Cmd::CreateQp { pd, cq, cap } => {
                let cq = get(&self.cqs, cq, "cq")?;
                let mut init = QpInitAttr::rc(cq, cq);
                if let Some(c) = cap {
                    init.cap = c;
                }
                let qp = get(&self.pds, pd, "pd")?.create_qp(&init).map_err(e)?;
                let info = QpInfo {
                    id: self.qps.len() as u32,
                    endpoint: qp.endpoint(),
                };
                self.qps.push(Some(qp));
                Ok(json!(info))
            }
            Cmd::Connect { qp, remote, opts } => {
                self.qp(qp)?
                    .connect(&remote, &opts.to_options())
                    .map_err(e)?;
                Ok(Value::Null)
            }
            Cmd::PostRecv { qp, wr_id, sges } => {
                let wr = RecvWr::new(wr_id, &self.slices(&sges)?);
                self.qp(qp)?.post_recv(wr).map_err(e)?;
                Ok(Value::Null)
            }
            Cmd::PostSend {
                qp,
                wr_id,
                wr,
                signaled,
            } => {
                let mut w = self.send_wr(wr_id, &wr)?;
                if !signaled {
                    w = w.unsignaled();
                }
                self.qp(qp)?.post_send(w).map_err(e)?;
                Ok(Value::Null)
            }
            Cmd::Fill {
                mr,
                off,
                len,
                seed,
                base,
            } => {
                let mr = get(&self.mrs, mr, "mr")?;
                let mut buf = vec![0u8; CHUNK.min(len)];
                let mut done = 0;
                while done < len {
                    let n = CHUNK.min(len - done);
                    pattern::fill(seed, base + done as u64, &mut buf[..n]);
                    mr.write_at(off + done, &buf[..n]).map_err(e)?;
                    done += n;
                }
                Ok(Value::Null)
            }
            Cmd::Check {
                mr,
                off,
                len,
                seed,
                base,
            } => {
                let mr = get(&self.mrs, mr, "mr")?;
                let mut buf = vec![0u8; CHUNK.min(len)];
                let mut done = 0;
                while done < len {
                    let n = CHUNK.min(len - done);
                    mr.read_at(off + done, &mut buf[..n]).map_err(e)?;
                    if let Some(i) = pattern::first_mismatch(seed, base + done as u64, &buf[..n]) {
                        return Ok(json!(done + i));
                    }
                    done += n;
                }
                Ok(Value::Null)
            }
            Cmd::Digest { mr, off, len } => {
                let mr = get(&self.mrs, mr, "mr")?;
                Ok(json!(crate::harness::mr_digest(mr, off, len)))
            }
            Cmd::Peek { mr, off, len } => {
                let mut buf = vec![0u8; len];
                get(&self.mrs, mr, "mr")?
                    .read_at(off, &mut buf)
                    .map_err(e)?;
                Ok(json!(buf))
            }
            Cmd::Poke { mr, off, data } => {
                get(&self.mrs, mr, "mr")?.write_at(off, &data).map_err(e)?;
                Ok(Value::Null)
            }
            Cmd::Poll {
                cq,
                max,
                timeout_ms,
            } => {
                let cq = get(&self.cqs, cq, "cq")?;
                let deadline = Instant::now() + Duration::from_millis(timeout_ms);
                let mut out = Polled {
                    wcs: Vec::new(),
                    overrun: false,
                };
                while out.wcs.len() < max {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match cq.wait(max - out.wcs.len(), Some(left)) {
                        Ok(v) => out.wcs.extend(v),
                        Err(Error::CqOverrun) => {
                            out.overrun = true;
                            break;
                        }
                        Err(Error::Timeout) => break,
                        Err(err) => return Err(e(err)),
                    }
                }
                Ok(json!(out))
            }
            Cmd::QueryQp { qp } => Ok(json!(self.qp(qp)?.query().map_err(e)?)),
            Cmd::Counters => Ok(json!(self.dev()?.counters())),
            Cmd::DestroyQp { qp } => {
                let slot = self
                    .qps
                    .get_mut(qp as usize)
                    .ok_or_else(|| format!("no qp {qp}"))?;
                *slot = None;
                Ok(Value::Null)
            }
            Cmd::Exit => Ok(Value::Null),
        }
    }
}

/// Run the agent until stdin closes or an `exit` command arrives.
pub fn run() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut st = State::default();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let cmd: Result<Cmd, String> =
            serde_json::from_str(&line).map_err(|err| format!("bad command: {err}"));
        let exit = matches!(cmd, Ok(Cmd::Exit));
        let reply = cmd.and_then(|c| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| st.handle(c)))
                .unwrap_or_else(|_| Err("peer panicked".to_string()))
        });
        let text = serde_json::to_string(&reply).unwrap_or_else(|err| {
            serde_json::to_string(&Err::<Value, String>(err.to_string())).unwrap_or_default()
        });
        if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() || exit {
            break;
        }
    }
}

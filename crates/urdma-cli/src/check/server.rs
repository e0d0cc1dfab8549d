//! The server of `urdma check`: serves one client at a time, sets up QPs
//! for the client's, checks what arrives and reports its tally.

use super::layout::{client_len, s_read, server_len, RECV_SLOTS};
use super::pattern::{pattern_vec, tag, Stream, SLOT};
use super::proto::Msg;
use super::qp::{backstop, connect_options, on_every_qp, open};
use super::report::{counters_line, Tally};
use super::server_qp::{post_recv_slot, Session};
use super::{CheckArgs, MAX_QPS};
use crate::bench::proto::Channel;
use anyhow::{anyhow, bail, Result};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;
use urdma::Mtu;

/// Serve clients on `l` (one at a time; `once` stops after the first).
pub(super) fn server(l: TcpListener, a: &CheckArgs) -> Result<()> {
    loop {
        let (ctrl, peer) = l.accept()?;
        eprintln!("urdma check: client {peer}");
        let r = serve_one(ctrl, a.peer.udp_port);
        match &r {
            Ok(t) => eprintln!(
                "urdma check: session with {peer}: {} operations, {} bytes verified, {} errors",
                t.ops, t.bytes, t.errors
            ),
            Err(e) => eprintln!("urdma check: session with {peer} failed: {e:#}"),
        }
        if a.once {
            return match r {
                Ok(t) if t.errors > 0 => bail!("{} mismatches", t.errors),
                r => r.map(|_| ()),
            };
        }
    }
}

/// How long the server waits for a connected client's Hello.
const HELLO_PATIENCE: Duration = Duration::from_secs(30);

fn serve_one(ctrl: TcpStream, udp_port: u16) -> Result<Tally> {
    let ip = ctrl.local_addr()?.ip();
    let closer = ctrl.try_clone()?;
    // The client opens its device (and may start its NIC agent) before
    // it says Hello; after it, reads tick every second.
    ctrl.set_read_timeout(Some(HELLO_PATIENCE))?;
    let mut ch = Channel::new(ctrl)?;
    let Msg::Hello {
        seed,
        mtu,
        timeout,
        retry_cnt,
        endpoints,
        buf,
    } = ch.recv_as::<Msg>()?
    else {
        bail!("expected Hello");
    };
    closer.set_read_timeout(Some(Duration::from_secs(1)))?;
    let qps = endpoints.len();
    let setup = (|| {
        let Some(m) = Mtu::from_bytes(mtu) else {
            bail!("bad MTU {mtu}");
        };
        if qps == 0 || qps > MAX_QPS {
            bail!("{qps} QPs asked for, 1..={MAX_QPS} allowed");
        }
        if (buf.len as usize) < client_len(qps) {
            bail!("the client's buffer is too small");
        }
        let (dev, mr, ends) = open("urdma1", ip, udp_port, qps, server_len(qps))?;
        for q in 0..qps {
            let area = tag(seed, q, u64::MAX >> 8, Stream::ReadArea);
            mr.write_at(s_read(q), &pattern_vec(area, 0, SLOT))?;
        }
        let opts = connect_options(m, timeout, retry_cnt);
        for (q, (e, ep)) in ends.iter().zip(&endpoints).enumerate() {
            e.qp.connect(ep, &opts)?;
            // Receives are posted before the client may send.
            for i in 0..RECV_SLOTS {
                post_recv_slot(&mr, e, q, i)?;
            }
        }
        Ok((dev, mr, ends))
    })();
    let (dev, mr, ends) = match setup {
        Ok(v) => v,
        Err(e) => {
            let _ = ch.send_as(&Msg::Refused {
                error: format!("{e:#}"),
            });
            return Err(e);
        }
    };
    ch.send_as(&Msg::Welcome {
        endpoints: ends.iter().map(|e| e.qp.endpoint()).collect(),
        buf: mr.remote(),
    })?;
    let limit = backstop(timeout, retry_cnt);
    let s = Session::new(&mr, seed, mtu, limit);
    let (results, finish) = on_every_qp(
        &ends,
        |q, e| s.run_qp(q, e),
        || (Tally::default(), Err(anyhow!("a server thread panicked"))),
        || {
            let finish = wait_finish(&mut ch, &s, limit);
            match &finish {
                Ok((rounds, aborted)) => {
                    s.aborted.store(*aborted, Ordering::Relaxed);
                    *s.targets.lock().unwrap_or_else(|e| e.into_inner()) = Some(rounds.clone());
                }
                Err(_) => s.aborted.store(true, Ordering::Relaxed),
            }
            finish
        },
    );
    eprintln!("urdma check: server device: {}", counters_line(&dev));
    let mut tally = Tally::default();
    let mut errors = Vec::new();
    for (t, r) in results {
        tally.add(t);
        if let Err(e) = r {
            errors.push(format!("{e:#}"));
        }
    }
    let (rounds, aborted) = match finish {
        Ok(v) => v,
        Err(e) => {
            let _ = closer.shutdown(Shutdown::Both);
            errors.push(format!("control connection: {e:#}"));
            return Err(anyhow!("{}", errors.join("; ")));
        }
    };
    if errors.is_empty() && !aborted {
        if rounds.len() != qps {
            errors.push("the client's Finish names the wrong number of QPs".into());
        } else {
            s.final_words(&rounds, &mut tally)?;
        }
    }
    let error = (!errors.is_empty()).then(|| errors.join("; "));
    let _ = ch.send_as(&Msg::Done {
        tally: tally.clone(),
        error: error.clone(),
    });
    match error {
        Some(e) if !aborted => Err(anyhow!(e)),
        _ => Ok(tally),
    }
}

/// The client's Finish: rounds per QP and whether it failed. A client
/// gone silent ends the wait by inactivity of every QP.
fn wait_finish(ch: &mut Channel, s: &Session<'_>, limit: Duration) -> Result<(Vec<u64>, bool)> {
    loop {
        match ch.recv_as::<Msg>() {
            Ok(Msg::Finish { rounds, aborted }) => return Ok((rounds, aborted)),
            Ok(m) => return Err(anyhow!("expected Finish, got {m:?}")),
            Err(e) => {
                let timed_out = e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                        matches!(
                            io.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        )
                    })
                });
                if timed_out && s.idle() < limit {
                    continue;
                }
                return Err(e);
            }
        }
    }
}

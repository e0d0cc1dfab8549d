//! The client of `urdma check`: connects its QPs to the server's, runs
//! the rounds of every QP, checks the shared counter and prints the
//! summary.

use super::client_qp::{Client, ClientQp, Stop};
use super::layout::{c_word, client_len, server_len, K_FINAL};
use super::proto::Msg;
use super::qp::{
    ack_timeout, backstop, complete, connect_options, on_every_qp, open, read_u64, End,
};
use super::report::{counters_line, finish, Tally};
use super::{CheckArgs, DEFAULT_ROUNDS};
use crate::bench::proto::Channel;
use crate::peer::path_mtu;
use anyhow::{anyhow, bail, Result};
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use urdma::rng::mix;
use urdma::SendWr;

/// The client: connect, run the workload, check, print the summary.
pub(super) fn client(ctrl: TcpStream, a: &CheckArgs) -> Result<()> {
    let mtu = path_mtu(a.mtu)?;
    let seed = a.seed.unwrap_or_else(rand_seed);
    let limit = backstop(a.timeout, a.retry_cnt);
    ctrl.set_read_timeout(Some(limit))?;
    let ip = ctrl.local_addr()?.ip();
    let server_ip = ctrl.peer_addr()?.ip();
    let mut ch = Channel::new(ctrl)?;
    let (dev, mr, ends) = open("urdma0", ip, a.peer.udp_port, a.qps, client_len(a.qps))?;
    ch.send_as(&Msg::Hello {
        seed,
        mtu: a.mtu,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        endpoints: ends
            .iter()
            .map(|e| e.qp.endpoint().with_mtu_at_most(mtu))
            .collect(),
        buf: mr.remote(),
    })?;
    let (endpoints, peer) = match ch.recv_as::<Msg>()? {
        Msg::Welcome { endpoints, buf } => (endpoints, buf),
        Msg::Refused { error } => bail!("the server refused: {error}"),
        m => bail!("expected Welcome, got {m:?}"),
    };
    if endpoints.len() != ends.len() || (peer.len as usize) < server_len(a.qps) {
        bail!("the server's QPs or buffer do not match the request");
    }
    let opts = connect_options(mtu, a.timeout, a.retry_cnt);
    for (e, ep) in ends.iter().zip(&endpoints) {
        e.qp.connect(ep, &opts)?;
    }
    let stop = match (a.seconds, a.iterations) {
        (Some(s), _) => Stop::At(Instant::now() + Duration::from_secs_f64(s.max(0.0))),
        (None, n) => Stop::Rounds(n.unwrap_or(DEFAULT_ROUNDS)),
    };
    eprintln!(
        "urdma check: {ip} -> {server_ip}, {} RC QPs, path MTU {}, timeout {} ({:.1} ms), \
         retry_cnt {}, seed {seed:#x}, {}: running",
        a.qps,
        a.mtu,
        a.timeout,
        ack_timeout(a.timeout).as_secs_f64() * 1e3,
        a.retry_cnt,
        match stop {
            Stop::Rounds(n) => format!("{n} rounds per QP"),
            Stop::At(_) => format!("{} s", a.seconds.unwrap_or(0.0)),
        }
    );
    let abort = AtomicBool::new(false);
    let c = Client {
        mr: &mr,
        peer,
        seed,
        mtu: a.mtu,
        stop,
        abort: &abort,
        limit,
        probe_after: ack_timeout(a.timeout).max(Duration::from_millis(10)),
    };
    let t0 = Instant::now();
    let (results, ()): (Vec<(ClientQp, Result<()>)>, ()) = on_every_qp(
        &ends,
        |q, e| c.run_qp(q, e),
        || {
            (
                ClientQp::default(),
                Err(anyhow!("a client thread panicked")),
            )
        },
        || (),
    );
    let elapsed = t0.elapsed();
    let mut tally = Tally::default();
    let mut rounds = Vec::new();
    let mut shared = Vec::new();
    let mut fatal = Vec::new();
    for (o, r) in results {
        rounds.push(o.rounds);
        tally.add(o.tally);
        shared.extend(o.shared);
        if let Err(e) = r {
            fatal.push(format!("{e:#}"));
        }
    }
    if fatal.is_empty() {
        check_shared(&c, &ends[0], &mut shared, &mut tally)?;
    }
    // The server's side of the story (bounded by the read timeout; after
    // a failure the peer may be gone, so do not insist).
    let aborted = !fatal.is_empty();
    let server = (|| -> Result<Tally> {
        ch.send_as(&Msg::Finish {
            rounds: rounds.clone(),
            aborted,
        })?;
        match ch.recv_as::<Msg>()? {
            Msg::Done { tally, error: None } => Ok(tally),
            Msg::Done {
                tally,
                error: Some(e),
            } => {
                fatal.push(format!("server: {e}"));
                Ok(tally)
            }
            m => bail!("expected Done, got {m:?}"),
        }
    })();
    match server {
        Ok(t) => tally.add(t),
        Err(e) if !aborted => fatal.push(format!("server: {e:#}")),
        Err(_) => {}
    }
    eprintln!(
        "urdma check: {} rounds in {:.1} s; client device: {}",
        rounds.iter().sum::<u64>(),
        elapsed.as_secs_f64(),
        counters_line(&dev)
    );
    finish(&tally, &fatal)
}

/// The shared counter: the fetched values of every QP must be exactly
/// 0..N-1, and the counter must now hold N.
fn check_shared(c: &Client<'_>, end: &End, shared: &mut [u64], t: &mut Tally) -> Result<()> {
    let n = shared.len() as u64;
    shared.sort_unstable();
    if let Some((i, v)) = shared.iter().enumerate().find(|&(i, &v)| v != i as u64) {
        t.mismatch(format!(
            "shared counter: the {n} FETCH_ADDs returned {v} where {i} was due \
             (a value lost or returned twice)"
        ));
    }
    let mut last = Instant::now();
    end.qp.post_send(SendWr::read(
        u64::MAX << 8 | K_FINAL,
        &[c.slice(c_word(0, 5), 8)?],
        c.peer.addr,
        c.peer.rkey,
    ))?;
    complete(
        end,
        0,
        u64::MAX >> 8,
        1 << K_FINAL,
        c.limit,
        &mut last,
        None,
    )?;
    t.ops += 1;
    t.expect_u64(
        read_u64(c.mr, c_word(0, 5))?,
        n,
        "shared counter: final value (number of FETCH_ADDs)",
    );
    Ok(())
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    mix(t ^ u64::from(std::process::id()) << 32)
}

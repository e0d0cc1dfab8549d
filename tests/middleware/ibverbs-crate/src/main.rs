//! A 64 KiB ping-pong over an RC QP built with the `ibverbs` crate's
//! default attributes (its ACK timeout code 4 among them), as a program
//! written against the crate would do it: the endpoints are exchanged
//! over TCP, the GID is the device's IPv4 one, every message is checked.
//!
//! `pingpong server PORT` / `pingpong client HOST PORT [ROUNDS]` (1000
//! unless given); the
//! client prints `pingpong: N rounds of 65536 bytes, H us half round
//! trip, B MB/s`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

const SIZE: usize = 64 * 1024;

fn fail(what: &str) -> ! {
    eprintln!("pingpong: {what}");
    std::process::exit(1)
}

/// The byte at `i` of the message of `round` sent by `side`.
fn pattern(side: u8, round: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(31) ^ (round as u8) ^ side.wrapping_mul(0x5a)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (server, stream) = match args.get(1).map(String::as_str) {
        Some("server") => {
            let port = args.get(2).unwrap_or_else(|| fail("server PORT"));
            let l = TcpListener::bind(("0.0.0.0", port.parse().unwrap_or_else(|_| fail("port"))))
                .unwrap_or_else(|e| fail(&format!("bind: {e}")));
            (
                true,
                l.accept()
                    .unwrap_or_else(|e| fail(&format!("accept: {e}")))
                    .0,
            )
        }
        Some("client") => {
            let (h, p) = match (args.get(2), args.get(3)) {
                (Some(h), Some(p)) => (h, p),
                _ => fail("client HOST PORT [ROUNDS]"),
            };
            (
                false,
                TcpStream::connect(format!("{h}:{p}"))
                    .unwrap_or_else(|e| fail(&format!("connect: {e}"))),
            )
        }
        _ => fail("usage: pingpong server PORT | client HOST PORT [ROUNDS]"),
    };
    let mut rounds: usize = args.get(4).and_then(|r| r.parse().ok()).unwrap_or(1000);

    let devices = ibverbs::devices().unwrap_or_else(|e| fail(&format!("devices: {e}")));
    let ctx = devices
        .iter()
        .next()
        .unwrap_or_else(|| fail("no RDMA device"))
        .open()
        .unwrap_or_else(|e| fail(&format!("open: {e}")));
    let gid_index = ctx
        .gid_table()
        .iter()
        .find(|g| g.gid.subnet_prefix() == 0 && g.gid.interface_id() >> 32 == 0xffff)
        .map(|g| g.gid_index)
        .unwrap_or_else(|| fail("no IPv4 GID"));
    let cq = ctx
        .create_cq(64, 0)
        .unwrap_or_else(|e| fail(&format!("create_cq: {e}")));
    let pd = ctx
        .alloc_pd()
        .unwrap_or_else(|e| fail(&format!("alloc_pd: {e}")));
    let prepared = pd
        .create_qp(&cq, &cq, ibverbs::ibv_qp_type::IBV_QPT_RC)
        .set_gid_index(gid_index)
        .build()
        .unwrap_or_else(|e| fail(&format!("create_qp: {e}")));

    // Exchange the endpoints: a line of JSON each way.
    let mine = serde_json::to_string(&prepared.endpoint()).expect("an endpoint serializes");
    let mut w = stream
        .try_clone()
        .unwrap_or_else(|e| fail(&format!("socket: {e}")));
    writeln!(w, "{mine}").unwrap_or_else(|e| fail(&format!("send endpoint: {e}")));
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .unwrap_or_else(|e| fail(&format!("read endpoint: {e}")));
    let theirs = serde_json::from_str(&line).unwrap_or_else(|e| fail(&format!("endpoint: {e}")));
    let mut qp = prepared
        .handshake(theirs)
        .unwrap_or_else(|e| fail(&format!("handshake: {e}")));

    let mut rx = pd
        .allocate::<u8>(SIZE)
        .unwrap_or_else(|e| fail(&format!("reg rx: {e}")));
    let mut tx = pd
        .allocate::<u8>(SIZE)
        .unwrap_or_else(|e| fail(&format!("reg tx: {e}")));
    // SAFETY: rx stays registered and untouched until its completion.
    unsafe { qp.post_receive(&mut rx, .., 0) }
        .unwrap_or_else(|e| fail(&format!("post_receive: {e}")));
    // Both ends are ready to receive before the first send; the client
    // says how many rounds.
    writeln!(w, "{rounds}").unwrap_or_else(|e| fail(&format!("sync: {e}")));
    line.clear();
    BufReader::new(&stream)
        .read_line(&mut line)
        .unwrap_or_else(|e| fail(&format!("sync: {e}")));
    if server {
        rounds = line
            .trim()
            .parse()
            .unwrap_or_else(|_| fail("the client's rounds"));
    }

    let (me, peer) = if server { (1u8, 0u8) } else { (0, 1) };
    let mut wcs = [ibverbs::ibv_wc::default(); 8];
    // Completions counted by kind: a receive may complete before the
    // send that came first (its ACK can follow the peer's reply).
    let mut done = [0usize; 2];
    let mut wait = |want: u64, count: usize| {
        while done[want as usize] < count {
            for wc in cq
                .poll(&mut wcs)
                .unwrap_or_else(|e| fail(&format!("poll: {e}")))
            {
                if let Some((status, _)) = wc.error() {
                    fail(&format!(
                        "work completion {} failed: {status:?}",
                        wc.wr_id()
                    ));
                }
                match done.get_mut(wc.wr_id() as usize) {
                    Some(n) => *n += 1,
                    None => fail("a completion nobody posted"),
                }
            }
        }
    };
    let start = Instant::now();
    for round in 0..rounds {
        if !server {
            tx.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = pattern(me, round, i));
            // SAFETY: tx is not written again until its send completes.
            unsafe { qp.post_send(&mut tx, .., 1) }
                .unwrap_or_else(|e| fail(&format!("post_send: {e}")));
            wait(1, round + 1);
        }
        wait(0, round + 1);
        if rx
            .iter()
            .enumerate()
            .any(|(i, b)| *b != pattern(peer, round, i))
        {
            fail(&format!("round {round}: the message differs"));
        }
        // SAFETY: as above.
        unsafe { qp.post_receive(&mut rx, .., 0) }
            .unwrap_or_else(|e| fail(&format!("post_receive: {e}")));
        if server {
            tx.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = pattern(me, round, i));
            // SAFETY: as above.
            unsafe { qp.post_send(&mut tx, .., 1) }
                .unwrap_or_else(|e| fail(&format!("post_send: {e}")));
            wait(1, round + 1);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if !server {
        println!(
            "pingpong: {rounds} rounds of {SIZE} bytes, {:.1} us half round trip, {:.1} MB/s",
            secs * 1e6 / rounds as f64 / 2.0,
            (2 * SIZE * rounds) as f64 / secs / 1e6
        );
    }
}

//! The passive side of `urdma bench`.

use super::proto::{Channel, Msg, TestKind};
use super::session::{reap_adaptive, reap_polling, wait_stamp, Params, Session};
use super::tcp;
use anyhow::{bail, Result};
use std::net::{TcpListener, TcpStream};
use urdma::{RecvWr, SendWr};

/// Serve benchmark clients on `listener` (one at a time; `once` stops after the first).
pub fn serve(listener: TcpListener, p: &Params, once: bool) -> Result<()> {
    loop {
        let (a, peer) = listener.accept()?;
        let (b, _) = listener.accept()?;
        eprintln!("urdma bench: client {peer}");
        let r =
            super::proto::sort_connections(a, b).and_then(|(ctrl, data)| serve_one(ctrl, data, p));
        if let Err(e) = &r {
            eprintln!("urdma bench: session with {peer} failed: {e:#}");
        }
        if once {
            return r;
        }
    }
}

fn serve_one(ctrl: TcpStream, mut data: TcpStream, p: &Params) -> Result<()> {
    let ip = ctrl.local_addr()?.ip();
    let mut ch = Channel::new(ctrl)?;
    let s = Session::connect(ip, p, &mut ch, false)?;
    loop {
        match ch.recv()? {
            Msg::Start { kind, size, iters } => {
                let r = run_test(&s, &mut ch, &mut data, kind, size, iters);
                let error = r.err().map(|e| format!("{e:#}"));
                ch.send(&Msg::Done { error })?;
            }
            Msg::Bye => return Ok(()),
            m => bail!("unexpected {m:?}"),
        }
    }
}

fn expect_finish(ch: &mut Channel) -> Result<()> {
    match ch.recv()? {
        Msg::Finish => Ok(()),
        m => bail!("expected Finish, got {m:?}"),
    }
}

fn run_test(
    s: &Session,
    ch: &mut Channel,
    data: &mut TcpStream,
    kind: TestKind,
    size: usize,
    iters: usize,
) -> Result<()> {
    let recv_slot = s.mr.slice(0, size)?;
    match kind {
        TestKind::WriteBw | TestKind::ReadBw | TestKind::ReadLat => {
            ch.send(&Msg::Ready)?;
        }
        TestKind::SendBw => {
            let window = iters.min(s.qp_recv_depth());
            for i in 0..window {
                s.qp.post_recv(RecvWr::new(i as u64, std::slice::from_ref(&recv_slot)))?;
            }
            ch.send(&Msg::Ready)?;
            let mut posted = window;
            let mut got = 0;
            while got < iters {
                let n = reap_adaptive(&s.rcq, 64)?.len();
                got += n;
                for _ in 0..n {
                    if posted < iters {
                        s.qp.post_recv(RecvWr::new(
                            posted as u64,
                            std::slice::from_ref(&recv_slot),
                        ))?;
                        posted += 1;
                    }
                }
            }
        }
        TestKind::SendLat => {
            s.qp.post_recv(RecvWr::new(0, std::slice::from_ref(&recv_slot)))?;
            ch.send(&Msg::Ready)?;
            let src = s.mr.slice(s.half, size)?;
            for i in 0..iters {
                reap_polling(&s.rcq)?;
                if i + 1 < iters {
                    s.qp.post_recv(RecvWr::new(i as u64 + 1, std::slice::from_ref(&recv_slot)))?;
                }
                s.qp.post_send(SendWr::send(i as u64, std::slice::from_ref(&src)))?;
                reap_polling(&s.scq)?;
            }
        }
        TestKind::WriteLat => {
            ch.send(&Msg::Ready)?;
            let src = s.mr.slice(s.half, size)?;
            let last = size.max(1) - 1;
            for i in 0..iters {
                let stamp = (i % 255 + 1) as u8;
                wait_stamp(&s.mr, last, stamp)?;
                s.write_stamped(&src, last, stamp, i as u64)?;
            }
        }
        TestKind::TcpBw => {
            ch.send(&Msg::Ready)?;
            tcp::sink(data, size * iters)?;
        }
        TestKind::TcpLat => {
            ch.send(&Msg::Ready)?;
            tcp::echo(data, size, iters)?;
        }
    }
    expect_finish(ch)
}

impl Session {
    fn qp_recv_depth(&self) -> usize {
        self.qp
            .query()
            .map(|a| a.cap.max_recv_wr as usize)
            .unwrap_or(1)
    }
}

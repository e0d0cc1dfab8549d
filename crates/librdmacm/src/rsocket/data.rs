//! The data path: completions, credits and buffer grants, sending into
//! the peer's granted buffer, reading what the peer wrote, shutdown.

use super::conn::{Conn, CTRL_SIZE, RECV_FLAG};
use super::verbs::{self, Seg};
use super::wire::{self, ctrl, msg, op, Msg, Sge, SGE_LEN};
use super::{lock, st, Guard, Rs, Shared};
use crate::sys::*;
use std::time::{Duration, Instant};

/// The low-water mark of free send buffer before sending.
const SNDLOWAT: u32 = 2048;
/// The first transfer size (doubled up to [`MAX_TRANSFER`]).
const OLAP_START: u32 = 2048;
/// The largest single transfer.
const MAX_TRANSFER: u32 = 65536;
/// How long to poll the CQ before sleeping on its channel.
const SPIN: Duration = Duration::from_micros(20);

/// Whether data may be sent now.
pub fn can_send(c: &Conn) -> bool {
    c.sqe_avail > 0
        && c.sbuf_avail >= SNDLOWAT
        && c.sseq_no != c.sseq_comp
        && c.tbuf.sge(c.target_sge, false).length != 0
}

fn ctrl_avail(c: &Conn) -> bool {
    c.ctrl_seqno != c.ctrl_max
}

/// The wait is over for a sender: it may send, or never will.
pub fn test_send(rs: &Rs) -> bool {
    rs.state & st::WRITABLE == 0 || rs.c.as_ref().is_some_and(can_send)
}

/// The wait is over for a reader: data, or no more will come.
pub fn test_recv(rs: &Rs) -> bool {
    rs.state & st::READABLE == 0 || rs.c.as_ref().is_some_and(|c| !c.rmsg.is_empty())
}

fn test_ctrl(rs: &Rs) -> bool {
    rs.state & st::CONNECTED == 0 || rs.c.as_ref().is_some_and(ctrl_avail)
}

fn test_sends_done(rs: &Rs) -> bool {
    rs.state & st::CONNECTED == 0
        || rs.c.as_ref().is_none_or(|c| {
            i64::from(c.ctrl_max) - i64::from(c.ctrl_seqno) + i64::from(c.sqe_avail)
                == i64::from(c.p.sq_size)
        })
}

fn protocol_error(state: &mut u32, err: &mut i32, why: &str) {
    tracing::warn!(
        why,
        "rsocket: the peer broke the protocol; connection failed"
    );
    *state = st::ERROR;
    *err = libc::EPROTO;
}

/// Handle the completions waiting, grant credits, repost receives.
pub fn progress(rs: &mut Rs) -> Result<(), i32> {
    let Rs { state, err, c, .. } = rs;
    let Some(c) = c.as_mut() else {
        return Ok(());
    };
    update_credits(*state, c);
    let mut wcs = [ibv_wc::default(); 16];
    let mut rcnt = 0;
    loop {
        let n = c.cq.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            if wc.wr_id & RECV_FLAG != 0 {
                if wc.status != IBV_WC_SUCCESS {
                    continue;
                }
                rcnt += 1;
                on_recv(state, err, c, wc);
            } else {
                on_send(state, err, c, wc);
            }
        }
        if n < wcs.len() {
            break;
        }
    }
    if *state & st::CONNECTED != 0 {
        for _ in 0..rcnt {
            if let Err(e) = verbs::post_recv(c.qp, RECV_FLAG) {
                *state = st::ERROR;
                *err = e;
                break;
            }
        }
    }
    update_credits(*state, c);
    Ok(())
}

fn on_recv(state: &mut u32, err: &mut i32, c: &mut Conn, wc: &ibv_wc) {
    if wc.wc_flags & IBV_WC_WITH_IMM == 0 {
        return protocol_error(state, err, "a message without immediate data");
    }
    // SAFETY: imm_data is the member a WITH_IMM completion fills.
    let imm = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
    match wire::decode(imm) {
        Msg::Sgl(limit) => c.sseq_comp = limit,
        Msg::IomapSgl(_) | Msg::Write(_) => {}
        Msg::Ctrl(ctrl::DISCONNECT) => *state = st::DISCONNECTED,
        Msg::Ctrl(ctrl::SHUTDOWN) => match *state & st::WRITABLE != 0 {
            true => *state &= !st::READABLE,
            false => *state = st::DISCONNECTED,
        },
        Msg::Ctrl(_) => {}
        Msg::Data(n) => {
            let granted = c.p.rbuf_size - c.ravail;
            if u64::from(c.rqueued) + u64::from(n) > u64::from(granted) {
                return protocol_error(state, err, "data beyond the buffer granted");
            }
            c.rqueued += n;
            c.rmsg.push_back(n);
        }
        Msg::Reserved(_) => protocol_error(state, err, "a reserved message type"),
    }
}

fn on_send(state: &mut u32, err: &mut i32, c: &mut Conn, wc: &ibv_wc) {
    let m = wc.wr_id as u32;
    match m >> 29 {
        op::SGL => c.ctrl_max = c.ctrl_max.wrapping_add(1),
        op::CTRL => {
            c.ctrl_max = c.ctrl_max.wrapping_add(1);
            if m & 0x1FFF_FFFF == ctrl::DISCONNECT {
                *state = st::DISCONNECTED;
            }
        }
        _ => {
            c.sqe_avail = (c.sqe_avail + 1).min(c.p.sq_size);
            c.sbuf_avail = (c.sbuf_avail + (m & 0x1FFF_FFFF)).min(c.p.sbuf_size);
        }
    }
    if wc.status != IBV_WC_SUCCESS && *state & st::CONNECTED != 0 {
        tracing::debug!(
            status = wc.status,
            "rsocket: a send failed; connection failed"
        );
        *state = st::ERROR;
        *err = libc::ECONNRESET;
    }
}

fn update_credits(state: u32, c: &mut Conn) {
    let half = c.p.rbuf_size >> 1;
    let due = c.ravail >= half || (c.rseq_no.wrapping_sub(c.rseq_comp) as i16) >= 0;
    if !due || !ctrl_avail(c) || state & st::CONNECTED == 0 {
        return;
    }
    c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
    c.rseq_comp = c.rseq_no.wrapping_add((c.p.rq_size >> 1) as u16);
    let imm = msg(op::SGL, u32::from(c.rseq_no) + c.p.rq_size);
    let r = if c.ravail >= half {
        let grant = Sge {
            addr: c.rbuf.addr() + u64::from(c.rfree),
            key: c.rmr.rkey(),
            length: half,
        };
        let bytes = grant.to_bytes(c.swap);
        let remote = (
            c.remote_sgl.addr + u64::from(c.remote_sge) * SGE_LEN as u64,
            c.remote_sgl.key,
        );
        let r = match c.p.sq_inline as usize >= SGE_LEN {
            true => {
                let s = Seg {
                    addr: bytes.as_ptr() as u64,
                    len: SGE_LEN as u32,
                    lkey: 0,
                };
                verbs::post_write(c.qp, u64::from(imm), &[s], Some(imm), true, remote)
            }
            false => {
                let slot = c.p.sbuf_size as usize + SGE_LEN * (c.ctrl_seqno % CTRL_SIZE) as usize;
                // SAFETY: bytes is SGE_LEN readable bytes.
                unsafe { c.sbuf.copy_in(slot, bytes.as_ptr(), SGE_LEN) }.and_then(|()| {
                    let s = Seg {
                        addr: c.sbuf.addr() + slot as u64,
                        len: SGE_LEN as u32,
                        lkey: c.smr.lkey(),
                    };
                    verbs::post_write(c.qp, u64::from(imm), &[s], Some(imm), false, remote)
                })
            }
        };
        c.ravail -= half;
        c.rfree += half;
        if c.rfree >= c.p.rbuf_size {
            c.rfree = 0;
        }
        c.remote_sge = (c.remote_sge + 1) % c.remote_sgl.length.max(1);
        r
    } else {
        verbs::post_write(c.qp, u64::from(imm), &[], Some(imm), false, (0, 0))
    };
    if let Err(e) = r {
        tracing::debug!(errno = e, "rsocket: a credit update not posted");
    }
}

/// Process completions until `test` holds (or, non-blocking, `EAGAIN`),
/// sleeping on the completion channel without the rsocket's lock.
pub fn wait_for<'a>(
    s: &'a Shared,
    mut g: Guard<'a>,
    nonblock: bool,
    test: fn(&Rs) -> bool,
    deadline: Option<Instant>,
) -> (Guard<'a>, Result<(), i32>) {
    let start = Instant::now();
    loop {
        let r = progress(&mut g);
        if test(&g) {
            return (g, Ok(()));
        }
        if let Err(e) = r {
            return (g, Err(e));
        }
        if nonblock {
            return (g, Err(libc::EAGAIN));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return (g, Err(libc::ETIMEDOUT));
        }
        if start.elapsed() < SPIN {
            continue;
        }
        let Some(c) = g.c.as_mut() else {
            return (g, Err(libc::ENOTCONN));
        };
        if !c.armed {
            c.cq.arm();
            c.armed = true;
            continue;
        }
        let fd = c.cq.fd();
        drop(g);
        verbs::wait_fd(fd, 100);
        g = lock(s);
        if let Some(c) = g.c.as_mut() {
            if c.cq.take_event() {
                c.armed = false;
            }
        }
    }
}

/// Finish a non-blocking connect first (`EAGAIN` while under way).
fn ready(rs: &mut Rs) -> Result<(), i32> {
    if rs.state & st::OPENING != 0 {
        return super::conn::finish_connect(rs).map_err(|e| match e {
            libc::EINPROGRESS => libc::EAGAIN,
            e => e,
        });
    }
    match rs.c.is_some() {
        true => Ok(()),
        false => Err(libc::ENOTCONN),
    }
}

/// `rsend`/`rsendv`: copy `segs` (the program's buffers) to the peer.
pub fn send(s: &Shared, segs: &[(*const u8, usize)], flags: i32) -> Result<usize, i32> {
    let mut g = lock(s);
    ready(&mut g)?;
    let nonblock = g.nonblock(flags);
    let total: usize = segs.iter().map(|x| x.1).sum();
    let (mut sent, mut olen) = (0usize, OLAP_START);
    let (mut seg, mut seg_off) = (0usize, 0usize);
    let mut fail = None;
    while sent < total {
        if g.state & st::WRITABLE == 0 {
            fail = Some(if g.state & st::ERROR != 0 {
                g.err
            } else {
                libc::EPIPE
            });
            break;
        }
        if !g.c.as_ref().is_some_and(can_send) {
            let (ng, r) = wait_for(s, g, nonblock, test_send, None);
            g = ng;
            if let Err(e) = r {
                fail = Some(e);
                break;
            }
            continue;
        }
        let Some(c) = g.c.as_mut() else {
            fail = Some(libc::ENOTCONN);
            break;
        };
        let left = total - sent;
        let mut xfer = match (olen as usize) < left {
            true => {
                let x = olen;
                olen = (olen << 1).min(MAX_TRANSFER);
                x
            }
            false => left as u32,
        };
        let target = c.tbuf.sge(c.target_sge, false);
        xfer = xfer.min(c.sbuf_avail).min(target.length);
        // Gather xfer bytes from the program's buffers into the ring.
        let mut parts: Vec<Seg> = Vec::with_capacity(2);
        let inline = xfer <= c.p.sq_inline && segs[seg].1 - seg_off >= xfer as usize;
        if inline {
            let p = segs[seg].0 as u64 + seg_off as u64;
            parts.push(Seg {
                addr: p,
                len: xfer,
                lkey: 0,
            });
        } else {
            let mut need = xfer as usize;
            let start = c.shead as usize;
            while need > 0 {
                let (p, l) = segs[seg];
                let n = need.min(l - seg_off);
                let room = c.p.sbuf_size as usize - c.shead as usize;
                let first = n.min(room);
                // SAFETY: the program's buffer holds l bytes from p
                // (rsend's contract); the ring ranges are checked.
                unsafe {
                    c.sbuf.copy_in(c.shead as usize, p.add(seg_off), first)?;
                    c.sbuf.copy_in(0, p.add(seg_off + first), n - first)?;
                }
                c.shead = ((c.shead as usize + n) % c.p.sbuf_size as usize) as u32;
                need -= n;
                seg_off += n;
                if seg_off == l {
                    seg += 1;
                    seg_off = 0;
                }
            }
            let end = start + xfer as usize;
            let size = c.p.sbuf_size as usize;
            let first = (end.min(size) - start) as u32;
            parts.push(Seg {
                addr: c.sbuf.addr() + start as u64,
                len: first,
                lkey: c.smr.lkey(),
            });
            if first < xfer {
                parts.push(Seg {
                    addr: c.sbuf.addr(),
                    len: xfer - first,
                    lkey: c.smr.lkey(),
                });
            }
        }
        let r = write_data(c, &parts, xfer, target, inline);
        if inline {
            seg_off += xfer as usize;
            while seg < segs.len() && seg_off == segs[seg].1 {
                seg += 1;
                seg_off = 0;
            }
        }
        if let Err(e) = r {
            fail = Some(e);
            break;
        }
        sent += xfer as usize;
    }
    match (sent, fail) {
        (0, Some(e)) if total > 0 => Err(e),
        _ => Ok(sent),
    }
}

fn write_data(
    c: &mut Conn,
    parts: &[Seg],
    xfer: u32,
    target: Sge,
    inline: bool,
) -> Result<(), i32> {
    c.sseq_no = c.sseq_no.wrapping_add(1);
    c.sqe_avail -= 1;
    c.sbuf_avail -= xfer;
    let next = Sge {
        addr: target.addr + u64::from(xfer),
        length: target.length - xfer,
        ..target
    };
    c.tbuf.set_sge(c.target_sge, next, false);
    if next.length == 0 {
        c.target_sge = (c.target_sge + 1) % wire::SGL_SIZE as usize;
    }
    let imm = msg(op::DATA, xfer);
    verbs::post_write(
        c.qp,
        u64::from(imm),
        parts,
        Some(imm),
        inline,
        (target.addr, target.key),
    )
}

/// `rrecv`: copy what the peer wrote into `buf` (`MSG_PEEK`,
/// `MSG_WAITALL`, `MSG_DONTWAIT`); 0 at the end of the stream.
pub fn recv(s: &Shared, buf: *mut u8, len: usize, flags: i32) -> Result<usize, i32> {
    let mut g = lock(s);
    ready(&mut g)?;
    let nonblock = g.nonblock(flags);
    let mut got = 0usize;
    let mut fail = None;
    loop {
        if g.c.as_ref().is_none_or(|c| c.rmsg.is_empty()) {
            let (ng, r) = wait_for(s, g, nonblock, test_recv, None);
            g = ng;
            if let Err(e) = r {
                fail = Some(e);
                break;
            }
        }
        let Some(c) = g.c.as_mut() else {
            break;
        };
        // SAFETY: buf is len writable bytes (rrecv's contract).
        got += unsafe { copy_out(c, buf.add(got), len - got, flags & libc::MSG_PEEK != 0)? };
        if flags & libc::MSG_PEEK != 0
            || got == len
            || flags & libc::MSG_WAITALL == 0
            || g.state & st::READABLE == 0
        {
            break;
        }
    }
    let state = g.state;
    if let Some(c) = g.c.as_mut() {
        update_credits(state, c);
    }
    match (got, fail) {
        (0, Some(e)) if len > 0 => Err(e),
        (0, _) if state & st::ERROR != 0 && len > 0 => Err(g.err),
        _ => Ok(got),
    }
}

/// Copy queued data out (keep it with `peek`).
///
/// # Safety
/// `dst` is `len` writable bytes.
unsafe fn copy_out(c: &mut Conn, dst: *mut u8, len: usize, peek: bool) -> Result<usize, i32> {
    let size = c.p.rbuf_size as usize;
    let (mut off, mut done, mut idx) = (c.roff as usize, 0usize, 0usize);
    while done < len && idx < c.rmsg.len() {
        let m = c.rmsg[idx] as usize;
        let n = m.min(len - done);
        let first = n.min(size - off);
        // SAFETY: dst has len - done bytes left (the caller's contract).
        unsafe {
            c.rbuf.copy_out(off, dst.add(done), first)?;
            c.rbuf.copy_out(0, dst.add(done + first), n - first)?;
        }
        off = (off + n) % size;
        done += n;
        if peek {
            idx += 1;
            continue;
        }
        c.ravail += n as u32;
        c.rqueued -= n as u32;
        match n == m {
            true => {
                c.rmsg.pop_front();
                c.rseq_no = c.rseq_no.wrapping_add(1);
            }
            false => c.rmsg[0] -= n as u32,
        }
    }
    if !peek {
        c.roff = off as u32;
    }
    Ok(done)
}

/// `rshutdown`: tell the peer (SHUTDOWN, or DISCONNECT once neither
/// direction is open) and wait, boundedly, for the sends to complete.
pub fn shutdown(s: &Shared, how: i32) -> Result<(), i32> {
    let mut g = lock(s);
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return Err(libc::EINVAL);
    }
    if g.state & st::CONNECTED == 0 {
        return match g.state {
            st::DISCONNECTED | st::ERROR => Ok(()),
            _ => Err(libc::ENOTCONN),
        };
    }
    let deadline = Some(Instant::now() + Duration::from_secs(5));
    let code = match how {
        libc::SHUT_RDWR => {
            g.state &= !(st::READABLE | st::WRITABLE);
            ctrl::DISCONNECT
        }
        libc::SHUT_WR => {
            g.state &= !st::WRITABLE;
            match g.state & st::READABLE != 0 {
                true => ctrl::SHUTDOWN,
                false => ctrl::DISCONNECT,
            }
        }
        _ => {
            g.state &= !st::READABLE;
            if g.state & st::WRITABLE != 0 {
                return Ok(());
            }
            ctrl::DISCONNECT
        }
    };
    let (ng, r) = wait_for(s, g, false, test_ctrl, deadline);
    g = ng;
    r?;
    if g.state & st::CONNECTED != 0 {
        if let Some(c) = g.c.as_mut() {
            c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
            let imm = msg(op::CTRL, code);
            verbs::post_write(c.qp, u64::from(imm), &[], Some(imm), false, (0, 0))?;
        }
        let (ng, r) = wait_for(s, g, false, test_sends_done, deadline);
        g = ng;
        r?;
    }
    drop(g);
    Ok(())
}

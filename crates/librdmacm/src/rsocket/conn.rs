//! Making connections: the QP, CQ and buffers of a connected rsocket,
//! the private data exchanged in the REQ and REP, connect (blocking or
//! not) and accept, and the teardown.

use super::mem::{Mr, Region};
use super::verbs::{self, Cq};
use super::wire::{self, ConnData, Sge, CONN_DATA_LEN, IOMAP_LEN, SGE_LEN, SGL_SIZE};
use super::{lock, set_fd_nonblock, st, Params, Rs, Shared};
use crate::sys::*;
use std::collections::VecDeque;

/// Control messages in flight at most (credits, shutdown).
pub const CTRL_SIZE: u32 = 4;
/// The queue sizes allowed.
const QP_MIN: u32 = 16;
const QP_MAX: u32 = 0xFFFE;
/// The receive work request ID flag.
pub const RECV_FLAG: u64 = 1 << 63;

/// A connected rsocket's resources and flow-control state. Fields drop in
/// order: the MRs before their regions, the CQ last (the QP, which uses
/// it, is destroyed before this is dropped).
pub struct Conn {
    /// The QP (owned by the ID: `rdma_destroy_qp`).
    pub qp: *mut ibv_qp,
    /// The send buffer's MR.
    pub smr: Mr,
    /// The target SGL's (and iomap's) MR.
    pub tmr: Mr,
    /// The receive buffer's MR.
    pub rmr: Mr,
    /// The send buffer, then [`CTRL_SIZE`] slots for credit entries.
    pub sbuf: Region,
    /// The target SGL the peer writes its buffer grants into.
    pub tbuf: Region,
    /// The receive buffer the peer writes data into.
    pub rbuf: Region,
    /// The CQ of both queues.
    pub cq: Cq,
    /// Sizes in effect.
    pub p: Params,
    /// Send queue entries free for data.
    pub sqe_avail: u32,
    /// Send buffer bytes free.
    pub sbuf_avail: u32,
    /// Where the next copy into the send buffer goes.
    pub shead: u32,
    /// Data messages sent.
    pub sseq_no: u16,
    /// The peer's credit limit (send while `sseq_no != sseq_comp`).
    pub sseq_comp: u16,
    /// Data messages consumed.
    pub rseq_no: u16,
    /// When to grant credits again.
    pub rseq_comp: u16,
    /// Control messages sent.
    pub ctrl_seqno: u32,
    /// Control messages that may have been sent (completions return
    /// slots).
    pub ctrl_max: u32,
    /// The peer's target SGL.
    pub remote_sgl: Sge,
    /// The next entry of it to write.
    pub remote_sge: u32,
    /// The peer's iomap area.
    pub remote_iomap: Sge,
    /// The peer's byte order differs (swap what is written into it).
    pub swap: bool,
    /// The target SGL entry being sent into.
    pub target_sge: usize,
    /// Receive buffer bytes free and not granted.
    pub ravail: u32,
    /// The receive buffer half to grant next.
    pub rfree: u32,
    /// Where the next data to read is.
    pub roff: u32,
    /// Lengths of the data messages not yet read.
    pub rmsg: VecDeque<u32>,
    /// Bytes of them.
    pub rqueued: u32,
    /// The CQ is armed.
    pub armed: bool,
}

// SAFETY: urdma's verbs handles, used from any thread; behind the
// rsocket's mutex.
unsafe impl Send for Conn {}

/// Make the CQ, QP and buffers of `rs`'s ID, and post its receives.
pub fn create_ep(rs: &mut Rs) -> Result<(), i32> {
    let id = rs.id;
    // SAFETY: the rsocket's live ID.
    let ctx = unsafe { (*id).verbs };
    if ctx.is_null() {
        return Err(libc::EINVAL);
    }
    let mut p = rs.p;
    p.sq_size = p.sq_size.clamp(QP_MIN, QP_MAX);
    p.rq_size = p.rq_size.clamp(QP_MIN, QP_MAX);
    p.sbuf_size = p.sbuf_size.max(4096);
    p.rbuf_size = p.rbuf_size.max(4096) & !1;
    let cq = Cq::new(ctx, (p.sq_size + p.rq_size) as i32)?;
    // SAFETY: ibv_qp_init_attr is plain C data; zero is valid.
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.send_cq = cq.cq;
    a.recv_cq = cq.cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = p.sq_size;
    a.cap.max_recv_wr = p.rq_size;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = p.sq_inline;
    // SAFETY: the live ID; a lives through the call.
    if unsafe { crate::rdma_create_qp(id, std::ptr::null_mut(), &mut a) } != 0 {
        return Err(crate::errno());
    }
    p.sq_inline = a.cap.max_inline_data;
    // SAFETY: the QP and PD were just set on the live ID.
    let (qp, pd) = unsafe { ((*id).qp, (*id).pd) };
    let made = buffers(qp, pd, cq, p);
    match made {
        Ok(c) => {
            rs.c = Some(c);
            Ok(())
        }
        Err(e) => {
            // SAFETY: the QP just made; destroyed before its CQ drops.
            unsafe { crate::rdma_destroy_qp(id) };
            Err(e)
        }
    }
}

fn buffers(qp: *mut ibv_qp, pd: *mut ibv_pd, cq: Cq, p: Params) -> Result<Conn, i32> {
    let local = IBV_ACCESS_LOCAL_WRITE;
    let remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    let sbuf = Region::new((p.sbuf_size + CTRL_SIZE * SGE_LEN as u32) as usize)?;
    let tlen = SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * p.iomap_size as usize;
    let tbuf = Region::new(tlen)?;
    let rbuf = Region::new(p.rbuf_size as usize)?;
    let c = Conn {
        qp,
        smr: Mr::new(pd, &sbuf, local)?,
        tmr: Mr::new(pd, &tbuf, remote)?,
        rmr: Mr::new(pd, &rbuf, remote)?,
        sbuf,
        tbuf,
        rbuf,
        cq,
        p,
        sqe_avail: p.sq_size - CTRL_SIZE,
        sbuf_avail: p.sbuf_size,
        shead: 0,
        sseq_no: 0,
        sseq_comp: 0,
        rseq_no: 0,
        rseq_comp: (p.rq_size >> 1) as u16,
        ctrl_seqno: 0,
        ctrl_max: CTRL_SIZE,
        remote_sgl: Sge::default(),
        remote_sge: 1,
        remote_iomap: Sge::default(),
        swap: false,
        target_sge: 0,
        ravail: p.rbuf_size >> 1,
        rfree: p.rbuf_size >> 1,
        roff: 0,
        rmsg: VecDeque::with_capacity(p.rq_size as usize + 1),
        rqueued: 0,
        armed: true,
    };
    for _ in 0..p.rq_size {
        verbs::post_recv(qp, RECV_FLAG)?;
    }
    Ok(c)
}

/// This side's connection data.
pub fn conn_data(c: &Conn) -> [u8; CONN_DATA_LEN] {
    let net = cfg!(target_endian = "big");
    ConnData {
        flags: wire::FLAG_IOMAP | if net { wire::FLAG_NET } else { 0 },
        credits: c.p.rq_size as u16,
        iomap_size: wire::value_to_scale(c.p.iomap_size, 8) as u8,
        target_sgl: Sge {
            addr: c.tbuf.addr(),
            key: c.tmr.rkey(),
            length: SGL_SIZE,
        },
        data_buf: Sge {
            addr: c.rbuf.addr(),
            key: c.rmr.rkey(),
            length: c.p.rbuf_size >> 1,
        },
    }
    .encode()
}

/// Take in the peer's connection data.
pub fn save_peer(c: &mut Conn, raw: &[u8]) -> Result<(), i32> {
    let d = ConnData::decode(raw).map_err(|e| {
        tracing::warn!(?e, "rsocket: the peer's connection data refused");
        libc::EPROTO
    })?;
    c.remote_sgl = d.target_sgl;
    c.remote_sge = 1;
    c.swap = (d.flags & wire::FLAG_NET != 0) != cfg!(target_endian = "big");
    if d.flags & wire::FLAG_IOMAP != 0 {
        c.remote_iomap = Sge {
            addr: d.target_sgl.addr + SGE_LEN as u64 * u64::from(d.target_sgl.length),
            key: d.target_sgl.key,
            length: wire::scale_to_value(u32::from(d.iomap_size), 8),
        };
    }
    c.tbuf.set_sge(0, d.data_buf, false);
    c.sseq_comp = d.credits;
    Ok(())
}

/// The private data of the ID's current event.
fn event_data(id: *mut rdma_cm_id) -> Vec<u8> {
    // SAFETY: the live ID; its event is null or live until acknowledged,
    // its private data private_data_len readable bytes.
    unsafe {
        let ev = (*id).event;
        if ev.is_null() {
            return Vec::new();
        }
        let c = (*ev).param.conn;
        if c.private_data.is_null() {
            return Vec::new();
        }
        std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len as usize)
            .to_vec()
    }
}

/// `rconnect`: start the connection ([`start_connect`]); a blocking
/// rsocket then waits, unlocked, for the REP (or the failure).
pub fn connect(s: &Shared, dst: *const libc::sockaddr) -> Result<(), i32> {
    let mut g = lock(s);
    let nonblock = g.fs_flags & libc::O_NONBLOCK != 0;
    match start_connect(&mut g, dst) {
        Err(libc::EINPROGRESS) if !nonblock => {}
        r => return r,
    }
    loop {
        let fd = g.fd;
        drop(g);
        verbs::wait_fd(fd, 100);
        g = lock(s);
        match finish_connect(&mut g) {
            Err(libc::EINPROGRESS) => continue,
            Err(_) if g.state == st::CONNECT_ERROR && g.err != 0 => return Err(g.err),
            r => return r,
        }
    }
}

/// Resolve, make the connection's resources and send the REQ; the REP
/// is awaited in [`finish_connect`] (`EINPROGRESS` meanwhile).
fn start_connect(rs: &mut Rs, dst: *const libc::sockaddr) -> Result<(), i32> {
    match rs.state {
        st::INIT | st::BOUND => {}
        s if s & st::OPENING != 0 => return Err(libc::EALREADY),
        s if s & st::CONNECTED != 0 => return Err(libc::EISCONN),
        _ => return Err(libc::EINVAL),
    }
    let id = rs.id;
    // Resolving is local and immediate: wait for it either way.
    set_fd_nonblock(rs.fd, false);
    // SAFETY: the live ID; dst was checked readable by the caller.
    let resolved = unsafe {
        crate::rdma_resolve_addr(id, std::ptr::null_mut(), dst as *mut _, 2000) == 0
            && crate::rdma_resolve_route(id, 2000) == 0
    };
    let nonblock = rs.fs_flags & libc::O_NONBLOCK != 0;
    if !resolved {
        set_fd_nonblock(rs.fd, nonblock);
        return fail(rs, crate::errno());
    }
    if let Err(e) = create_ep(rs) {
        set_fd_nonblock(rs.fd, nonblock);
        return fail(rs, e);
    }
    let data = rs.c.as_ref().map(conn_data).unwrap_or([0; CONN_DATA_LEN]);
    let mut param = rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: CONN_DATA_LEN as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    // Sent without waiting: a blocking rsocket waits unlocked.
    set_fd_nonblock(rs.fd, true);
    // SAFETY: the live ID with its QP; param and data live through it.
    let r = unsafe { crate::rdma_connect(id, &mut param) };
    let e = crate::errno();
    set_fd_nonblock(rs.fd, nonblock);
    match r {
        0 => established(rs),
        _ => match e {
            libc::EAGAIN => {
                rs.state = st::CONNECTING;
                Err(libc::EINPROGRESS)
            }
            e => fail(rs, e),
        },
    }
}

fn fail(rs: &mut Rs, e: i32) -> Result<(), i32> {
    rs.state = st::CONNECT_ERROR;
    rs.err = e;
    Err(e)
}

/// The REP came: take the peer's connection data.
fn established(rs: &mut Rs) -> Result<(), i32> {
    let raw = event_data(rs.id);
    let Some(c) = rs.c.as_mut() else {
        return fail(rs, libc::EINVAL);
    };
    match save_peer(c, &raw) {
        Ok(()) => {
            rs.state = st::RDWR;
            Ok(())
        }
        Err(e) => fail(rs, e),
    }
}

/// Drive a non-blocking connect: `EINPROGRESS` while the REP is awaited.
pub fn finish_connect(rs: &mut Rs) -> Result<(), i32> {
    if rs.state != st::CONNECTING {
        return match rs.state {
            s if s & st::CONNECTED != 0 => Ok(()),
            st::CONNECT_ERROR | st::DISCONNECTED | st::ERROR => Err(libc::ENOTCONN),
            _ => Err(libc::EINVAL),
        };
    }
    let nonblock = rs.fs_flags & libc::O_NONBLOCK != 0;
    if !nonblock {
        set_fd_nonblock(rs.fd, true);
    }
    let r = crate::id::complete(rs.id);
    if !nonblock {
        set_fd_nonblock(rs.fd, false);
    }
    match r {
        Ok(()) => established(rs),
        Err(libc::EAGAIN) => Err(libc::EINPROGRESS),
        Err(e) => fail(rs, e),
    }
}

/// `raccept`: the next connection request of the listener, answered with
/// this side's connection data; waits for the RTU.
pub fn accept(ls: &Shared) -> Result<i32, i32> {
    let (lid, p, o, fs, fdf) = {
        let l = lock(ls);
        if l.state != st::LISTENING {
            return Err(libc::EINVAL);
        }
        (l.id, l.p, l.o, l.fs_flags, l.fd_flags)
    };
    let child = crate::ep::get_request(lid)?;
    let raw = event_data(child);
    // SAFETY: the new, live ID; its channel is its own.
    let chan = unsafe { (*(*child).channel).fd };
    let fd = fresh_number(chan);
    if fd < 0 {
        let e = crate::errno();
        // SAFETY: the live ID of the request, refused and freed.
        unsafe {
            crate::rdma_reject(child, std::ptr::null(), 0);
            crate::rdma_destroy_id(child);
        }
        return Err(e);
    }
    let mut rs = Rs {
        fd,
        id: child,
        state: st::INIT,
        err: 0,
        fs_flags: fs,
        fd_flags: fdf,
        p,
        o,
        c: None,
    };
    let answered = create_ep(&mut rs).and_then(|()| {
        let c = rs.c.as_mut().ok_or(libc::EINVAL)?;
        save_peer(c, &raw)?;
        let data = conn_data(c);
        let mut param = rdma_conn_param {
            private_data: data.as_ptr().cast(),
            private_data_len: CONN_DATA_LEN as u8,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 1,
            rnr_retry_count: 7,
            ..Default::default()
        };
        // SAFETY: the live ID with its QP; param lives through the call.
        match unsafe { crate::rdma_accept(child, &mut param) } {
            0 => Ok(()),
            _ => Err(crate::errno()),
        }
    });
    if let Err(e) = answered {
        tracing::debug!(errno = e, "rsocket: a connection request not accepted");
        if rs.c.is_none() || e == libc::EPROTO {
            // SAFETY: the live ID of the request.
            unsafe { crate::rdma_reject(child, std::ptr::null(), 0) };
        }
        teardown(&mut rs);
        return Err(libc::ECONNABORTED);
    }
    rs.state = st::RDWR;
    set_fd_nonblock(fd, fs & libc::O_NONBLOCK != 0);
    Ok(super::insert(rs))
}

/// A descriptor for the accepted rsocket's number, made now: a duplicate
/// of its event channel's (`chan`).
///
/// The channel was made when the request arrived, before `raccept`;
/// callers such as rdma-core's `librspreload` open a descriptor of their
/// own just before calling `raccept` and, in its older `select`, map a
/// ready rsocket back to the lowest descriptor standing for it — which
/// would be the rsocket's own number if that were lower than theirs. A
/// number made during the call is above any they opened before it, as
/// with rdma-core's rsockets, whose accepted channel is made in the call.
fn fresh_number(chan: i32) -> i32 {
    // SAFETY: duplicating a descriptor this library owns.
    unsafe { libc::fcntl(chan, libc::F_DUPFD_CLOEXEC, 0) }
}

/// Free the rsocket's QP, resources and ID (and its number, where that is
/// a duplicate of the channel's descriptor).
pub fn teardown(rs: &mut Rs) {
    if rs.id.is_null() {
        return;
    }
    // SAFETY: the live ID; its channel is its own.
    let chan = unsafe { (*(*rs.id).channel).fd };
    if rs.fd != chan && rs.fd >= 0 {
        // SAFETY: the duplicate made by `fresh_number`, closed once.
        unsafe { libc::close(rs.fd) };
        rs.fd = -1;
    }
    if rs.c.is_some() {
        // SAFETY: the live ID's QP, destroyed before its CQ and MRs.
        unsafe { crate::rdma_destroy_qp(rs.id) };
    }
    rs.c = None;
    // SAFETY: the live ID; nothing refers to it after this.
    unsafe { crate::rdma_destroy_id(rs.id) };
    rs.id = std::ptr::null_mut();
}

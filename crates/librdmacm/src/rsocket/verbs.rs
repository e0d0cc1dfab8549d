//! The verbs an rsocket uses: its completion channel and CQ, and posting
//! and polling through the context's operations (the inline functions of
//! `verbs.h`).

use crate::sys::*;

/// A send or receive work request's scatter entry.
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    /// Address (the send buffer's, or the program's for inline data).
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// lkey (0 for inline data).
    pub lkey: u32,
}

/// A CQ with a completion channel of its own (non-blocking descriptor:
/// waiting is `poll` on it).
pub struct Cq {
    /// The channel.
    pub ch: *mut ibv_comp_channel,
    /// The CQ.
    pub cq: *mut ibv_cq,
}

// SAFETY: handles of urdma's libibverbs, usable from any thread; the
// rsocket holding them is behind a mutex.
unsafe impl Send for Cq {}

impl Cq {
    /// A channel and a CQ of `cqe` entries on it, armed.
    pub fn new(ctx: *mut ibv_context, cqe: i32) -> Result<Cq, i32> {
        // SAFETY: ctx is the rsocket's ID's open device context.
        unsafe {
            let ch = ibv_create_comp_channel(ctx);
            if ch.is_null() {
                return Err(crate::errno());
            }
            let fd = (*ch).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            let cq = ibv_create_cq(ctx, cqe, std::ptr::null_mut(), ch, 0);
            if cq.is_null() {
                let e = crate::errno();
                ibv_destroy_comp_channel(ch);
                return Err(e);
            }
            let c = Cq { ch, cq };
            c.arm();
            Ok(c)
        }
    }

    /// The channel's descriptor.
    pub fn fd(&self) -> i32 {
        // SAFETY: a live channel.
        unsafe { (*self.ch).fd }
    }

    /// Ask for an event on the next completion.
    pub fn arm(&self) {
        // SAFETY: a live CQ of an open context.
        unsafe {
            if let Some(f) = (*(*self.cq).context).ops.req_notify_cq {
                f(self.cq, 0);
            }
        }
    }

    /// Take a waiting event, if any (acknowledged at once).
    pub fn take_event(&self) -> bool {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a live channel (non-blocking: never waits).
        let got = unsafe { ibv_get_cq_event(self.ch, &mut cq, &mut ctx) } == 0;
        if got {
            // SAFETY: the CQ the event was for (ours).
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        got
    }

    /// Poll up to `out.len()` completions.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize, i32> {
        // SAFETY: a live CQ; out has room for out.len() completions.
        let n = unsafe {
            match (*(*self.cq).context).ops.poll_cq {
                Some(f) => f(self.cq, out.len() as i32, out.as_mut_ptr()),
                None => -1,
            }
        };
        match n {
            n if n >= 0 => Ok(n as usize),
            _ => Err(libc::EIO),
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the CQ and channel this value made; the QP using the
        // CQ is destroyed first (see the rsocket's teardown).
        unsafe {
            while self.take_event() {}
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.ch);
        }
    }
}

/// Post one RDMA WRITE (with immediate `imm` when given), signaled.
pub fn post_write(
    qp: *mut ibv_qp,
    wr_id: u64,
    segs: &[Seg],
    imm: Option<u32>,
    inline: bool,
    remote: (u64, u32),
) -> Result<(), i32> {
    let mut sge: [ibv_sge; 2] = Default::default();
    for (d, s) in sge.iter_mut().zip(segs) {
        *d = ibv_sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        };
    }
    let mut wr = ibv_send_wr {
        wr_id,
        sg_list: sge.as_mut_ptr(),
        num_sge: segs.len().min(2) as i32,
        opcode: match imm {
            Some(_) => IBV_WR_RDMA_WRITE_WITH_IMM,
            None => IBV_WR_RDMA_WRITE,
        },
        send_flags: match inline {
            true => IBV_SEND_INLINE,
            false => 0,
        },
        ..Default::default()
    };
    if segs.is_empty() {
        wr.sg_list = std::ptr::null_mut();
    }
    if let Some(i) = imm {
        wr.__bindgen_anon_1.imm_data = i.to_be();
    }
    wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: remote.0,
        rkey: remote.1,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: qp is the rsocket's live QP; wr and its entries live
    // through the call (inline data is copied by it).
    let r = unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, &mut wr, &mut bad),
            None => libc::ENOSYS,
        }
    };
    posted(r)
}

/// Post one receive of no scatter entries (WRITE with immediate only).
pub fn post_recv(qp: *mut ibv_qp, wr_id: u64) -> Result<(), i32> {
    let mut wr = ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge: 0,
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: qp is the rsocket's live QP; wr lives through the call.
    let r = unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, &mut wr, &mut bad),
            None => libc::ENOSYS,
        }
    };
    posted(r)
}

/// Wait until `fd` polls readable or `ms` pass.
pub fn wait_fd(fd: i32, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// A post call's return as a `Result`: 0, a positive errno, or a negative
/// value with the errno in `errno`.
fn posted(r: i32) -> Result<(), i32> {
    match r {
        0 => Ok(()),
        e if e > 0 => Err(e),
        _ => Err(crate::errno()),
    }
}

//! The `ibv_qp_ex` work request interface: `ibv_wr_start`, one
//! `ibv_wr_<op>` per request followed by its `ibv_wr_set_*` calls, then
//! `ibv_wr_complete` (posts them all) or `ibv_wr_abort`. The inline
//! functions of verbs.h call the function pointers set here.

use crate::post::{copy_inline, may_inline, ud_dest};
use crate::qp::Qp;
use crate::sys::*;
use crate::util::{ensure, guard, VResult};
use std::os::raw::{c_int, c_void};
use urdma::engine::SendOp;
use urdma::engine::{SendData, SendRequest, SgEntry};

/// Requests built since `ibv_wr_start`.
#[derive(Debug, Default)]
pub struct WrBatch {
    /// Between `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`.
    pub open: bool,
    /// The requests, in order.
    pub list: Vec<SendRequest>,
    /// The first error met while building (reported by `ibv_wr_complete`).
    pub err: c_int,
    /// Requests were marked inline (`IBV_SEND_INLINE` in `wr_flags`).
    inline: Vec<bool>,
}

impl WrBatch {
    fn fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }
}

pub(crate) fn set_ops(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_atomic_write = Some(wr_atomic_write);
}

/// Run `f` on the QP's batch (nothing if the handle is not a live QP).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut WrBatch)) {
    guard((), || {
        if let Ok(q) = Qp::from_ptr(qp) {
            let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
            f(q, &mut b);
        }
    })
}

/// Start a new request with `op`, taking wr_id and wr_flags from the QP.
fn begin(qp: *mut ibv_qp_ex, op: VResult<SendOp>, remote_va: u64, rkey: u32) {
    with_batch(qp, |q, b| {
        if !b.open {
            b.fail(libc::EINVAL);
            return;
        }
        let op = match op {
            Ok(op) => op,
            Err(e) => return b.fail(e),
        };
        let flags = q.ibv.wr_flags;
        b.list.push(SendRequest {
            wr_id: q.ibv.wr_id,
            op,
            data: SendData::Sges(Vec::new()),
            remote_va,
            rkey,
            signaled: flags & IBV_SEND_SIGNALED != 0,
            solicited: flags & IBV_SEND_SOLICITED != 0,
            ud: None,
            fence: flags & IBV_SEND_FENCE != 0,
        });
        b.inline
            .push(flags & IBV_SEND_INLINE != 0 && may_inline(op));
    })
}

/// Amend the last request begun.
fn amend(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut SendRequest, bool) -> VResult<()>) {
    with_batch(qp, |q, b| {
        let inline = b.inline.last().copied().unwrap_or(false);
        let r = match b.list.last_mut() {
            Some(last) if b.open => f(q, last, inline),
            _ => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.fail(e);
        }
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| {
        b.open = true;
        b.list.clear();
        b.inline.clear();
        b.err = 0;
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        let Ok(q) = Qp::from_ptr(qp) else {
            return libc::EINVAL;
        };
        let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
        let list = std::mem::take(&mut b.list);
        let err = b.err;
        let open = b.open;
        b.open = false;
        b.inline.clear();
        b.err = 0;
        drop(b);
        if !open {
            return libc::EINVAL;
        }
        if err != 0 {
            return err;
        }
        let qpn = q.qpn;
        match q.dev.device.link().post_sends(qpn, list) {
            Ok(()) => 0,
            Err((_, e)) => e.errno(),
        }
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| {
        b.open = false;
        b.list.clear();
        b.inline.clear();
        b.err = 0;
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, Ok(SendOp::Send), 0, 0)
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    begin(qp, Ok(SendOp::SendImm(u32::from_be(imm_data))), 0, 0)
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qp, Ok(SendOp::Write), remote_addr, rkey)
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    begin(
        qp,
        Ok(SendOp::WriteImm(u32::from_be(imm))),
        remote_addr,
        rkey,
    )
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qp, Ok(SendOp::Read), remote_addr, rkey)
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        qp,
        Ok(SendOp::CompSwap { compare, swap }),
        remote_addr,
        rkey,
    )
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    begin(qp, Ok(SendOp::FetchAdd { add }), remote_addr, rkey)
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    amend(qp, |q, r, inline| {
        r.data = if inline {
            // SAFETY: inline buffers are readable now (verbs contract).
            SendData::Inline(unsafe {
                copy_inline([(addr, length as usize)].into_iter(), q.cap.max_inline_data)
            }?)
        } else {
            SendData::Sges(vec![SgEntry { addr, length, lkey }])
        };
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    amend(qp, |q, r, inline| {
        let n = c_int::try_from(num_sge).map_err(|_| libc::EINVAL)?;
        // SAFETY: sg_list holds num_sge entries (verbs contract).
        let list = unsafe { crate::post::sges(sg_list, n, q.cap.max_send_sge) }?;
        r.data = if inline {
            let bufs = list.iter().map(|s| (s.addr, s.length as usize));
            // SAFETY: inline buffers are readable now (verbs contract).
            SendData::Inline(unsafe { copy_inline(bufs, q.cap.max_inline_data) }?)
        } else {
            SendData::Sges(list)
        };
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    amend(qp, |q, r, _| {
        let bufs = [(addr as u64, length)];
        // SAFETY: the buffer is readable now (verbs contract).
        r.data = SendData::Inline(unsafe { copy_inline(bufs.into_iter(), q.cap.max_inline_data) }?);
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    amend(qp, |q, r, _| {
        if num_buf == 0 {
            r.data = SendData::Inline(Vec::new());
            return Ok(());
        }
        if buf_list.is_null() || num_buf > q.cap.max_send_sge as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: buf_list holds num_buf entries (verbs contract).
        let list = unsafe { std::slice::from_raw_parts(buf_list, num_buf) };
        let bufs = list.iter().map(|b| (b.addr as u64, b.length));
        // SAFETY: the buffers are readable now (verbs contract).
        r.data = SendData::Inline(unsafe { copy_inline(bufs, q.cap.max_inline_data) }?);
        Ok(())
    })
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    amend(qp, |q, r, _| {
        r.ud = Some(ud_dest(q, ah, qpn, qkey)?);
        Ok(())
    })
}

/// Begin an operation urdma does not have: `ibv_wr_complete` fails.
fn unsupported(qp: *mut ibv_qp_ex) {
    begin(qp, Err(libc::EOPNOTSUPP), 0, 0)
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    let op = (|| {
        let q = Qp::from_ptr(qp)?;
        ensure(!info.is_null(), libc::EINVAL)?;
        let m = crate::mw::Mw::from_ptr(mw)?;
        // Type 1 windows are bound by ibv_bind_mw only.
        ensure(m.ibv.type_ == IBV_MW_TYPE_2, libc::EINVAL)?;
        // SAFETY: info is the caller's readable struct (checked non-NULL).
        let info = unsafe { &*info };
        Ok(SendOp::BindMw(crate::mw::bind_request(q, mw, rkey, info)?))
    })();
    begin(qp, op, 0, 0)
}

/// An invalidation (`op` of the R_Key), on a connected QP only.
fn invalidation(qp: *mut ibv_qp_ex, op: SendOp) {
    let op = Qp::from_ptr(qp).and_then(|q| {
        ensure(q.qp_type != urdma::QpType::Ud, libc::EINVAL)?;
        Ok(op)
    });
    begin(qp, op, 0, 0)
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    invalidation(qp, SendOp::LocalInv(rkey))
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    invalidation(qp, SendOp::SendInv(rkey))
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    unsupported(qp)
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, _srqn: u32) {
    with_batch(qp, |_, b| b.fail(libc::EOPNOTSUPP))
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    _rkey: u32,
    _addr: u64,
    _v: *const c_void,
) {
    unsupported(qp)
}

//! Posting work requests: `ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv` (reached through `ibv_context::ops`).

use crate::ah::Ah;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::sys::*;
use crate::util::{ensure, guard, set_errno, VResult};
use std::os::raw::{c_int, c_uint};
use std::sync::atomic::Ordering;
use urdma::engine::{RecvRequest, SendData, SendRequest, SgEntry};
use urdma::engine::{SendOp, UdDest};
use urdma::QpType;

/// Send flags accepted. A request with IBV_SEND_FENCE starts only once
/// every READ and atomic posted before it has completed.
const SEND_FLAGS_KNOWN: c_uint =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

/// The operation of a verbs opcode.
pub fn send_op(opcode: ibv_wr_opcode, imm_be: u32, compare_add: u64, swap: u64) -> VResult<SendOp> {
    let imm = u32::from_be(imm_be);
    Ok(match opcode {
        IBV_WR_RDMA_WRITE => SendOp::Write,
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteImm(imm),
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendImm(imm),
        IBV_WR_RDMA_READ => SendOp::Read,
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompSwap {
            compare: compare_add,
            swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd { add: compare_add },
        // Invalidations and binds carry more than these operands: see
        // convert_send.
        IBV_WR_LOCAL_INV | IBV_WR_BIND_MW | IBV_WR_SEND_WITH_INV => return Err(libc::EINVAL),
        IBV_WR_TSO | IBV_WR_DRIVER1 | IBV_WR_ATOMIC_WRITE => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    })
}

/// True for operations whose data may be inline.
pub fn may_inline(op: SendOp) -> bool {
    matches!(
        op,
        SendOp::Send | SendOp::SendImm(_) | SendOp::Write | SendOp::WriteImm(_)
    )
}

/// The scatter/gather list of a work request. More than `max` entries
/// (the queue's limit) is refused before any entry is read.
///
/// # Safety
/// A non-NULL `sg` must point to `n` readable `ibv_sge`s.
pub unsafe fn sges(sg: *const ibv_sge, n: c_int, max: u32) -> VResult<Vec<SgEntry>> {
    ensure(n >= 0 && n as u32 <= max, libc::EINVAL)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    ensure(!sg.is_null(), libc::EINVAL)?;
    // SAFETY: the caller guarantees n readable entries.
    let list = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(list
        .iter()
        .map(|s| SgEntry {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// Copy inline data out of C buffers (at post time, as verbs requires).
///
/// # Safety
/// Each `(addr, len)` must be readable, as the verbs contract requires of
/// inline buffers.
pub unsafe fn copy_inline(
    bufs: impl Iterator<Item = (u64, usize)>,
    max_inline: u32,
) -> VResult<Vec<u8>> {
    let mut out = Vec::new();
    for (addr, len) in bufs {
        if len == 0 {
            continue;
        }
        ensure(addr != 0, libc::EFAULT)?;
        ensure(
            len <= (max_inline as usize).saturating_sub(out.len()),
            libc::EINVAL,
        )?;
        // SAFETY: the caller guarantees the buffer is readable.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, len) });
    }
    Ok(out)
}

/// The UD destination of an address handle.
pub fn ud_dest(q: &Qp, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> VResult<UdDest> {
    let ah = Ah::from_ptr(ah)?;
    ensure(remote_qpn <= 0x00ff_ffff, libc::EINVAL)?;
    // A Q_Key with its high bit set means "the QP's own Q_Key".
    let qkey = if remote_qkey & 0x8000_0000 != 0 {
        q.qkey.load(Ordering::Acquire)
    } else {
        remote_qkey
    };
    Ok(UdDest {
        addr: ah.dest,
        qpn: remote_qpn,
        qkey,
    })
}

fn convert_send(q: &Qp, w: &ibv_send_wr) -> VResult<SendRequest> {
    ensure(w.send_flags & !SEND_FLAGS_KNOWN == 0, libc::EINVAL)?;
    // SAFETY: the unions are read as the opcode says they were written;
    // every bit pattern of these integer fields is valid.
    let (imm, rdma, atomic, ud) =
        unsafe { (w.__bindgen_anon_1.imm_data, w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV => {
            ensure(q.qp_type != QpType::Ud, libc::EINVAL)?;
            // SAFETY: as above; the opcode says invalidate_rkey was written.
            let rkey = unsafe { w.__bindgen_anon_1.invalidate_rkey };
            match w.opcode {
                IBV_WR_SEND_WITH_INV => SendOp::SendInv(rkey),
                _ => SendOp::LocalInv(rkey),
            }
        }
        IBV_WR_BIND_MW => {
            // SAFETY: as above; the opcode says bind_mw was written.
            let b = unsafe { w.__bindgen_anon_2.bind_mw };
            let m = crate::mw::Mw::from_ptr(b.mw)?;
            // Type 1 windows are bound by ibv_bind_mw only.
            ensure(m.ibv.type_ == IBV_MW_TYPE_2, libc::EINVAL)?;
            SendOp::BindMw(crate::mw::bind_request(q, b.mw, b.rkey, &b.bind_info)?)
        }
        _ => send_op(w.opcode, imm, atomic.compare_add, atomic.swap)?,
    };
    let (remote_va, rkey) = if op.is_atomic() {
        (atomic.remote_addr, atomic.rkey)
    } else {
        (rdma.remote_addr, rdma.rkey)
    };
    // SAFETY: sg_list holds num_sge entries, as the verbs contract says.
    let list = unsafe { sges(w.sg_list, w.num_sge, q.cap.max_send_sge) }?;
    let data = if w.send_flags & IBV_SEND_INLINE != 0 && may_inline(op) {
        let bufs = list.iter().map(|s| (s.addr, s.length as usize));
        // SAFETY: inline buffers are readable at post time (verbs contract).
        SendData::Inline(unsafe { copy_inline(bufs, q.cap.max_inline_data) }?)
    } else {
        SendData::Sges(list)
    };
    let ud = if q.qp_type == QpType::Ud {
        Some(ud_dest(q, ud.ah, ud.remote_qpn, ud.remote_qkey)?)
    } else {
        None
    };
    Ok(SendRequest {
        wr_id: w.wr_id,
        op,
        data,
        remote_va,
        rkey,
        signaled: w.send_flags & IBV_SEND_SIGNALED != 0,
        solicited: w.send_flags & IBV_SEND_SOLICITED != 0,
        ud,
        fence: w.send_flags & IBV_SEND_FENCE != 0,
    })
}

/// Walk a C list of work requests, converting each with `convert` until
/// one fails, then post the converted ones with `post` (one message to
/// the NIC). A refused or unconvertible request is reported in `bad`;
/// the ones before it are posted.
///
/// # Safety
/// `first` must be NULL or a valid list of `T` linked by `next(w)`.
unsafe fn walk<T, R>(
    first: *mut T,
    bad: *mut *mut T,
    next: impl Fn(&T) -> *mut T,
    mut convert: impl FnMut(&T) -> VResult<R>,
    post: impl FnOnce(Vec<R>) -> Result<(), urdma::nic::PostError>,
) -> c_int {
    let mut items = Vec::new();
    let mut nodes = Vec::new();
    let mut failed = None;
    let mut cur = first;
    // A second pointer at half speed meets `cur` only if the list loops
    // back on itself, which would otherwise post forever.
    let mut slow = first;
    let mut steps = 0u64;
    while !cur.is_null() {
        // SAFETY: cur is a node of the caller's list.
        let w = unsafe { &*cur };
        nodes.push(cur);
        match convert(w) {
            Ok(r) => items.push(r),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        cur = next(w);
        steps += 1;
        if steps.is_multiple_of(2) {
            // SAFETY: slow trails cur on the same list, so it is a node.
            slow = next(unsafe { &*slow });
        }
        if !cur.is_null() && cur == slow {
            nodes.push(cur);
            failed = Some(libc::EINVAL);
            break;
        }
    }
    let n = items.len();
    if n > 0 {
        if let Err((i, e)) = post(items) {
            // SAFETY: bad is NULL or the caller's out-pointer.
            return unsafe { refuse(nodes[i.min(n - 1)], bad, e.errno()) };
        }
    }
    match failed {
        // SAFETY: as above; nodes[n] is the node that failed.
        Some(e) => unsafe { refuse(nodes[n], bad, e) },
        None => 0,
    }
}

/// Report a work request that was not posted: point `bad` at it, set
/// errno, return the error.
///
/// # Safety
/// `bad` must be NULL or writable.
unsafe fn refuse<T>(wr: *mut T, bad: *mut *mut T, e: c_int) -> c_int {
    if !bad.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *bad = wr };
    }
    set_errno(e);
    e
}

/// `ibv_context_ops::post_send`
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        let q = match Qp::from_ptr(qp) {
            Ok(q) => q,
            // SAFETY: bad_wr is NULL or the caller's out-pointer.
            Err(e) => return unsafe { refuse(wr, bad_wr, e) },
        };
        let qpn = q.qpn;
        // SAFETY: wr is the caller's list of send work requests.
        unsafe {
            walk(
                wr,
                bad_wr,
                |w| w.next,
                |w| convert_send(q, w),
                |list| q.dev.device.link().post_sends(qpn, list),
            )
        }
    })
}

fn convert_recv(w: &ibv_recv_wr, max_sge: u32) -> VResult<RecvRequest> {
    Ok(RecvRequest {
        wr_id: w.wr_id,
        // SAFETY: sg_list holds num_sge entries, as the verbs contract says.
        sges: unsafe { sges(w.sg_list, w.num_sge, max_sge) }?,
    })
}

/// `ibv_context_ops::post_recv`. A QP attached to an SRQ takes its
/// receives from the SRQ: posting to it fails with EINVAL.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        let q = match Qp::from_ptr(qp).and_then(|q| {
            ensure(q.ibv.qp_base.srq.is_null(), libc::EINVAL)?;
            Ok(q)
        }) {
            Ok(q) => q,
            // SAFETY: bad_wr is NULL or the caller's out-pointer.
            Err(e) => return unsafe { refuse(wr, bad_wr, e) },
        };
        let qpn = q.qpn;
        let max_sge = q.cap.max_recv_sge;
        // SAFETY: wr is the caller's list of receive work requests.
        unsafe {
            walk(
                wr,
                bad_wr,
                |w| w.next,
                |w| convert_recv(w, max_sge),
                |list| q.dev.device.link().post_recvs(qpn, false, list),
            )
        }
    })
}

/// `ibv_context_ops::post_srq_recv`
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        let s = match Srq::from_ptr(srq) {
            Ok(s) => s,
            // SAFETY: bad_wr is NULL or the caller's out-pointer.
            Err(e) => return unsafe { refuse(wr, bad_wr, e) },
        };
        let srqn = s.srqn;
        // The engine checks the SRQ's own limit; the device's bounds the read.
        let max_sge = s.dev.attr.max_sge;
        // SAFETY: wr is the caller's list of receive work requests.
        unsafe {
            walk(
                wr,
                bad_wr,
                |w| w.next,
                |w| convert_recv(w, max_sge),
                |list| s.dev.device.link().post_recvs(srqn, true, list),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_map_and_imm_is_network_order() {
        let be = 0x1122_3344u32.to_be();
        assert_eq!(
            send_op(IBV_WR_SEND_WITH_IMM, be, 0, 0),
            Ok(SendOp::SendImm(0x1122_3344))
        );
        assert_eq!(
            send_op(IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 5, 0),
            Ok(SendOp::FetchAdd { add: 5 })
        );
        assert_eq!(send_op(IBV_WR_TSO, 0, 0, 0), Err(libc::EOPNOTSUPP));
        assert_eq!(send_op(999, 0, 0, 0), Err(libc::EINVAL));
    }

    #[test]
    fn inline_copies_and_limits() {
        let a = *b"hello";
        let b = *b" world";
        let bufs = [(a.as_ptr() as u64, a.len()), (b.as_ptr() as u64, b.len())];
        // SAFETY: both buffers are live locals.
        let v = unsafe { copy_inline(bufs.iter().copied(), 64) }.unwrap();
        assert_eq!(&v, b"hello world");
        // SAFETY: as above.
        assert_eq!(
            unsafe { copy_inline(bufs.iter().copied(), 8) },
            Err(libc::EINVAL)
        );
        // SAFETY: a NULL buffer is refused before any read.
        assert_eq!(
            unsafe { copy_inline([(0u64, 4usize)].into_iter(), 64) },
            Err(libc::EFAULT)
        );
    }

    #[test]
    fn sge_lists() {
        // SAFETY: NULL with zero entries is never read.
        assert!(unsafe { sges(std::ptr::null(), 0, 4) }.unwrap().is_empty());
        // SAFETY: refused before any read.
        assert_eq!(unsafe { sges(std::ptr::null(), 1, 4) }, Err(libc::EINVAL));
        // SAFETY: refused before any read.
        assert_eq!(unsafe { sges(std::ptr::null(), -1, 4) }, Err(libc::EINVAL));
        // SAFETY: more than the limit is refused before any read.
        assert_eq!(
            unsafe { sges(std::ptr::null(), i32::MAX, 4) },
            Err(libc::EINVAL)
        );
    }
}

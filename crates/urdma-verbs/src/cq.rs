//! Completion queues (`ibv_cq` and `ibv_cq_ex`) and polling.
//! Completion channels and CQ events are in [`crate::channel`].

use crate::channel::{Channel, ChannelShared};
use crate::context::Context;
use crate::device::DevShared;
use crate::events::Target;
use crate::handles::{self, Kind};
use crate::pd::Pd;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_ptr, set_errno, EventAcks, VResult};
use std::cell::RefCell;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex};
use urdma::engine::command::CqInUse;
use urdma::{WcFlags, WorkCompletion};

/// A completion queue; the C view is an `ibv_cq_ex`, whose head is an
/// `ibv_cq`, so the same pointer serves both.
#[repr(C)]
pub struct Cq {
    /// The C view; must stay the first field.
    pub ibv: ibv_cq_ex,
    /// The device.
    pub dev: Arc<DevShared>,
    /// The engine's queue.
    pub cq: urdma::Cq,
    /// Completion channel, if any.
    pub channel: Option<(*mut ibv_comp_channel, Arc<ChannelShared>)>,
    /// Completion events handed out and acknowledged.
    pub comp_acks: EventAcks,
    /// Asynchronous events handed out and acknowledged.
    pub async_acks: EventAcks,
    /// The completion `ibv_start_poll`/`ibv_next_poll` made current.
    cur: Mutex<Option<WorkCompletion>>,
}

// SAFETY: the raw pointers are C handles used only as identities or
// checked through the handle registry; shared state is behind locks.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Look up a live CQ from an `ibv_cq *` or `ibv_cq_ex *`.
    pub fn from_ptr<'a, T>(p: *const T) -> VResult<&'a Cq> {
        if !handles::is_live(p, Kind::Cq) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered CQs are live boxed Cqs; ibv is the first field.
        Ok(unsafe { &*(p as *const Cq) })
    }

    /// The `ibv_cq *`.
    pub fn ibv_cq(&self) -> *mut ibv_cq {
        &self.ibv as *const ibv_cq_ex as *mut ibv_cq
    }

    /// The engine's CQ number.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn()
    }

    /// True while a QP uses the CQ (or the NIC cannot say).
    pub fn in_use(&self) -> bool {
        let cqn = self.cqn();
        self.dev.device.call(CqInUse { cqn }).unwrap_or(true)
    }

    /// One asynchronous event acknowledged.
    pub fn ack_async(&self) {
        let n = self.async_acks.acked(1);
        let p = self.ibv_cq();
        // SAFETY: the CQ is live; the counter is a plain field the
        // application only reads.
        unsafe { (*p).async_events_completed = n as u32 };
    }
}

/// Work completion flags `ibv_create_cq_ex` accepts.
const WC_EX_SUPPORTED: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

struct NewCq {
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
}

fn create(context: *mut ibv_context, n: NewCq) -> VResult<*mut ibv_cq_ex> {
    let c = Context::from_ptr(context)?;
    ensure(
        n.cqe > 0 && n.cqe as u32 <= c.dev.attr.max_cqe,
        libc::EINVAL,
    )?;
    ensure(
        n.comp_vector >= 0 && n.comp_vector < c.vctx.context.num_comp_vectors,
        libc::EINVAL,
    )?;
    let channel = if n.channel.is_null() {
        None
    } else {
        let ch = Channel::from_ptr(n.channel)?;
        ensure(ch.ibv.context == context, libc::EINVAL)?;
        Some((n.channel, ch.shared.clone()))
    };
    let cq = c
        .dev
        .device
        .create_cq(n.cqe as usize)
        .map_err(|e| e.errno())?;
    // SAFETY: plain C data (pointers, integers, Option<fn>); zero is valid.
    let mut ibv: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ibv.context = context;
    ibv.channel = n.channel;
    ibv.cq_context = n.cq_context;
    ibv.handle = cq.cqn();
    ibv.cqe = cq.capacity() as c_int;
    set_ex_ops(&mut ibv);
    let b = Box::into_raw(Box::new(Cq {
        ibv,
        dev: c.dev.clone(),
        cq,
        channel,
        comp_acks: EventAcks::default(),
        async_acks: EventAcks::default(),
        cur: Mutex::new(None),
    }));
    // SAFETY: b is the Box just leaked, not yet shared.
    let me = unsafe { &*b };
    // SAFETY: the mutex and condition variable live inside the Box at
    // stable addresses; initialised once before publication.
    unsafe {
        libc::pthread_mutex_init(
            std::ptr::addr_of_mut!((*b).ibv.mutex).cast(),
            std::ptr::null(),
        );
        libc::pthread_cond_init(
            std::ptr::addr_of_mut!((*b).ibv.cond).cast(),
            std::ptr::null(),
        );
    }
    if let Some((chp, sh)) = &me.channel {
        sh.attach();
        crate::channel::sync_refcnt(*chp);
        let sh = sh.clone();
        let cqp = b as usize;
        me.cq
            .shared()
            .set_notifier(Some(Box::new(move || sh.notify(cqp))));
    }
    let p = b as *mut ibv_cq_ex;
    c.dev
        .routes
        .add(Target::Cq, me.cqn(), c.events.clone(), p as usize);
    handles::register(p, Kind::Cq);
    Ok(p)
}

/// `ibv_create_cq`
pub unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        ret_ptr(
            create(
                context,
                NewCq {
                    cqe,
                    cq_context,
                    channel,
                    comp_vector,
                },
            )
            .map(|p| p.cast()),
        )
    })
}

/// `verbs_context::create_cq_ex` (the inline `ibv_create_cq_ex`).
pub unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            ensure(!attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let a = unsafe { &*attr };
            let known = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
            ensure(a.comp_mask & !known == 0, libc::EINVAL)?;
            if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
                ensure(
                    a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED == 0,
                    libc::EOPNOTSUPP,
                )?;
            }
            if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
                // A parent domain of this context.
                let p = Pd::from_ptr(a.parent_domain)?;
                ensure(!p.base.is_null() && p.ibv.context == context, libc::EINVAL)?;
            }
            ensure(a.wc_flags & !WC_EX_SUPPORTED == 0, libc::EOPNOTSUPP)?;
            ensure(a.cqe <= i32::MAX as u32, libc::EINVAL)?;
            create(
                context,
                NewCq {
                    cqe: a.cqe as c_int,
                    cq_context: a.cq_context,
                    channel: a.channel,
                    comp_vector: a.comp_vector as c_int,
                },
            )
        })())
    })
}

/// `ibv_destroy_cq`: EBUSY while a QP uses it; waits until every event
/// handed out for it was acknowledged.
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Cq::from_ptr(cq)?;
            let cqn = q.cqn();
            ensure(!q.in_use(), libc::EBUSY)?;
            q.comp_acks.wait_all_acked();
            q.async_acks.wait_all_acked();
            q.dev.routes.remove(Target::Cq, cqn);
            q.cq.shared().set_notifier(None);
            if let Some((chp, sh)) = &q.channel {
                sh.detach(cq as usize);
                crate::channel::sync_refcnt(*chp);
            }
            if !handles::unregister(cq, Kind::Cq) {
                return Err(libc::EINVAL);
            }
            let b = cq as *mut Cq;
            // SAFETY: b was a registered boxed Cq, now unregistered.
            unsafe {
                libc::pthread_mutex_destroy(std::ptr::addr_of_mut!((*b).ibv.mutex).cast());
                libc::pthread_cond_destroy(std::ptr::addr_of_mut!((*b).ibv.cond).cast());
                drop(Box::from_raw(b));
            }
            Ok(())
        })())
    })
}

/// `ibv_resize_cq`: a new ring for at least `cqe` completions; the
/// completions waiting move into it. EINVAL (and no change) if more wait
/// than it holds or `cqe` is out of the device's range; `cq->cqe` is the
/// new capacity.
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Cq::from_ptr(cq)?;
            ensure(cqe > 0, libc::EINVAL)?;
            let capacity = q.cq.resize(cqe as usize).map_err(|e| e.errno())?;
            // SAFETY: cq is a live CQ (checked above); cqe is the plain
            // field programs read, written once the borrow above ended.
            unsafe { std::ptr::addr_of_mut!((*cq).cqe).write(capacity as c_int) };
            Ok(())
        })())
    })
}

/// `struct ibv_wc` of a completion.
pub fn to_ibv_wc(w: &WorkCompletion) -> ibv_wc {
    // SAFETY: plain C data; zero is valid.
    let mut o: ibv_wc = unsafe { std::mem::zeroed() };
    o.wr_id = w.wr_id;
    o.status = w.status as ibv_wc_status;
    o.opcode = w.opcode as ibv_wc_opcode;
    o.vendor_err = w.vendor_err;
    o.byte_len = w.byte_len;
    if w.wc_flags.contains(WcFlags::WITH_INV) {
        o.__bindgen_anon_1.invalidated_rkey = w.invalidated_rkey;
    } else {
        o.__bindgen_anon_1.imm_data = w.imm_data.to_be();
    }
    o.qp_num = w.qp_num;
    o.src_qp = w.src_qp;
    o.wc_flags = w.wc_flags.bits() as c_uint;
    o.pkey_index = w.pkey_index;
    o.slid = w.slid;
    o.sl = w.sl;
    o.dlid_path_bits = w.dlid_path_bits;
    o
}

thread_local! {
    static POLL_BUF: RefCell<Vec<WorkCompletion>> = RefCell::new(Vec::with_capacity(64));
}

/// `ibv_context_ops::poll_cq` (the inline `ibv_poll_cq`): the number of
/// completions written, or -1 with errno (EOVERFLOW once the CQ overran).
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        let q = match Cq::from_ptr(cq) {
            Ok(q) => q,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            set_errno(libc::EINVAL);
            return -1;
        }
        POLL_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            buf.clear();
            match q.cq.poll_into(num_entries as usize, &mut buf) {
                Ok(0) => {
                    // Applications spin on an empty CQ; the completions
                    // they wait for come from the device threads of this
                    // and the peer process, which need the CPU to run
                    // (an embedded device's are taken by the poll itself
                    // once it spins, see urdma::Cq::poll_into).
                    std::thread::yield_now();
                    0
                }
                Ok(n) => {
                    for (i, w) in buf.iter().enumerate() {
                        // SAFETY: the caller's array holds num_entries
                        // entries and i < n <= num_entries.
                        unsafe { *wc.add(i) = to_ibv_wc(w) };
                    }
                    n as c_int
                }
                Err(e) => {
                    set_errno(e.errno());
                    -1
                }
            }
        })
    })
}

/// `ibv_context_ops::req_notify_cq` (the inline `ibv_req_notify_cq`).
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let q = Cq::from_ptr(cq)?;
            q.cq.shared().req_notify(solicited_only != 0);
            Ok(())
        })())
    })
}

fn set_ex_ops(c: &mut ibv_cq_ex) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// Make the next completion current: 0, ENOENT when none, or an errno.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    let q = match Cq::from_ptr(cq) {
        Ok(q) => q,
        Err(e) => return e,
    };
    let mut v = Vec::with_capacity(1);
    let wc = match q.cq.poll_into(1, &mut v) {
        Ok(0) => {
            // As in poll_cq: let the device threads run.
            std::thread::yield_now();
            None
        }
        Ok(_) => v.pop(),
        Err(e) => return e.errno(),
    };
    let mut cur = q.cur.lock().unwrap_or_else(|e| e.into_inner());
    *cur = wc;
    match wc {
        Some(w) => {
            // SAFETY: the CQ is live; wr_id and status are plain fields
            // the application reads after this call returns.
            unsafe {
                (*cq).wr_id = w.wr_id;
                (*cq).status = w.status as ibv_wc_status;
            }
            0
        }
        None => libc::ENOENT,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a non-NULL attr points to the caller's struct.
        if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        advance(cq)
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || advance(cq))
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard((), || {
        if let Ok(q) = Cq::from_ptr(cq) {
            *q.cur.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    })
}

/// A field of the current completion (zero when there is none).
fn cur<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> T) -> T {
    guard(T::default(), || match Cq::from_ptr(cq) {
        Ok(q) => q
            .cur
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(f)
            .unwrap_or_default(),
        Err(_) => T::default(),
    })
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    cur(cq, |w| w.opcode as ibv_wc_opcode)
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| w.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| {
        if w.wc_flags.contains(WcFlags::WITH_INV) {
            w.invalidated_rkey
        } else {
            w.imm_data.to_be()
        }
    })
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    cur(cq, |w| w.wc_flags.bits() as c_uint)
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq, |w| u32::from(w.slid))
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    cur(cq, |w| w.sl)
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    cur(cq, |w| w.dlid_path_bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use urdma::{WcOpcode, WcStatus};

    #[test]
    fn completion_fields_and_byte_order() {
        let mut w = WorkCompletion::new(9, WcStatus::RemAccessErr, WcOpcode::RecvRdmaWithImm, 77);
        w.imm_data = 0x0102_0304;
        w.wc_flags = WcFlags::WITH_IMM | WcFlags::GRH;
        w.byte_len = 4096;
        let o = to_ibv_wc(&w);
        assert_eq!(o.wr_id, 9);
        assert_eq!(o.status, IBV_WC_REM_ACCESS_ERR);
        assert_eq!(o.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        // SAFETY: the union was written through imm_data.
        assert_eq!(
            unsafe { o.__bindgen_anon_1.imm_data },
            0x0102_0304u32.to_be()
        );
        assert_eq!(o.wc_flags, IBV_WC_WITH_IMM | IBV_WC_GRH);
        assert_eq!(o.qp_num, 77);
    }
}

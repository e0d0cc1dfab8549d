//! Completion channels: a CQ armed with `ibv_req_notify_cq` reports its
//! next completion as an event on its channel, whose `fd` (an
//! [`EventFd`]) counts the events, so `poll`/`epoll` on it work and
//! `ibv_get_cq_event` blocks on it.

use crate::context::Context;
use crate::cq::Cq;
use crate::handles::{self, Kind};
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_minus1, ret_ptr, EventFd, VResult};
use std::collections::VecDeque;
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

/// The part of a channel its CQs' notifiers hold.
#[derive(Debug)]
pub struct ChannelShared {
    /// The channel's `fd`: one count per queued event.
    pub fd: EventFd,
    /// CQs (`ibv_cq *` as usize) with an event waiting, oldest first.
    q: Mutex<VecDeque<usize>>,
    /// CQs using the channel.
    users: AtomicI32,
}

impl ChannelShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<usize>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A CQ now uses the channel.
    pub fn attach(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// A CQ is destroyed: drop its waiting events.
    pub fn detach(&self, cq: usize) {
        let mut q = self.lock();
        let before = q.len();
        q.retain(|&c| c != cq);
        let removed = before - q.len();
        drop(q);
        for _ in 0..removed {
            self.fd.try_take();
        }
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// An armed CQ got a completion (called by the engine's thread).
    pub fn notify(&self, cq: usize) {
        self.lock().push_back(cq);
        self.fd.signal();
    }
}

/// A completion channel.
#[repr(C)]
pub struct Channel {
    /// The C view; must stay the first field.
    pub ibv: ibv_comp_channel,
    /// Shared with the notifiers of its CQs.
    pub shared: Arc<ChannelShared>,
}

impl Channel {
    /// Look up a live channel.
    pub fn from_ptr<'a>(p: *const ibv_comp_channel) -> VResult<&'a Channel> {
        if !handles::is_live(p, Kind::Channel) {
            return Err(libc::EINVAL);
        }
        // SAFETY: registered channels are live boxed Channels; ibv first.
        Ok(unsafe { &*(p as *const Channel) })
    }
}

/// `ibv_create_comp_channel`
pub unsafe extern "C" fn create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            Context::from_ptr(context)?;
            let shared = Arc::new(ChannelShared {
                fd: EventFd::new()?,
                q: Mutex::new(VecDeque::new()),
                users: AtomicI32::new(0),
            });
            let ibv = ibv_comp_channel {
                context,
                fd: shared.fd.raw(),
                refcnt: 0,
            };
            let p = Box::into_raw(Box::new(Channel { ibv, shared })) as *mut ibv_comp_channel;
            handles::register(p, Kind::Channel);
            Ok(p)
        })())
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
pub unsafe extern "C" fn destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let ch = Channel::from_ptr(channel)?;
            ensure(ch.shared.users.load(Ordering::Acquire) == 0, libc::EBUSY)?;
            // Whoever unregisters it frees it: a second destroy fails here.
            ensure(handles::unregister(channel, Kind::Channel), libc::EINVAL)?;
            // SAFETY: channel was a registered boxed Channel, now unregistered.
            drop(unsafe { Box::from_raw(channel as *mut Channel) });
            Ok(())
        })())
    })
}

fn get_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> VResult<()> {
    let ch = Channel::from_ptr(channel)?;
    ensure(!cq.is_null() && !cq_context.is_null(), libc::EINVAL)?;
    loop {
        ch.shared.fd.wait()?;
        let Some(p) = ch.shared.lock().pop_front() else {
            continue;
        };
        let Ok(q) = Cq::from_ptr(p as *const ibv_cq) else {
            continue;
        };
        q.comp_acks.reported();
        // SAFETY: both out-pointers are non-NULL pointers to the caller's
        // variables.
        unsafe {
            *cq = q.ibv_cq();
            *cq_context = q.ibv.cq_context;
        }
        return Ok(());
    }
}

/// `ibv_get_cq_event`: blocks on the channel's fd (unless the application
/// made it non-blocking: then -1 with EAGAIN when nothing waits).
pub unsafe extern "C" fn get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || ret_minus1(get_event(channel, cq, cq_context)))
}

/// `ibv_ack_cq_events`
pub unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard((), || {
        if let Ok(q) = Cq::from_ptr(cq) {
            let n = q.comp_acks.acked(u64::from(nevents));
            // SAFETY: the CQ is live; the counter is a plain field the
            // application only reads.
            unsafe { (*cq).comp_events_completed = n as u32 };
        } else {
            crate::util::set_errno(libc::EINVAL);
        }
    })
}

/// Keep the C-visible reference count in step (informational).
pub(crate) fn sync_refcnt(channel: *mut ibv_comp_channel) {
    if let Ok(ch) = Channel::from_ptr(channel) {
        let n = ch.shared.users.load(Ordering::Acquire);
        // SAFETY: the channel is live; refcnt is a plain field.
        unsafe { (*channel).refcnt = n };
    }
}

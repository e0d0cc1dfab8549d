//! Event channels, IDs and their events: a channel's descriptor is an
//! eventfd that counts its queued events, so it polls readable exactly
//! when `rdma_get_cm_event` has one to give and, set `O_NONBLOCK`, gives
//! `EAGAIN` when it has none.

use crate::state::{lock, notify, ChanState, EventBox, IdState, Locked, Phase};
use crate::sys::*;
use std::ffi::c_void;
use urdma::cm::CmOp;

/// `rdma_create_event_channel`.
pub fn create_channel() -> Result<*mut rdma_event_channel, i32> {
    create_channel_in(&mut lock())
}

fn create_channel_in(st: &mut Locked) -> Result<*mut rdma_event_channel, i32> {
    // SAFETY: eventfd with valid flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::errno());
    }
    let ch = Box::into_raw(Box::new(rdma_event_channel { fd }));
    st.chans.insert(
        ch as usize,
        ChanState {
            queue: Default::default(),
            ids: 0,
            fd,
        },
    );
    Ok(ch)
}

/// `rdma_destroy_event_channel`: refused (`EBUSY`) while IDs use it.
pub fn destroy_channel(ch: *mut rdma_event_channel) -> Result<(), i32> {
    let mut st = lock();
    free_channel(&mut st, ch as usize)
}

fn free_channel(st: &mut Locked, ch: usize) -> Result<(), i32> {
    let c = st.chans.get(&ch).ok_or(libc::EINVAL)?;
    if c.ids > 0 {
        return Err(libc::EBUSY);
    }
    let c = st.chans.remove(&ch).ok_or(libc::EINVAL)?;
    for p in c.queue {
        st.events.remove(&p);
        // SAFETY: queued events are boxes this library made.
        drop(unsafe { Box::from_raw(p as *mut EventBox) });
    }
    // SAFETY: the channel's own descriptor and box, made by create_channel.
    unsafe {
        libc::close(c.fd);
        drop(Box::from_raw(ch as *mut rdma_event_channel));
    }
    Ok(())
}

/// `rdma_create_id`: with no channel, a synchronous ID (its calls wait
/// for their outcome).
pub fn create_id(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut rdma_cm_id, i32> {
    create_id_in(&mut lock(), ch, context, ps, qp_type)
}

/// [`create_id`] with the table locked.
pub fn create_id_in(
    st: &mut Locked,
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut rdma_cm_id, i32> {
    if ![RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB].contains(&ps) {
        return Err(libc::EINVAL);
    }
    let sync = ch.is_null();
    let ch = match sync {
        true => create_channel_in(st)?,
        false => ch,
    };
    let Some(c) = st.chans.get_mut(&(ch as usize)) else {
        return Err(libc::EINVAL);
    };
    c.ids += 1;
    // SAFETY: rdma_cm_id is plain C data; all-zero is valid.
    let mut id: rdma_cm_id = unsafe { std::mem::zeroed() };
    id.channel = ch;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let p = Box::into_raw(Box::new(id));
    st.ids.insert(
        p as usize,
        IdState {
            chan: ch as usize,
            sync,
            dev: None,
            src: None,
            dst: None,
            conn: None,
            phase: Phase::Idle,
            listens: Vec::new(),
            psn: 0,
            remote: None,
            outstanding: 0,
            tos: 0,
            sgid_index: 0,
            ack_timeout: None,
            own_cqs: false,
            path: None,
            ep_qp: None,
            own_srq: false,
            owns_port: false,
        },
    );
    Ok(p)
}

/// `rdma_destroy_id`: waits until the ID's events are acknowledged, ends
/// what it has in the CM (listeners, a connection: DREQ if established,
/// else REJ or nothing), and frees it.
pub fn destroy_id(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut st = lock();
    // A synchronous ID acknowledges its own last event.
    let sync = st.id(id)?.sync;
    // SAFETY: id is live.
    let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
    if sync && !held.is_null() {
        ack_locked(&mut st, held);
    }
    loop {
        let s = st.id(id)?;
        if s.outstanding == 0 {
            break;
        }
        st = st.wait();
    }
    let idu = id as usize;
    // Requests a listener never handed out are refused and their IDs
    // freed with it, as the kernel's rdma_cm does.
    let unclaimed = st.unclaimed_requests(idu);
    st.drop_queued(idu);
    for child in unclaimed {
        forget(&mut st, child);
    }
    forget(&mut st, idu);
    notify();
    Ok(())
}

/// Free the ID `id` with its unread events, ending what it holds in the
/// CM: its listeners, and its connection.
pub(crate) fn forget(st: &mut Locked, id: usize) {
    st.drop_queued(id);
    let Some(s) = st.ids.remove(&id) else {
        return;
    };
    for (dev, service_id) in &s.listens {
        st.listeners.remove(&(*dev, *service_id));
        let ctx = st.devs[*dev].ctx;
        let _ = crate::nic::call(
            ctx,
            &CmOp::Unlisten {
                service_id: *service_id,
            },
        );
    }
    if let (Some(conn), Some(dev)) = (s.conn, s.dev) {
        st.conns.remove(&(dev, conn));
        // The NIC's CM ends it as Linux's does for a destroyed ID: a DREQ
        // if established, a REJ while a REQ or REP waits.
        let _ = crate::nic::call(st.devs[dev].ctx, &CmOp::Destroy { id: conn });
    }
    let idp = id as *mut rdma_cm_id;
    if let (Some(src), true) = (s.src, s.owns_port) {
        // SAFETY: the ID's box is live until freed below.
        let ps = unsafe { (*idp).ps };
        st.ports.remove(&(ps, src.port()));
    }
    if let Some(c) = st.chans.get_mut(&s.chan) {
        c.ids -= 1;
    }
    if s.sync {
        let _ = free_channel(st, s.chan);
    }
    // SAFETY: the box made by create_id, gone from the table.
    drop(unsafe { Box::from_raw(idp) });
}

/// `rdma_get_cm_event`: the next event of the channel, waiting for one
/// unless its descriptor is non-blocking (then `EAGAIN`).
pub fn get_event(ch: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, i32> {
    loop {
        let mut st = lock();
        let Some(c) = st.chans.get_mut(&(ch as usize)) else {
            return Err(libc::EINVAL);
        };
        let fd = c.fd;
        let Some(p) = c.queue.pop_front() else {
            drop(st);
            wait_readable(fd)?;
            continue;
        };
        // The descriptor counts the queue (both change under the lock):
        // this read finds a count and does not block.
        let mut n = 0u64;
        // SAFETY: reading 8 bytes into a live u64 from the channel's fd.
        unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
        // SAFETY: queued events are live boxes this library made.
        let ev = unsafe { &mut (*(p as *mut EventBox)).ev };
        let owner = match ev.event {
            RDMA_CM_EVENT_CONNECT_REQUEST => ev.listen_id,
            _ => ev.id,
        } as usize;
        if let Some(s) = st.ids.get_mut(&owner) {
            s.outstanding += 1;
        }
        return Ok(ev);
    }
}

/// Wait until the channel's descriptor is readable (an event is queued);
/// `EAGAIN` at once if the program made it non-blocking.
fn wait_readable(fd: i32) -> Result<(), i32> {
    // SAFETY: fcntl on the channel's own descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
        return Err(libc::EAGAIN);
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    match unsafe { libc::poll(&mut pfd, 1, -1) } {
        r if r >= 0 => Ok(()),
        _ => match crate::errno() {
            libc::EINTR => Ok(()),
            e => Err(e),
        },
    }
}

/// `rdma_ack_cm_event`.
pub fn ack_event(ev: *mut rdma_cm_event) -> Result<(), i32> {
    let mut st = lock();
    if !st.events.contains(&(ev as usize)) {
        return Err(libc::EINVAL);
    }
    ack_locked(&mut st, ev);
    Ok(())
}

fn ack_locked(st: &mut Locked, ev: *mut rdma_cm_event) {
    if !st.events.remove(&(ev as usize)) {
        return;
    }
    // SAFETY: a live event box (it was in the table).
    let b = unsafe { Box::from_raw(ev as *mut EventBox) };
    let owner = match b.ev.event {
        RDMA_CM_EVENT_CONNECT_REQUEST => b.ev.listen_id,
        _ => b.ev.id,
    } as usize;
    if let Some(s) = st.ids.get_mut(&owner) {
        s.outstanding = s.outstanding.saturating_sub(1);
    }
    notify();
}

/// For a synchronous ID, wait for the outcome of the call just made: its
/// next event, kept in `id->event` (and acknowledged by the next call);
/// an event with an error status is the call's error, as librdmacm
/// reports it (a reject: `ECONNREFUSED`).
pub fn complete(id: *mut rdma_cm_id) -> Result<(), i32> {
    let ch = {
        let mut st = lock();
        let s = st.id(id)?;
        if !s.sync {
            return Ok(());
        }
        // SAFETY: id is live.
        let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
        if !held.is_null() {
            ack_locked(&mut st, held);
        }
        // SAFETY: id is live.
        unsafe { (*id).channel }
    };
    let ev = get_event(ch)?;
    // SAFETY: id is live; ev is the event just taken.
    unsafe {
        (*id).event = ev;
        match ((*ev).event, (*ev).status) {
            (_, 0) => Ok(()),
            (RDMA_CM_EVENT_REJECTED, _) => Err(libc::ECONNREFUSED),
            (_, s) => Err(s.abs()),
        }
    }
}

/// Acknowledge the event a synchronous ID holds, if any.
pub fn release_held(st: &mut Locked, id: *mut rdma_cm_id) {
    // SAFETY: id is live (the caller looked it up).
    let held = unsafe { std::mem::replace(&mut (*id).event, std::ptr::null_mut()) };
    if !held.is_null() {
        ack_locked(st, held);
    }
}

/// `rdma_migrate_id`: move the ID, and its events not yet read, to
/// another channel (null: a channel of its own, synchronous), once the
/// events it handed out are acknowledged.
pub fn migrate(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> Result<(), i32> {
    let (new, sync) = match ch.is_null() {
        true => (create_channel()?, true),
        false => (ch, false),
    };
    let mut st = lock();
    if !st.chans.contains_key(&(new as usize)) || st.id(id).is_err() {
        drop(st);
        if sync {
            let _ = destroy_channel(new);
        }
        return Err(libc::EINVAL);
    }
    // A synchronous ID's last event is acknowledged by its next call.
    release_held(&mut st, id);
    while st.id(id)?.outstanding > 0 {
        st = st.wait();
    }
    let old = st.id(id)?.chan;
    let idu = id as usize;
    let mut moved = Vec::new();
    if let Some(c) = st.chans.get_mut(&old) {
        let mut keep = std::collections::VecDeque::new();
        for p in c.queue.drain(..) {
            // SAFETY: queued events are live boxes this library made.
            let e = unsafe { &*(p as *const EventBox) };
            if e.ev.id as usize == idu && e.ev.event != RDMA_CM_EVENT_CONNECT_REQUEST {
                let mut n = 0u64;
                // SAFETY: the eventfd counts at least the queue; no block.
                unsafe { libc::read(c.fd, (&mut n as *mut u64).cast(), 8) };
                moved.push(p);
            } else {
                keep.push_back(p);
            }
        }
        c.queue = keep;
        c.ids -= 1;
    }
    let was_sync = st.id(id)?.sync;
    let s = st.id(id)?;
    s.chan = new as usize;
    s.sync = sync;
    // SAFETY: id is live.
    unsafe { (*id).channel = new };
    let c = st.chans.get_mut(&(new as usize)).ok_or(libc::EINVAL)?;
    c.ids += 1;
    let fd = c.fd;
    for p in moved {
        c.queue.push_back(p);
        let one = 1u64;
        // SAFETY: writing a live u64 to the new channel's eventfd.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
    if was_sync {
        let _ = free_channel(&mut st, old);
    }
    Ok(())
}

//! The devices and their CM: urdma's `libibverbs.so.1` opens the devices
//! and carries CM calls and events (its private `urdma_cm_*` entry
//! points, looked up at run time so that a program with another
//! libibverbs gets "no device" rather than a loader error).

use crate::state::{lock, Dev, Locked};
use crate::sys::*;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::os::raw::c_int;
use std::sync::OnceLock;
use urdma::cm::{CmEvent, CmOp, ConnId, CM_WIRE_MAX};
use urdma::nic::proto::{decode, encode};

type CallFn = unsafe extern "C" fn(*mut ibv_context, *const u8, usize, *mut u32) -> c_int;
type NextFn = unsafe extern "C" fn(*mut ibv_context, c_int, *mut u8, usize) -> isize;
type AddrFn = unsafe extern "C" fn(*mut ibv_context, *mut u8, usize) -> isize;

struct Entries {
    call: CallFn,
    next: NextFn,
    addr: AddrFn,
}

fn entries() -> Option<&'static Entries> {
    static E: OnceLock<Option<Entries>> = OnceLock::new();
    E.get_or_init(|| {
        let find = |name: &[u8]| {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
            (!p.is_null()).then_some(p)
        };
        let (call, next, addr) = (
            find(b"urdma_cm_call\0")?,
            find(b"urdma_cm_next_event\0")?,
            find(b"urdma_cm_local_addr\0")?,
        );
        // SAFETY: urdma's libibverbs defines these with these signatures
        // (urdma_verbs::cm).
        unsafe {
            Some(Entries {
                call: std::mem::transmute::<*mut c_void, CallFn>(call),
                next: std::mem::transmute::<*mut c_void, NextFn>(next),
                addr: std::mem::transmute::<*mut c_void, AddrFn>(addr),
            })
        }
    })
    .as_ref()
}

/// Carry out `op` on the CM of the device `ctx`.
pub fn call(ctx: usize, op: &CmOp) -> Result<Option<ConnId>, i32> {
    let e = entries().ok_or(libc::ENODEV)?;
    let bytes = encode(op).map_err(|_| libc::EINVAL)?;
    let mut id = 0u32;
    // SAFETY: ctx is a context this library opened; bytes and id live.
    let r = unsafe {
        (e.call)(
            ctx as *mut ibv_context,
            bytes.as_ptr(),
            bytes.len(),
            &mut id,
        )
    };
    match r {
        0 => Ok(matches!(op, CmOp::Connect(_) | CmOp::Resolve(_)).then_some(id)),
        e => Err(e),
    }
}

/// Open every urdma device once, and start each one's event thread.
pub fn open_devices(st: &mut Locked) {
    if st.opened {
        return;
    }
    st.opened = true;
    let Some(e) = entries() else {
        tracing::warn!("librdmacm: the libibverbs loaded is not urdma's: no devices");
        return;
    };
    let mut n = 0;
    // SAFETY: plain libibverbs calls; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return;
    }
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n device pointers.
        let ctx = unsafe { ibv_open_device(*list.add(i)) };
        if ctx.is_null() {
            continue;
        }
        let mut buf = vec![0u8; CM_WIRE_MAX];
        // SAFETY: ctx is open; buf has CM_WIRE_MAX writable bytes.
        let n = unsafe { (e.addr)(ctx, buf.as_mut_ptr(), buf.len()) };
        let Some(addr) = usize::try_from(n)
            .ok()
            .and_then(|n| decode::<SocketAddr>(&buf[..n]).ok())
        else {
            continue;
        };
        // SAFETY: plain C data, filled by the queries.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        let mut port: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; attr and port are writable.
        let ok = unsafe {
            ibv_query_device(ctx, &mut attr) == 0
                && ibv_query_port(ctx, 1, (&mut port as *mut ibv_port_attr).cast()) == 0
        };
        if !ok {
            continue;
        }
        let dev = Dev {
            ctx: ctx as usize,
            addr,
            gids: gid_table(ctx, port.gid_tbl_len),
            pd: 0,
            mtu: port.active_mtu,
            max_responder: attr.max_qp_rd_atom.clamp(0, 255) as u8,
            max_initiator: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
        };
        let index = st.devs.len();
        st.devs.push(dev);
        let ctx = ctx as usize;
        let spawned = std::thread::Builder::new()
            .name("rdma_cm events".into())
            .spawn(move || {
                urdma::sig::block_in_helper_thread();
                pump(index, ctx, e)
            });
        if spawned.is_err() {
            tracing::warn!("librdmacm: cannot start the event thread of a device");
        }
    }
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { ibv_free_device_list(list) };
}

/// Wait for each CM event of device `dev` and hand it to its ID.
fn pump(dev: usize, ctx: usize, e: &'static Entries) {
    let mut buf = vec![0u8; CM_WIRE_MAX];
    loop {
        // SAFETY: ctx stays open; buf has CM_WIRE_MAX writable bytes.
        let n = unsafe { (e.next)(ctx as *mut ibv_context, -1, buf.as_mut_ptr(), buf.len()) };
        if n == 0 || n == -(libc::EINTR as isize) {
            continue;
        }
        if n < 0 {
            tracing::warn!(errno = -n, "librdmacm: the device's CM events stopped");
            return;
        }
        match decode::<CmEvent>(&buf[..n as usize]) {
            Ok(ev) => {
                let mut st = lock();
                crate::conn::on_event(&mut st, dev, ev);
            }
            Err(err) => tracing::warn!(%err, "librdmacm: a CM event could not be read"),
        }
    }
}

/// The device's PD for QPs made with none (allocated at first use).
pub fn default_pd(st: &mut Locked, dev: usize) -> Result<*mut ibv_pd, i32> {
    let d = &mut st.devs[dev];
    if d.pd == 0 {
        // SAFETY: the context is open.
        let pd = unsafe { ibv_alloc_pd(d.ctx as *mut ibv_context) };
        if pd.is_null() {
            return Err(crate::errno());
        }
        d.pd = pd as usize;
    }
    Ok(d.pd as *mut ibv_pd)
}

/// The addresses of the GID table of port 1 of the open device `ctx`
/// (`len` entries), up to the first empty one.
fn gid_table(ctx: *mut ibv_context, len: i32) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for i in 0..len.max(0) {
        // SAFETY: plain C data, filled by the query.
        let mut g: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; g is writable.
        if unsafe { ibv_query_gid(ctx, 1, i, &mut g) } != 0 {
            break;
        }
        // SAFETY: every bit pattern of the GID union is a byte array.
        out.push(urdma::Gid(unsafe { g.raw }).to_ip());
    }
    out
}

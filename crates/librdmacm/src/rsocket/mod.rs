//! rsockets: stream sockets over RC QPs, wire compatible with rdma-core's
//! (`rsocket.h`): each side grants the other halves of its receive
//! buffer, data goes as RDMA WRITE with immediate data (type and length),
//! and credits, buffer grants and control messages are immediates too
//! ([`wire`]).
//!
//! An rsocket is a synchronous rdma_cm ID; its number is the ID's event
//! channel descriptor (a real descriptor, readable when a CM event waits);
//! once connected it is waited for on its CQ's completion channel
//! descriptor. The table maps numbers to rsockets; calls on others give
//! `EBADF`. Datagram rsockets are not offered (`rsocket` refuses
//! `SOCK_DGRAM` with `EOPNOTSUPP`).

pub mod wire;

pub mod api;
mod conn;
mod data;
mod mem;
mod opts;
mod poll;
mod verbs;

use crate::sys::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use urdma::sig::Deferred;

/// State bits (ordered as rdma-core's: passive, opening, connected,
/// closed).
pub mod st {
    /// Made, nothing else.
    pub const INIT: u32 = 0;
    /// Bound to an address.
    pub const BOUND: u32 = 0x1;
    /// Listening.
    pub const LISTENING: u32 = 0x2;
    /// A non-blocking connect under way.
    pub const CONNECTING: u32 = 0x4 | 0x40;
    /// Opening (any step of connecting).
    pub const OPENING: u32 = 0x4;
    /// Connected (with READABLE/WRITABLE for the open directions).
    pub const CONNECTED: u32 = 0x100;
    /// Data may be sent.
    pub const WRITABLE: u32 = 0x200;
    /// Data may arrive.
    pub const READABLE: u32 = 0x400;
    /// Connected in both directions.
    pub const RDWR: u32 = CONNECTED | WRITABLE | READABLE;
    /// The connect failed.
    pub const CONNECT_ERROR: u32 = 0x800;
    /// The peer closed, or this side finished closing.
    pub const DISCONNECTED: u32 = 0x1000;
    /// The connection failed (a transport or protocol error).
    pub const ERROR: u32 = 0x2000;
}

/// The sizes an rsocket's connection is made with.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Send queue entries.
    pub sq_size: u32,
    /// Receive queue entries (the credits granted).
    pub rq_size: u32,
    /// Inline data bytes.
    pub sq_inline: u32,
    /// Send buffer bytes.
    pub sbuf_size: u32,
    /// Receive buffer bytes (granted to the peer in halves).
    pub rbuf_size: u32,
    /// iomap entries offered to the peer.
    pub iomap_size: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            sq_size: 384,
            rq_size: 384,
            sq_inline: 64,
            sbuf_size: 1 << 17,
            rbuf_size: 1 << 17,
            iomap_size: 0,
        }
    }
}

/// Socket options kept for `rgetsockopt` (bit `optname` of each level).
#[derive(Debug, Clone, Copy, Default)]
pub struct Opts {
    /// SOL_SOCKET flags (SO_LINGER inverted: default on).
    pub so: u64,
    /// IPPROTO_TCP flags.
    pub tcp: u64,
    /// IPPROTO_IPV6 flags.
    pub ipv6: u64,
    /// IP_TOS.
    pub tos: i32,
    /// TCP_KEEPIDLE seconds.
    pub keepalive_time: u32,
}

/// One rsocket.
pub struct Rs {
    /// Its number (the event channel's descriptor).
    pub fd: i32,
    /// Its synchronous rdma_cm ID.
    pub id: *mut rdma_cm_id,
    /// [`st`] bits.
    pub state: u32,
    /// The pending error (`SO_ERROR`).
    pub err: i32,
    /// File status flags (`O_NONBLOCK`).
    pub fs_flags: i32,
    /// Descriptor flags (`FD_CLOEXEC`).
    pub fd_flags: i32,
    /// The sizes for its connection.
    pub p: Params,
    /// Options kept.
    pub o: Opts,
    /// The connection's queues and buffers, once made.
    pub c: Option<conn::Conn>,
}

// SAFETY: the ID and the connection's handles are urdma's, usable from
// any thread; the rsocket is only reached through its mutex.
unsafe impl Send for Rs {}

impl Rs {
    /// Whether calls on it return instead of waiting.
    pub fn nonblock(&self, flags: i32) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// Its event channel's descriptor.
    pub fn chan_fd(&self) -> i32 {
        self.fd
    }
}

/// An rsocket as the table holds it.
pub type Shared = Arc<Mutex<Rs>>;

/// A locked rsocket, with the thread's asynchronous signals held back
/// until it is unlocked: a program's handler that `longjmp`s out of an
/// rsocket call then never leaves it locked (see [`urdma::sig`]). Every
/// wait (for data, credits, a connection) is made unlocked.
pub struct Guard<'a> {
    // Fields drop in order: unlocked first, then signals let through.
    g: MutexGuard<'a, Rs>,
    _held: Deferred,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Rs;
    fn deref(&self) -> &Rs {
        &self.g
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Rs {
        &mut self.g
    }
}

/// Run `f` on the table, signals held back meanwhile.
fn table<T>(f: impl FnOnce(&mut HashMap<i32, Shared>) -> T) -> T {
    static T: OnceLock<Mutex<HashMap<i32, Shared>>> = OnceLock::new();
    let _held = Deferred::new();
    let mut t = T
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    f(&mut t)
}

/// The rsocket numbered `fd` (`EBADF`: none).
pub fn lookup(fd: i32) -> Result<Shared, i32> {
    table(|t| t.get(&fd).cloned()).ok_or(libc::EBADF)
}

/// Whether `fd` is an rsocket.
pub fn is_rsocket(fd: i32) -> bool {
    table(|t| t.contains_key(&fd))
}

/// Add an rsocket to the table.
pub fn insert(rs: Rs) -> i32 {
    let fd = rs.fd;
    table(|t| t.insert(fd, Arc::new(Mutex::new(rs))));
    fd
}

/// Take an rsocket out of the table.
pub fn remove(fd: i32) -> Option<Shared> {
    table(|t| t.remove(&fd))
}

/// Lock an rsocket (signals held back first, so none comes between).
pub fn lock(s: &Shared) -> Guard<'_> {
    let held = Deferred::new();
    Guard {
        g: s.lock().unwrap_or_else(|e| e.into_inner()),
        _held: held,
    }
}

/// Set `O_NONBLOCK` on `fd` or clear it.
pub fn set_fd_nonblock(fd: i32, on: bool) {
    // SAFETY: fcntl on a descriptor this library owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            let nfl = match on {
                true => fl | libc::O_NONBLOCK,
                false => fl & !libc::O_NONBLOCK,
            };
            libc::fcntl(fd, libc::F_SETFL, nfl);
        }
    }
}

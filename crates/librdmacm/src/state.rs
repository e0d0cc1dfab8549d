//! The library's one table of everything it handed to C (devices, event
//! channels, IDs, events), under one lock, and the threads that carry the
//! NIC's CM events to the IDs they belong to.
//!
//! Objects are C structures in boxes; the table keys them by address, so a
//! pointer from C is looked up before it is used, and one the table does
//! not know is refused (`EINVAL`) instead of followed.

use crate::sys::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Condvar, Mutex, MutexGuard};
use urdma::cm::ConnId;

/// A device this library opened (it stays open for the program's life,
/// as the ID's `verbs` of every ID on it).
pub struct Dev {
    /// The context, from `ibv_open_device`.
    pub ctx: usize,
    /// The device's address and the UDP port its CM answers on.
    pub addr: SocketAddr,
    /// Port 1's GID table: the address of each entry (RoCE v2), the
    /// device's interface's IPv6 link-local address first when it has one.
    pub gids: Vec<IpAddr>,
    /// The protection domain of IDs whose QP was made with no PD.
    pub pd: usize,
    /// The port's active MTU (an `ibv_mtu`).
    pub mtu: u32,
    /// RDMA READs and atomics a QP accepts at once, at most.
    pub max_responder: u8,
    /// RDMA READs and atomics a QP issues at once, at most.
    pub max_initiator: u8,
}

/// Where a connection of an ID stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No connection.
    Idle,
    /// REQ sent, no REP yet.
    Connecting,
    /// REP received, the consumer moves its own QP ([`rdma_establish`]).
    ///
    /// [`rdma_establish`]: crate::conn::establish
    RepReceived,
    /// A REQ arrived: accept or reject.
    ReqReceived,
    /// REP sent, waiting for the RTU.
    Accepting,
    /// Established.
    Connected,
    /// Disconnected (or rejected, or unreachable).
    Ended,
    /// A UD ID's service resolution is done (answered, or heard): the CM
    /// keeps nothing of it.
    Resolved,
}

/// What the peer's REQ or REP said, for the QP's RTR and RTS.
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    /// The peer's QP.
    pub qpn: u32,
    /// The PSN this side sends from (the one the peer advertised).
    pub send_psn: u32,
    /// The path MTU (an `ibv_mtu`).
    pub mtu: u32,
    /// RDMA READs and atomics this side's QP accepts at once.
    pub responder: u8,
    /// RDMA READs and atomics this side's QP issues at once.
    pub initiator: u8,
    /// Transport retries.
    pub retry: u8,
    /// RNR retries.
    pub rnr_retry: u8,
}

/// What the library keeps about an ID beside its C structure.
pub struct IdState {
    /// The event channel its events go to.
    pub chan: usize,
    /// Synchronous: the channel is its own and the calls wait for their
    /// events.
    pub sync: bool,
    /// The device (index into [`State::devs`]), once bound or resolved.
    pub dev: Option<usize>,
    /// The local address (with the rdma_cm port), once bound.
    pub src: Option<SocketAddr>,
    /// The peer's address (with the rdma_cm port), once resolved.
    pub dst: Option<SocketAddr>,
    /// The connection in the NIC's CM.
    pub conn: Option<ConnId>,
    /// Where the connection stands.
    pub phase: Phase,
    /// The services it listens on: (device, service ID).
    pub listens: Vec<(usize, u64)>,
    /// The PSN this side advertised (and expects to receive).
    pub psn: u32,
    /// The peer's side of the connection.
    pub remote: Option<Remote>,
    /// Events handed to the consumer and not yet acknowledged.
    pub outstanding: u32,
    /// Type of service (`RDMA_OPTION_ID_TOS`).
    pub tos: u8,
    /// The index of the source address's GID on the device.
    pub sgid_index: u8,
    /// Local ACK timeout (`RDMA_OPTION_ID_ACK_TIMEOUT`).
    pub ack_timeout: Option<u8>,
    /// CQs and completion channels this library made for the ID's QP.
    pub own_cqs: bool,
    /// The path record of `route.path_rec`.
    pub path: Option<Box<ibv_sa_path_rec>>,
    /// For a passive endpoint of `rdma_create_ep`: the QP to make for each
    /// request (`rdma_get_request`).
    pub ep_qp: Option<EpQp>,
    /// The SRQ made by `rdma_create_srq`, destroyed with the endpoint.
    pub own_srq: bool,
    /// The rdma_cm port of `src` was taken by this ID (a connection
    /// request's ID shares its listener's).
    pub owns_port: bool,
}

/// The PD (as an address, 0: the device's) and QP attributes a passive
/// endpoint gives each request's QP.
#[derive(Clone, Copy)]
pub struct EpQp {
    /// The PD.
    pub pd: usize,
    /// The QP attributes.
    pub attr: ibv_qp_init_attr,
}

// SAFETY: the attributes' pointers (CQs, SRQ, context) are handles the
// consumer gave to be used from any thread, as libibverbs objects are;
// this library only passes them back to libibverbs.
unsafe impl Send for EpQp {}

/// An event channel: its queue of events not yet read.
pub struct ChanState {
    /// The events, oldest first.
    pub queue: VecDeque<usize>,
    /// IDs on the channel.
    pub ids: usize,
    /// The channel's file descriptor (an eventfd counting the queue).
    pub fd: i32,
}

/// An event as handed to C, with the private data it points to.
#[repr(C)]
pub struct EventBox {
    /// The C view; must stay first.
    pub ev: rdma_cm_event,
    /// The private data `ev.param.conn.private_data` points into.
    pub data: Vec<u8>,
}

/// Everything, under [`lock`].
#[derive(Default)]
pub struct State {
    /// Whether the devices were opened.
    pub opened: bool,
    /// The devices.
    pub devs: Vec<Dev>,
    /// Live IDs, by address.
    pub ids: HashMap<usize, IdState>,
    /// Live channels, by address.
    pub chans: HashMap<usize, ChanState>,
    /// Events queued or handed out, not yet acknowledged.
    pub events: HashSet<usize>,
    /// Connections: (device, connection) to ID.
    pub conns: HashMap<(usize, ConnId), usize>,
    /// Listeners: (device, service ID) to ID.
    pub listeners: HashMap<(usize, u64), usize>,
    /// Lists from `rdma_get_devices`, with their lengths.
    pub device_lists: HashMap<usize, usize>,
    /// rdma_cm ports taken by IDs of this program: (port space, port).
    pub ports: HashSet<(u32, u16)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

/// The table, locked.
pub struct Locked(MutexGuard<'static, Option<State>>);

impl std::ops::Deref for Locked {
    type Target = State;
    fn deref(&self) -> &State {
        self.0.as_ref().expect("initialised by lock()")
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut State {
        self.0.as_mut().expect("initialised by lock()")
    }
}

impl Locked {
    /// Wait for [`notify`] (an acknowledgement, an ID gone).
    pub fn wait(self) -> Locked {
        Locked(CHANGED.wait(self.0).unwrap_or_else(|e| e.into_inner()))
    }
}

/// Lock the table.
pub fn lock() -> Locked {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(State::default());
    }
    Locked(g)
}

/// Wake the callers waiting in [`Locked::wait`].
pub fn notify() {
    CHANGED.notify_all();
}

impl State {
    /// The state of the live ID `id`.
    pub fn id(&mut self, id: *mut rdma_cm_id) -> Result<&mut IdState, i32> {
        self.ids.get_mut(&(id as usize)).ok_or(libc::EINVAL)
    }

    /// The device with address `ip`.
    pub fn dev_of(&self, ip: IpAddr) -> Option<usize> {
        self.devs
            .iter()
            .position(|d| d.addr.ip() == ip)
            .or_else(|| self.devs.iter().position(|d| d.gids.contains(&ip)))
    }

    /// Queue an event on the channel of `id` (the ID it is about). The
    /// event counts for `owner` (the listener for a connect request).
    pub fn push(&mut self, owner: usize, ev: Box<EventBox>) {
        let Some(chan) = self.ids.get(&owner).map(|s| s.chan) else {
            return;
        };
        let Some(c) = self.chans.get_mut(&chan) else {
            return;
        };
        let p = Box::into_raw(ev) as usize;
        c.queue.push_back(p);
        self.events.insert(p);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to the channel's eventfd.
        let n = unsafe { libc::write(c.fd, (&one as *const u64).cast(), 8) };
        if n != 8 {
            tracing::warn!("cannot signal an rdma_cm event channel");
        }
    }

    /// The IDs of the connection requests of listener `id` still queued
    /// (not yet read by the program).
    pub fn unclaimed_requests(&self, id: usize) -> Vec<usize> {
        let Some(c) = self.ids.get(&id).and_then(|s| self.chans.get(&s.chan)) else {
            return Vec::new();
        };
        c.queue
            .iter()
            // SAFETY: queued events are live boxes this table made.
            .map(|&p| unsafe { &(*(p as *const EventBox)).ev })
            .filter(|e| e.event == RDMA_CM_EVENT_CONNECT_REQUEST && e.listen_id as usize == id)
            .map(|e| e.id as usize)
            .collect()
    }

    /// Take back the queued (unread) events of `id` from its channel and
    /// free them.
    pub fn drop_queued(&mut self, id: usize) {
        let Some(chan) = self.ids.get(&id).map(|s| s.chan) else {
            return;
        };
        let Some(c) = self.chans.get_mut(&chan) else {
            return;
        };
        let mut keep = VecDeque::new();
        for p in c.queue.drain(..) {
            // SAFETY: queued events are live boxes this table made.
            let ev = unsafe { &*(p as *const EventBox) };
            let mine = ev.ev.id as usize == id || ev.ev.listen_id as usize == id;
            if !mine {
                keep.push_back(p);
                continue;
            }
            let mut n = 0u64;
            // SAFETY: reading 8 bytes into a live u64 from the eventfd,
            // whose count is at least the queue's length (so this does
            // not block).
            unsafe { libc::read(c.fd, (&mut n as *mut u64).cast(), 8) };
            self.events.remove(&p);
            // SAFETY: p came from Box::into_raw in push and left the queue.
            drop(unsafe { Box::from_raw(p as *mut EventBox) });
        }
        c.queue = keep;
    }
}

/// A new event about `id`, of type `kind` with `status`.
pub fn event(id: usize, kind: rdma_cm_event_type, status: i32) -> Box<EventBox> {
    // SAFETY: rdma_cm_event is plain C data; all-zero is a valid value.
    let mut ev: rdma_cm_event = unsafe { std::mem::zeroed() };
    ev.id = id as *mut rdma_cm_id;
    ev.event = kind;
    ev.status = status;
    Box::new(EventBox {
        ev,
        data: Vec::new(),
    })
}

/// Set `param.conn` of `b` with `data` as its private data.
pub fn set_conn(b: &mut EventBox, data: &[u8], fill: impl FnOnce(&mut rdma_conn_param)) {
    let (ptr, len) = keep(b, data);
    // SAFETY: conn is the member of the union rdma_cm uses for RC and UC.
    let conn = unsafe { &mut b.ev.param.conn };
    fill(conn);
    (conn.private_data, conn.private_data_len) = (ptr, len);
}

/// Set `param.ud` of `b` with `data` as its private data.
pub fn set_ud(b: &mut EventBox, data: &[u8], fill: impl FnOnce(&mut rdma_ud_param)) {
    let (ptr, len) = keep(b, data);
    // SAFETY: ud is the member of the union rdma_cm uses for UD IDs.
    let ud = unsafe { &mut b.ev.param.ud };
    fill(ud);
    (ud.private_data, ud.private_data_len) = (ptr, len);
}

/// Keep `data` in `b` (the event owns its private data): where it is and
/// its length as rdma_cm reports it.
fn keep(b: &mut EventBox, data: &[u8]) -> (*const std::ffi::c_void, u8) {
    b.data = data.to_vec();
    (b.data.as_ptr().cast(), b.data.len().min(255) as u8)
}

impl Dev {
    /// The device's address that talks to `peer`: the one of its family.
    pub fn addr_for(&self, peer: IpAddr) -> IpAddr {
        match self.addr.ip() {
            a if a.is_ipv4() == peer.is_ipv4() => a,
            a => self
                .gids
                .iter()
                .copied()
                .find(|g| g.is_ipv4() == peer.is_ipv4())
                .unwrap_or(a),
        }
    }

    /// The GID index of the device's address `ip` (0 if it has none).
    pub fn gid_index(&self, ip: IpAddr) -> u8 {
        let at = self.gids.iter().position(|g| *g == ip);
        at.and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
    }
}

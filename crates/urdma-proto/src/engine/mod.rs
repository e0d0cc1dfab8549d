//! The protocol engine of one urdma device: a deterministic state machine
//! fed datagrams, commands and the time, returning datagrams to send,
//! completions (into CQs), events and timer deadlines. It does no I/O
//! itself; [`Engine`] documents the contract.

mod abandon;
pub mod command;
mod completer;
mod counters;
pub mod cwnd;
mod gsi;
pub use gsi::{GsiDatagram, GsiSend};
mod congestion;
pub mod device_window;
pub mod dma;
mod ident;
mod ingress;
mod local_ops;
pub mod mw;
mod objects;
mod policy;
pub(crate) mod psn;
pub(crate) mod qp;
mod qp_flush;
pub mod rate;
mod request;
pub(crate) mod requester;
mod responder;
pub(crate) mod rings;
pub mod rtt;
#[cfg(test)]
mod scenario;
pub(crate) mod srq;
mod timer;
mod transmit;
mod tx;
pub(crate) mod wqe;

pub use counters::{Counter, Counters};
pub use objects::{
    check_recv_request, check_recv_sges, check_send_request, is_kernel_key, RecvRequest, SendData,
    SendLimits, SendRequest, SgEntry, KERNEL_KEY_TAG,
};
pub use policy::Policy;
pub use qp::QpRings;
pub use qp::MIN_ACK_TIMEOUT_NS;
pub use requester::{CONTROLLED_QKEY, WINDOW};
pub use srq::SrqAttr;
pub use transmit::Transmit;
pub use wqe::{SendOp, UdDest};

use crate::mr::MrEntry;
use crate::types::{AsyncEvent, AsyncEventKind};
use crate::verbs::DeviceAttr;
use qp::QpCtx;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use timer::QpDeadlines as _;

/// Tells whether an address is served by a device of the same NIC, whose
/// packets the fabric hands over internally (memory to memory, no wire).
pub type InternalPeerTest = Arc<dyn Fn(SocketAddr) -> bool + Send + Sync>;

/// Payload bytes per packet of an RC or UC QP whose peer is served by the
/// same NIC: both ends are this NIC's engines and no packet crosses a
/// link, so messages are cut into pieces of this size instead of the path
/// MTU (as an RNIC's internal loopback moves memory without a wire
/// format). 60 KiB keeps a packet, with any headers, within an IPv4
/// datagram's size (and a capture's 65,535-byte frames), so that captures
/// of internal traffic stay readable.
pub const INTERNAL_UNIT: usize = 60 * 1024;

/// Outputs collected while the engine handles one input.
pub(crate) struct Ctx<'a> {
    /// Current time in ns.
    pub now: u64,
    /// Local device address.
    pub local: SocketAddr,
    /// The device's address of the other family, if it has one (see
    /// [`Engine::set_gids`]).
    pub other: Option<SocketAddr>,
    /// Registered memory by key.
    pub mrs: &'a HashMap<u32, Arc<MrEntry>>,
    /// Datagrams to send.
    pub tx: &'a mut VecDeque<Transmit>,
    /// Device counters.
    pub counters: &'a mut Counters,
    /// Async events raised.
    pub events: &'a mut Vec<AsyncEvent>,
    /// Source address of the datagram being handled.
    pub last_src: SocketAddr,
    /// Handling a batch: plain ACKs are coalesced until it ends.
    pub batching: bool,
    /// QPs holding back an ACK.
    pub deferred_acks: &'a mut Vec<u32>,
    /// Shared receive queues.
    pub srqs: &'a mut HashMap<u32, srq::SrqCtx>,
    /// Memory windows.
    pub mws: &'a mut mw::MwTable,
    /// Bytes of out-of-sequence requests the device's QPs keep.
    pub held_budget: &'a Arc<responder::HeldBudget>,
    /// RC QPs offer and accept selective retransmission
    /// ([`Engine::set_selective`]).
    pub selective: bool,
    /// The device's packets leave ECN-capable ([`Engine::set_ecn`]).
    pub ecn: bool,
    /// Packets the device's RC QPs have in flight ([`device_window`]).
    pub device_inflight: &'a mut u64,
    /// The device window, in packets ([`Engine::set_device_window`]).
    pub device_window: u64,
    /// The payload of the packet being handled, when a device of this NIC
    /// left it in its region ([`dma`]).
    pub dma: Option<&'a dma::DmaSource>,
    /// The requester's buffer of the READ request being handled, when the
    /// requester is a device of this NIC ([`dma`]).
    pub sink: Option<&'a dma::DmaSource>,
    /// The QPs with responses waiting and what the device may still queue
    /// of READ responses ([`responder::Responding`]).
    pub responding: &'a mut responder::Responding,
}

impl<'a> Ctx<'a> {
    /// The device's address that sends to (and hears from) `peer`.
    pub(crate) fn local_for(&self, peer: SocketAddr) -> SocketAddr {
        pick_local(self.local, self.other, peer)
    }

    /// Count one event of kind `c` for a QP (its counters `qp`) and for the device.
    pub(crate) fn count(&mut self, qp: &mut Counters, c: Counter) {
        counters::count_both(qp, self.counters, c, 1);
    }

    /// Raise an asynchronous event.
    pub(crate) fn event(&mut self, kind: AsyncEventKind, object: u32) {
        self.events.push(AsyncEvent { kind, object });
    }

    /// The payload `payload` of the packet being handled: its bytes, or,
    /// when it is the stand-in of a payload held by reference ([`dma`]),
    /// where they are.
    pub(crate) fn body<'p>(&self, payload: &'p [u8]) -> dma::Body<'p>
    where
        'a: 'p,
    {
        match self.dma.filter(|d| d.stands_for(payload)) {
            Some(src) => dma::Body::Source(src),
            None => dma::Body::Bytes(payload),
        }
    }
}

/// One device's engine: the protocol state machine of a urdma NIC.
///
/// The engine does no I/O and reads no clock. Its driver (the UDP fabric,
/// the simulator, a test) owns the socket and the time and calls it with
/// inputs; every input returns at once, having changed the engine's state
/// and queued outputs.
///
/// # Time
/// Time is a `u64` of nanoseconds on a clock the driver chooses (the UDP
/// fabric counts from the device's creation; the simulator runs a virtual
/// clock). Every input that may start a timer takes `now`. It must never
/// go backwards from one call to the next; the engine never looks at any
/// other clock, so a run is a pure function of its inputs and `seed`.
///
/// # Inputs
/// - [`Engine::execute`] / [`Engine::call`]: the command interface
///   ([`command`]) through which drivers create, modify and destroy PDs,
///   MRs, QPs and SRQs and post work requests. A command is checked
///   completely before anything changes: an error answer means nothing
///   happened.
/// - [`Engine::handle_datagram`] / [`Engine::handle_batch`]: UDP payloads
///   received on the device's port, with their source address. Malformed,
///   misdirected or unexpected packets are dropped and counted, never an
///   error to the caller. `handle_batch` coalesces the ACKs the batch calls
///   for into one per QP.
/// - [`Engine::handle_timeouts`]: run the timers due at `now`. Call it when
///   `now` reaches [`Engine::next_deadline`]; calling it earlier does
///   nothing, calling it later only delays the work.
///
/// # Outputs
/// After any input, and before waiting for the next one, the driver should:
/// - send every datagram of [`Engine::drain_tx`] (in order; they may be
///   lost, duplicated or reordered by the network, the protocol copes);
/// - deliver [`Engine::take_events`] (asynchronous events) to the
///   application;
/// - arrange to call [`Engine::handle_timeouts`] at [`Engine::next_deadline`]
///   (None: no timer runs), which any input may move earlier or later.
///   The responders send long READ responses through it too, a window
///   per call, and queue more only once [`Engine::drain_tx`] took what
///   they queued before.
///
/// Completions are not returned: the engine pushes them into the CQs the
/// QPs were created with ([`crate::sink::CompletionSink`]), which the application
/// polls directly. Counters ([`Engine::counters`], [`Engine::qp_counters`])
/// may be read at any time.
pub struct Engine {
    local: SocketAddr,
    /// Port 1's GID table: the address each entry stands for
    /// ([`Engine::set_gids`]).
    gids: Vec<SocketAddr>,
    /// The entry of the other family than `local`, if any.
    other: Option<SocketAddr>,
    attr: DeviceAttr,
    pds: HashSet<u32>,
    next_pd: u32,
    mrs: HashMap<u32, Arc<MrEntry>>,
    mws: mw::MwTable,
    qps: HashMap<u32, QpCtx>,
    next_qpn: u32,
    tx: VecDeque<Transmit>,
    counters: Counters,
    events: Vec<AsyncEvent>,
    rng: rand::rngs::StdRng,
    batching: bool,
    deferred_acks: Vec<u32>,
    held_budget: Arc<responder::HeldBudget>,
    selective: bool,
    ecn: bool,
    srqs: HashMap<u32, srq::SrqCtx>,
    next_srqn: u32,
    idents: ident::SenderIdents,
    /// The communication manager behind QP 1.
    cm: crate::cm::Cm,
    /// PSN of QP 1's next packet.
    gsi_psn: u32,
    /// Datagrams for the kernel's QP 1, when the kernel has one.
    kernel_gsi: Option<Vec<gsi::GsiDatagram>>,
    /// Which peers the fabric reaches internally ([`INTERNAL_UNIT`]).
    internal_peer: Option<InternalPeerTest>,
    /// Packets the RC QPs have in flight ([`device_window`]).
    device_inflight: u64,
    /// Packets they may have in flight before each is held to its share.
    device_window: u64,
    /// Where the QPs' timers report their deadlines.
    timer_index: Arc<timer::TimerIndex>,
    /// The QPs whose responders have READ responses (or what follows
    /// them) to send.
    responding: responder::Responding,
}

/// A seed no one chose: the standard library's per-process random hash
/// keys (taken from the operating system), mixed with a counter so that
/// each engine of a process gets its own.
fn unseeded() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

impl Engine {
    /// An engine for a device at `local` with limits `attr`.
    pub fn new(local: SocketAddr, attr: DeviceAttr, seed: Option<u64>) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = match seed {
            Some(s) => rand::rngs::StdRng::seed_from_u64(s),
            None => rand::rngs::StdRng::seed_from_u64(unseeded()),
        };
        let next_qpn = rng.gen_range(0x100..0x8000);
        let cm = crate::cm::Cm::new(local.ip(), attr.node_guid, rng.gen());
        let gsi_psn = rng.gen_range(0..urdma_wire::PSN_MASK);
        Engine {
            local,
            gids: vec![local],
            other: None,
            attr,
            pds: HashSet::default(),
            next_pd: 1,
            mrs: HashMap::default(),
            mws: mw::MwTable::default(),
            qps: HashMap::default(),
            next_qpn,
            tx: VecDeque::new(),
            counters: Counters::default(),
            events: Vec::new(),
            rng,
            batching: false,
            deferred_acks: Vec::new(),
            held_budget: Arc::default(),
            selective: true,
            ecn: true,
            srqs: HashMap::default(),
            next_srqn: 1,
            idents: ident::SenderIdents::default(),
            cm,
            gsi_psn,
            kernel_gsi: None,
            internal_peer: None,
            device_inflight: 0,
            device_window: device_window::DEVICE_WINDOW,
            timer_index: Arc::default(),
            responding: responder::Responding::default(),
        }
    }

    /// Say how to tell the peers that the fabric reaches internally (a
    /// device of the same NIC): RC and UC QPs connected to one at RTR
    /// carry messages in pieces of [`INTERNAL_UNIT`] bytes. Both ends of
    /// such a connection are engines of this NIC and make the same
    /// choice. Unset (the default), every QP uses its path MTU.
    pub fn set_internal_peer_test(&mut self, test: InternalPeerTest) {
        self.internal_peer = Some(test);
    }

    /// Bound the packets this device's RC QPs have in flight together to
    /// `packets` (at least [`device_window::MIN_DEVICE_WINDOW`]) before
    /// each is held to a fair share; see [`device_window`].
    pub fn set_device_window(&mut self, packets: u64) {
        self.device_window = packets.max(device_window::MIN_DEVICE_WINDOW);
    }

    /// Offer and accept selective retransmission on RC QPs (on by
    /// default): requests carry the selective mark, marked requests after
    /// a loss are kept (the responder's reorder buffer), and a marked sequence
    /// NAK is answered by resending the one packet it names. Off, the QPs
    /// use IBTA go-back-N only, as with any peer that does not mark its
    /// packets.
    pub fn set_selective(&mut self, on: bool) {
        self.selective = on;
    }

    /// Say whether the device's socket sends ECN-capable packets (on by
    /// default; the fabric sets it from what its socket could do). With
    /// ECN, congestion is signalled by CE marks, which the DCQCN rate
    /// controller answers, and a loss repaired selectively is taken for
    /// congestion only while the QP is paced after CNPs; without, every
    /// loss halves the send window once per window, as TCP's NewReno does.
    pub fn set_ecn(&mut self, on: bool) {
        self.ecn = on;
    }

    /// Local device address.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// Set port 1's GID table: the addresses the device has, in table
    /// order, its own address ([`Engine::local`]) among them and at most
    /// one of the other family (its interface's IPv6 link-local address).
    /// A QP's or AH's source GID index names one of them, of the family
    /// of its destination; packets to a peer leave from the address of
    /// the peer's family.
    pub fn set_gids(&mut self, gids: Vec<SocketAddr>) {
        let local = self.local;
        self.other = gids
            .iter()
            .copied()
            .find(|g| g.is_ipv4() != local.is_ipv4());
        self.gids = if gids.is_empty() { vec![local] } else { gids };
        self.cm.set_other(self.other.map(|a| a.ip()));
    }

    /// Port 1's GID table ([`Engine::set_gids`]).
    pub fn gids(&self) -> &[SocketAddr] {
        &self.gids
    }

    /// The device's address that sends to (and hears from) `peer`.
    pub fn local_for(&self, peer: SocketAddr) -> SocketAddr {
        pick_local(self.local, self.other, peer)
    }

    /// Device attributes.
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// Device counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: u32) -> Option<Counters> {
        self.qps.get(&qpn).map(|q| q.counters)
    }

    /// Numbers of the live QPs.
    pub fn qp_numbers(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.qps.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Take the datagrams produced so far.
    pub fn drain_tx(&mut self) -> std::collections::vec_deque::Drain<'_, Transmit> {
        self.responding.drained();
        self.tx.drain(..)
    }

    /// Take the async events raised so far.
    pub fn take_events(&mut self) -> Vec<AsyncEvent> {
        std::mem::take(&mut self.events)
    }

    fn split(&mut self, now: u64) -> (&mut HashMap<u32, QpCtx>, Ctx<'_>) {
        self.split_from(now, self.local)
    }

    /// QP `qpn` and the context to act on it.
    fn qp_and_ctx(&mut self, now: u64, qpn: u32) -> crate::Result<(&mut QpCtx, Ctx<'_>)> {
        let (qps, cx) = self.split(now);
        let qp = qps
            .get_mut(&qpn)
            .ok_or_else(|| crate::Error::NotFound(format!("qp {qpn}")))?;
        Ok((qp, cx))
    }

    fn split_from(&mut self, now: u64, src: SocketAddr) -> (&mut HashMap<u32, QpCtx>, Ctx<'_>) {
        (
            &mut self.qps,
            Ctx {
                now,
                local: self.local,
                other: self.other,
                mrs: &self.mrs,
                tx: &mut self.tx,
                counters: &mut self.counters,
                events: &mut self.events,
                last_src: src,
                batching: self.batching,
                deferred_acks: &mut self.deferred_acks,
                srqs: &mut self.srqs,
                mws: &mut self.mws,
                held_budget: &self.held_budget,
                selective: self.selective,
                ecn: self.ecn,
                device_inflight: &mut self.device_inflight,
                device_window: self.device_window,
                dma: None,
                sink: None,
                responding: &mut self.responding,
            },
        )
    }

    /// The earliest timer deadline of any QP or of the CM, or the next
    /// pass of the responders with READ responses still to send.
    pub fn next_deadline(&self) -> Option<u64> {
        let qps = if self.qps.len() <= timer::SCAN_QPS {
            self.timer_index.trim();
            self.qps
                .values()
                .filter_map(|q| q.timers.next_deadline())
                .min()
        } else {
            self.timer_index.earliest(&self.qps)
        };
        qps.into_iter()
            .chain(self.cm.next_deadline())
            .chain(self.responding.deadline())
            .min()
    }

    /// Run expired timers.
    pub fn handle_timeouts(&mut self, now: u64) {
        // In QP-number order, so that a run is a function of its inputs
        // (a HashMap's order differs from process to process).
        // Only QPs with a timer due, found through the index: a NIC with
        // thousands of idle QPs does not visit each of them.
        let index = self.timer_index.clone();
        let due = if self.qps.len() <= timer::SCAN_QPS {
            let mut due: Vec<u32> = self
                .qps
                .all()
                .filter(|&(_, d)| d.is_some_and(|d| d <= now))
                .map(|(qpn, _)| qpn)
                .collect();
            due.sort_unstable();
            due
        } else {
            index.take_due(now, &self.qps)
        };
        let (qps, mut cx) = self.split(now);
        for qpn in due {
            if let Some(qp) = qps.get_mut(&qpn) {
                completer::on_timer(qp, &mut cx);
                // Its entry left the index: report what still runs.
                if let Some(d) = qp.timers.next_deadline() {
                    index.push(d, qpn);
                }
            }
        }
        if self.cm.next_deadline().is_some_and(|d| d <= now) {
            self.cm.on_timer(now);
            self.flush_cm(now);
        }
        self.send_responses(now);
    }

    /// Count datagrams delivered by internal loopback.
    pub fn count_loopback(&mut self, n: u64) {
        self.counters.add(Counter::Loopback, n);
    }

    /// Count datagrams the fabric could not send.
    pub fn count_tx_errors(&mut self, n: u64) {
        self.counters.add(Counter::TxErrors, n);
    }

    /// Count datagrams the fabric dropped for being larger than any packet.
    pub fn count_oversized(&mut self, n: u64) {
        self.counters.add(Counter::Oversized, n);
    }
}

/// Count and log a dropped packet.
pub(crate) fn drop_packet(qp: &mut QpCtx, cx: &mut Ctx<'_>, why: &str) {
    cx.count(&mut qp.counters, Counter::Dropped);
    tracing::trace!(qpn = qp.qpn, why, "packet dropped");
}

/// Of a device's address `local` and its address of the other family
/// `other`, the one of `peer`'s family (`local` if it has none).
fn pick_local(local: SocketAddr, other: Option<SocketAddr>, peer: SocketAddr) -> SocketAddr {
    match other {
        Some(o) if o.is_ipv4() == peer.is_ipv4() => o,
        _ => local,
    }
}

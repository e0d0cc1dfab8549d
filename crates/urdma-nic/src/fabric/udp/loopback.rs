//! Internal loopback: datagrams between devices of one NIC (one process,
//! such as the NIC agent serving every address of the host) go from engine
//! to engine without the network, as an RNIC loops back traffic between
//! its own ports. The packets are the same RoCEv2 packets; only the UDP
//! socket, the kernel's network stack and its copies are left out.
//!
//! `URDMA_LOOPBACK=udp` turns it off (every datagram then takes the UDP
//! socket, as between hosts).

use super::UdpDriver;
use crate::engine::dma::DmaSource;
use crate::engine::Transmit;
use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The devices of this process that take datagrams internally, by address.
fn table() -> &'static Mutex<HashMap<SocketAddr, Weak<UdpDriver>>> {
    static TABLE: OnceLock<Mutex<HashMap<SocketAddr, Weak<UdpDriver>>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Whether internal loopback is on (`URDMA_LOOPBACK` is not `udp`).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::config::get().loopback.value == crate::config::Loopback::Internal)
}

/// Make `driver` reachable internally at its address.
pub(crate) fn attach(driver: &Arc<UdpDriver>) {
    if !enabled() {
        return;
    }
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    t.retain(|_, w| w.strong_count() > 0);
    for &addr in driver.gids() {
        t.insert(addr, Arc::downgrade(driver));
    }
}

/// Forget the device at `addr` (when it is `driver`, or gone).
pub fn detach(addr: SocketAddr, driver: *const UdpDriver) {
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    if t.get(&addr)
        .is_some_and(|w| w.as_ptr() == driver || w.strong_count() == 0)
    {
        t.remove(&addr);
    }
}

/// The running device of this process at `addr`, if any.
pub(crate) fn lookup(addr: SocketAddr) -> Option<Arc<UdpDriver>> {
    if !enabled() {
        return None;
    }
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&addr)
        .and_then(Weak::upgrade)
        .filter(|d| !d.is_stopped())
}

/// A flush that hands a device at least this many packets, holding at
/// least [`HANDOFF_BYTES`], leaves them to its receive thread, which takes
/// them while the sending thread goes on (the packets of many QPs, handled
/// by two threads at once). Anything less (a ping-pong, a burst of small
/// packets, a stream's next 60 KiB pieces, see
/// [`crate::engine::INTERNAL_UNIT`]) is handled at once on the sending
/// thread, which costs less than waking another.
pub(crate) const HANDOFF_PACKETS: usize = 32;

/// See [`HANDOFF_PACKETS`].
pub(crate) const HANDOFF_BYTES: usize = 128 * 1024;

/// Whether a flush of `datagrams` for another device goes to that
/// device's receive thread.
pub(crate) fn hand_off(datagrams: &[Handed]) -> bool {
    datagrams.len() >= HANDOFF_PACKETS
        && datagrams.iter().map(Handed::len).sum::<usize>() >= HANDOFF_BYTES
}

/// A datagram handed from device to device: its bytes, and its payload
/// when that stayed in the sender's region ([`crate::engine::dma`]).
pub(crate) struct Handed {
    /// The datagram (without its payload when `source` holds it).
    pub data: Vec<u8>,
    /// Where its payload is, if not in `data`.
    pub source: Option<DmaSource>,
    /// An RC READ request's buffer at the requester.
    pub sink: Option<DmaSource>,
}

impl Handed {
    /// Bytes the datagram carries, by reference or not.
    pub fn len(&self) -> usize {
        self.data.len() + self.source.as_ref().map_or(0, DmaSource::len)
    }
}

impl From<Vec<u8>> for Handed {
    fn from(data: Vec<u8>) -> Self {
        Handed {
            data,
            source: None,
            sink: None,
        }
    }
}

/// Inbox drains one thread carries out in a row before it leaves the
/// rest to the devices' receive threads.
const MAX_INLINE_DRAINS: usize = 32;

thread_local! {
    /// Devices whose inbox this thread is to drain, while it drains one
    /// (a delivery made meanwhile is queued here instead of recursing).
    static DRAINING: std::cell::RefCell<Option<std::collections::VecDeque<Arc<UdpDriver>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Datagrams were put in `target`'s inbox: handle them on this thread, as
/// a NIC's loopback path does at once, without waking another thread;
/// what this thread cannot take (another drives that engine, or it has
/// done [`MAX_INLINE_DRAINS`] already) goes to the receive threads.
pub(crate) fn run_inline(target: Arc<UdpDriver>) {
    let queued = DRAINING.with(|d| match d.borrow_mut().as_mut() {
        Some(q) => {
            if !q.iter().any(|t| Arc::ptr_eq(t, &target)) {
                q.push_back(target.clone());
            }
            true
        }
        None => false,
    });
    if queued {
        return;
    }
    DRAINING.with(|d| *d.borrow_mut() = Some(std::collections::VecDeque::from([target])));
    // Ends the drain even if a panic unwinds through it (a C caller's
    // guard catches it): what is still queued goes to the receive threads.
    struct Draining;
    impl Drop for Draining {
        fn drop(&mut self) {
            let left = DRAINING.with(|d| d.borrow_mut().take());
            for t in left.into_iter().flatten() {
                t.wake_for_inbox();
            }
        }
    }
    let _draining = Draining;
    let mut drains = 0;
    while let Some(t) = DRAINING.with(|d| d.borrow_mut().as_mut().and_then(|q| q.pop_front())) {
        if drains < MAX_INLINE_DRAINS && t.drain_inbox_here() {
            drains += 1;
        } else {
            t.wake_for_inbox();
        }
    }
}

/// Datagrams for one device of this process.
pub(crate) type Delivery = (Arc<UdpDriver>, SocketAddr, Vec<Handed>);

/// Routes of one flush held without allocating: the usual flush goes to
/// one or two peers.
type Few<T> = SmallVec<[T; 4]>;

/// One flush's datagrams, each marked with the device of this process
/// that takes it internally, if any.
pub(crate) struct Routed {
    out: Vec<Transmit>,
    /// Index into `targets` per datagram, or None for the network (held
    /// inline for a short flush, such as a small message and its ACK; a
    /// longer one allocates once).
    route: SmallVec<[Option<usize>; 8]>,
    targets: Few<Arc<UdpDriver>>,
    /// The address each of `targets` is reached at.
    target_addrs: Few<SocketAddr>,
    /// Datagrams for each of `targets`.
    counts: Few<usize>,
}

impl Routed {
    /// Route the datagrams `out` a device sends. One for the network
    /// whose payload stayed in its region gets its bytes; one whose region
    /// is gone by then is lost, as on a link.
    pub fn new(mut out: Vec<Transmit>) -> Self {
        let mut seen: Few<(SocketAddr, Option<usize>)> = SmallVec::new();
        let mut targets: Few<Arc<UdpDriver>> = SmallVec::new();
        let mut target_addrs: Few<SocketAddr> = SmallVec::new();
        let mut counts: Few<usize> = SmallVec::new();
        let mut route = |t: &Transmit| match seen.iter().find(|(a, _)| *a == t.dst) {
            Some((_, r)) => *r,
            None => {
                let r = lookup(t.dst).map(|d| {
                    targets.push(d);
                    target_addrs.push(t.dst);
                    counts.push(0);
                    targets.len() - 1
                });
                seen.push((t.dst, r));
                r
            }
        };
        let mut routes: SmallVec<[Option<usize>; 8]> = SmallVec::with_capacity(out.len());
        out.retain_mut(|t| {
            let r = route(t);
            if r.is_none() && t.assemble().is_err() {
                tracing::debug!(dst = %t.dst, "payload of a datagram no longer readable");
                return false;
            }
            routes.push(r);
            true
        });
        for i in routes.iter().flatten() {
            counts[*i] += 1;
        }
        Routed {
            out,
            route: routes,
            targets,
            target_addrs,
            counts,
        }
    }

    /// The datagrams for the network.
    pub fn external_mut(&mut self) -> impl Iterator<Item = &mut Transmit> {
        (self.out.iter_mut().zip(&self.route))
            .filter(|(_, r)| r.is_none())
            .map(|(t, _)| t)
    }

    /// Datagrams that stay inside.
    pub fn internal_count(&self) -> usize {
        self.counts.iter().sum()
    }

    /// Every datagram in the order the engine produced them, with
    /// whether it stays inside.
    pub fn all(&self) -> impl Iterator<Item = (&Transmit, bool)> {
        self.out
            .iter()
            .zip(&self.route)
            .map(|(t, r)| (t, r.is_some()))
    }

    /// The datagrams for each internal device, and those for the network.
    pub fn split(self) -> (Few<Delivery>, Vec<Transmit>) {
        let mut external = Vec::with_capacity(self.out.len() - self.internal_count());
        let mut internal: Few<Delivery> = self
            .targets
            .into_iter()
            .zip(self.target_addrs)
            .zip(self.counts)
            .map(|((d, a), n)| (d, a, Vec::with_capacity(n)))
            .collect();
        for (t, r) in self.out.into_iter().zip(self.route) {
            match r {
                Some(i) => internal[i].2.push(Handed {
                    data: t.data,
                    source: t.source,
                    sink: t.sink,
                }),
                None => external.push(t),
            }
        }
        (internal, external)
    }
}

/// Datagrams waiting for a device's receive thread: source and bytes.
#[derive(Default)]
pub(crate) struct Inbox {
    queue: Mutex<Vec<(SocketAddr, Handed)>>,
    /// Set when the queue may hold datagrams; read without the lock by
    /// the receive thread before it sleeps.
    pending: std::sync::atomic::AtomicBool,
}

impl Inbox {
    /// Queue datagrams from `src`.
    pub fn push(&self, src: SocketAddr, datagrams: impl IntoIterator<Item = Handed>) {
        use std::sync::atomic::Ordering;
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(datagrams.into_iter().map(|d| (src, d)));
        self.pending.store(true, Ordering::SeqCst);
    }

    /// Whether datagrams may be waiting.
    pub fn is_pending(&self) -> bool {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Take what waits, handing back `spare` (an earlier batch, handled)
    /// so that its allocation and its packets' buffers are reused.
    pub fn take(&self, mut spare: Vec<(SocketAddr, Handed)>) -> Vec<(SocketAddr, Handed)> {
        use std::sync::atomic::Ordering;
        crate::bufpool::give_all(spare.drain(..).map(|(_, d)| d.data));
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.pending.store(false, Ordering::SeqCst);
        std::mem::swap(&mut *q, &mut spare);
        spare
    }
}

/// `URDMA_LOOPBACK`'s meaning, as the settings read it: unset or
/// `internal` is on, `udp` is off; anything else keeps the default (on).
#[cfg(test)]
fn parse_mode(v: Option<&str>) -> bool {
    crate::config::values::loopback(v.unwrap_or(""))
        .map_or(true, |m| m == crate::config::Loopback::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names() {
        assert!(parse_mode(None));
        assert!(parse_mode(Some("internal")));
        assert!(!parse_mode(Some("udp")));
        assert!(parse_mode(Some("bogus")));
    }

    #[test]
    fn inbox_hands_over_in_order() {
        let inbox = Inbox::default();
        assert!(!inbox.is_pending());
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        inbox.push(src, [vec![1].into(), vec![2].into()]);
        inbox.push(src, [Handed::from(vec![3])]);
        assert!(inbox.is_pending());
        let got = inbox.take(Vec::new());
        assert_eq!(
            got.iter().map(|(_, d)| d.data[0]).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(!inbox.is_pending());
        assert!(inbox.take(got).is_empty());
    }
}

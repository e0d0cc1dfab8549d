//! A simulated fabric: several engines joined by a seeded, deterministic
//! packet network with a virtual clock and per-link faults.
//!
//! [`SimNet`] owns N engines (devices at `127.0.0.x:4791`; the addresses
//! are labels, nothing touches a socket), a clock in nanoseconds and a
//! queue of packets in flight. Every random choice (drops, duplicates,
//! delays, bit flips) comes from one RNG seeded at construction, and the
//! engines get seeds derived from the same seed, so one seed always gives
//! the same run: the same QP numbers, keys, packets and completions.
//!
//! The net only advances when asked: [`SimNet::step`] jumps to the next
//! event (a packet arrival or the earliest engine timer) and handles it;
//! [`SimNet::run_until`] steps until a predicate holds or a time limit;
//! [`SimNet::advance_to`] handles everything up to a time.
//!
//! ```
//! use urdma_proto::sim::{FaultConfig, SimNet};
//! let mut net = SimNet::new(7, 2);
//! net.set_default_faults(FaultConfig::lossy(0.05));
//! assert_eq!(net.device_count(), 2);
//! assert!(!net.step()); // nothing to do yet
//! ```

mod fault;
mod run;
mod stats;
mod trace;

#[cfg(test)]
mod tests;

pub use fault::FaultConfig;
pub use run::{RunOutcome, StepOutcome};
pub use stats::SimStats;
pub use trace::{describe_packet, TraceEvent, TraceKind};

use crate::engine::{Counters, Engine};
use crate::error::Result;
use crate::types::{AsyncEvent, QpType};
use crate::verbs::{connect_steps, ConnectOptions, Endpoint};
use crate::verbs::{DeviceAttr, Gid};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// One end of a connection, for [`SimNet::connect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEnd {
    /// Device index in the net.
    pub dev: usize,
    /// QP number.
    pub qpn: u32,
    /// First PSN this QP sends.
    pub psn: u32,
}

/// A datagram in flight.
#[derive(Debug)]
struct InFlight {
    at: u64,
    seq: u64,
    src: usize,
    dst: usize,
    data: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct SimDevice {
    engine: Engine,
    events: Vec<(u64, AsyncEvent)>,
}

/// N engines on a simulated, seeded, deterministic network.
pub struct SimNet {
    seed: u64,
    now: u64,
    rng: StdRng,
    devices: Vec<SimDevice>,
    by_addr: HashMap<SocketAddr, usize>,
    default_faults: FaultConfig,
    links: HashMap<(usize, usize), FaultConfig>,
    /// Latest arrival time of an in-order packet per link, keeping jitter FIFO.
    last_arrival: HashMap<(usize, usize), u64>,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    stats: SimStats,
    trace: Option<Vec<TraceEvent>>,
    max_steps: u64,
    max_in_flight: usize,
}

impl fmt::Debug for SimNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimNet")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .field("devices", &self.devices.len())
            .field("in_flight", &self.queue.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl SimNet {
    /// A net of `devices` engines at `127.0.0.1:4791`, `127.0.0.2:4791`, ...
    /// with default device attributes and perfect links, everything
    /// seeded from `seed`.
    pub fn new(seed: u64, devices: usize) -> Self {
        let mut net = SimNet {
            seed,
            now: 0,
            rng: StdRng::seed_from_u64(seed),
            devices: Vec::new(),
            by_addr: HashMap::new(),
            default_faults: FaultConfig::perfect(),
            links: HashMap::new(),
            last_arrival: HashMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            stats: SimStats::default(),
            trace: None,
            max_steps: u64::MAX,
            max_in_flight: usize::MAX,
        };
        for _ in 0..devices {
            net.add_device(DeviceAttr::default());
        }
        net
    }

    /// Add a device with limits `attr` at the next free address; returns
    /// its index.
    pub fn add_device(&mut self, attr: DeviceAttr) -> usize {
        let i = self.devices.len();
        let n = i + 1;
        // 127.0.0.1 .. 127.0.0.255, then 127.0.1.0 and onwards.
        let ip = Ipv4Addr::new(127, (n >> 16) as u8, (n >> 8) as u8, n as u8);
        let addr = SocketAddr::new(IpAddr::V4(ip), urdma_wire::ROCEV2_UDP_PORT);
        let engine_seed = crate::rng::mix(self.seed ^ crate::rng::mix(n as u64));
        let engine = Engine::new(addr, attr, Some(engine_seed));
        self.by_addr.insert(addr, i);
        self.devices.push(SimDevice {
            engine,
            events: Vec::new(),
        });
        i
    }

    /// The seed the net was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual time, ns.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of devices.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Address of device `dev`.
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn addr(&self, dev: usize) -> SocketAddr {
        self.devices[dev].engine.local()
    }

    /// The engine of device `dev`.
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn engine(&self, dev: usize) -> &Engine {
        &self.devices[dev].engine
    }

    /// The engine of device `dev`, mutably. Datagrams it produces are
    /// picked up at the next step (use [`SimNet::with_engine`] to have
    /// them queued at once).
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn engine_mut(&mut self, dev: usize) -> &mut Engine {
        &mut self.devices[dev].engine
    }

    /// Run `f` on the engine of device `dev` at the current time, then put
    /// what it sent on the network.
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn with_engine<R>(&mut self, dev: usize, f: impl FnOnce(&mut Engine, u64) -> R) -> R {
        let now = self.now;
        let r = f(&mut self.devices[dev].engine, now);
        self.collect(dev);
        r
    }

    /// Device counters of `dev`.
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn counters(&self, dev: usize) -> Counters {
        self.devices[dev].engine.counters()
    }

    /// Async events raised by `dev` so far, with their times, taken.
    ///
    /// # Panics
    /// If `dev` is not a device index of this net.
    pub fn take_events(&mut self, dev: usize) -> Vec<(u64, AsyncEvent)> {
        std::mem::take(&mut self.devices[dev].events)
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Bring `local`'s QP from RESET to RTS connected to `remote` (the
    /// sequence of the Rust API's `Qp::connect`), at the current time. Both
    /// ends use `opts.mtu` as the path MTU.
    pub fn connect(
        &mut self,
        qp_type: QpType,
        local: QpEnd,
        remote: QpEnd,
        opts: &ConnectOptions,
    ) -> Result<()> {
        let remote_addr = self.addr(remote.dev);
        let now = self.now;
        let eng = &mut self.devices[local.dev].engine;
        let peer = Endpoint {
            gid: Gid::from_ip(remote_addr.ip()),
            port: remote_addr.port(),
            qpn: remote.qpn,
            psn: remote.psn,
            mtu: opts.mtu,
        };
        for (attr, mask) in connect_steps(qp_type, &peer, local.psn, opts) {
            eng.modify_qp(now, local.qpn, &attr, mask)?;
        }
        self.collect(local.dev);
        Ok(())
    }

    /// Connect two QPs to each other ([`SimNet::connect`] both ways).
    pub fn connect_pair(
        &mut self,
        qp_type: QpType,
        a: QpEnd,
        b: QpEnd,
        opts: &ConnectOptions,
    ) -> Result<()> {
        self.connect(qp_type, a, b, opts)?;
        self.connect(qp_type, b, a, opts)
    }

    /// Take the datagrams and events device `dev` produced and put the
    /// datagrams on the network.
    fn collect(&mut self, dev: usize) {
        let Some(d) = self.devices.get_mut(dev) else {
            return;
        };
        let out: Vec<_> = d.engine.drain_tx().collect();
        let now = self.now;
        d.events
            .extend(d.engine.take_events().into_iter().map(|e| (now, e)));
        for mut t in out {
            // A simulated network carries whole datagrams.
            if t.assemble().is_ok() {
                self.transmit(dev, t.dst, t.data);
            }
        }
    }

    fn collect_all(&mut self) {
        for i in 0..self.devices.len() {
            self.collect(i);
        }
    }
}

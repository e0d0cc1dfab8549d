//! The packet trace: what the network did with every datagram, in order.

use super::SimNet;
use std::fmt;
use std::net::SocketAddr;

/// One event of the packet trace (see [`SimNet::set_trace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual time, ns.
    pub time: u64,
    /// What happened.
    pub kind: TraceKind,
    /// Sending device address.
    pub src: SocketAddr,
    /// Destination address.
    pub dst: SocketAddr,
    /// A one-line description of the packet (opcode, QP, PSN, ...).
    pub packet: String,
}

/// The kinds of [`TraceEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// An engine sent a datagram; it arrives at the given time.
    Sent {
        /// Arrival time, ns.
        arrives: u64,
    },
    /// The datagram was lost.
    Dropped,
    /// An extra copy was made, arriving at the given time.
    Duplicated {
        /// Arrival time of the copy, ns.
        arrives: u64,
    },
    /// A bit of this copy was flipped.
    Corrupted {
        /// Index of the flipped bit.
        bit: usize,
    },
    /// The datagram was handed to the destination engine.
    Delivered,
    /// No device has the destination address.
    Undeliverable,
    /// The destination device's timers ran (src = dst = that device).
    Timer,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.time;
        write!(f, "{:>6}.{:03} us ", t / 1000, t % 1000)?;
        match self.kind {
            TraceKind::Timer => return write!(f, "timer   {}", self.dst),
            TraceKind::Sent { arrives } => {
                write!(f, "send    {} -> {} (at {arrives}) ", self.src, self.dst)?
            }
            TraceKind::Dropped => write!(f, "DROP    {} -> {} ", self.src, self.dst)?,
            TraceKind::Duplicated { arrives } => {
                write!(f, "DUP     {} -> {} (at {arrives}) ", self.src, self.dst)?
            }
            TraceKind::Corrupted { bit } => {
                write!(f, "CORRUPT {} -> {} bit {bit} ", self.src, self.dst)?
            }
            TraceKind::Delivered => write!(f, "recv    {} -> {} ", self.src, self.dst)?,
            TraceKind::Undeliverable => write!(f, "NOWHERE {} -> {} ", self.src, self.dst)?,
        }
        f.write_str(&self.packet)
    }
}

/// A one-line description of a RoCEv2 datagram (the ICRC is not checked):
/// the [`Display`](std::fmt::Display) form of the parsed packet, or why it
/// does not parse.
pub fn describe_packet(data: &[u8]) -> String {
    match urdma_wire::parse_unchecked(data) {
        Ok(p) => p.to_string(),
        Err(e) => format!("<{} bytes, unparsable: {e}>", data.len()),
    }
}

impl SimNet {
    /// Record a packet trace from now on (`true`), or stop and discard it.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = if on { Some(Vec::new()) } else { None };
    }

    /// Take the trace recorded so far.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub(super) fn record(&mut self, kind: TraceKind, src: usize, dst: SocketAddr, data: &[u8]) {
        if let Some(t) = self.trace.as_mut() {
            let src = self
                .devices
                .get(src)
                .map(|d| d.engine.local())
                .unwrap_or(dst);
            t.push(TraceEvent {
                time: self.now,
                kind,
                src,
                dst,
                packet: if data.is_empty() {
                    String::new()
                } else {
                    describe_packet(data)
                },
            });
        }
    }
}

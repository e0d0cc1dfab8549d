//! Packet and error counters, per device and per QP: one table indexed by
//! [`Counter`], whose names are listed once, in [`counter_table!`].

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Index;

/// Declares [`Counter`] and its names from one list of
/// `Variant => "name", "description"` entries.
macro_rules! counter_table {
    ($($(#[$doc:meta])* $variant:ident => $name:literal),+ $(,)?) => {
        /// One counter of a device or a QP.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Counter {
            $($(#[$doc])* $variant,)+
        }

        impl Counter {
            /// Every counter, in the order they are printed.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)+];

            /// The counter's name, as `urdma stat` prints it and the
            /// published counter files store it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)+
                }
            }
        }
    };
}

counter_table! {
    /// Packets sent.
    TxPackets => "tx_packets",
    /// Bytes sent (UDP payload).
    TxBytes => "tx_bytes",
    /// Packets received and accepted by the parser.
    RxPackets => "rx_packets",
    /// Bytes received (UDP payload).
    RxBytes => "rx_bytes",
    /// Packets retransmitted.
    Retransmits => "retransmits",
    /// Retransmission timer expiries.
    Timeouts => "timeouts",
    /// PSN sequence error NAKs sent.
    SeqNaksSent => "seq_naks_sent",
    /// PSN sequence error NAKs received.
    SeqNaksReceived => "seq_naks_received",
    /// RNR NAKs sent.
    RnrNaksSent => "rnr_naks_sent",
    /// RNR NAKs received.
    RnrNaksReceived => "rnr_naks_received",
    /// Other NAKs (invalid request, access, operational) sent.
    ErrorNaksSent => "error_naks_sent",
    /// Other NAKs received.
    ErrorNaksReceived => "error_naks_received",
    /// Duplicate requests received.
    Duplicates => "duplicates",
    /// Packets dropped for a bad ICRC.
    IcrcErrors => "icrc_errors",
    /// Packets dropped for a malformed header or unknown opcode.
    HeaderErrors => "header_errors",
    /// Datagrams dropped for being larger than any packet (truncated on receipt).
    Oversized => "oversized",
    /// Packets dropped for another reason (no such QP, wrong state, wrong source, out of sequence).
    Dropped => "dropped",
    /// Packets that could not be sent (socket error).
    TxErrors => "tx_errors",
    /// Packets delivered to a device of the same NIC without the network (internal loopback).
    Loopback => "loopback_packets",
    /// Packets received with the ECN congestion-experienced mark.
    EcnMarked => "ecn_marked_packets",
    /// Congestion notification packets sent.
    CnpSent => "cnp_sent",
    /// Congestion notification packets received.
    CnpReceived => "cnp_received",
    /// Loss probes: probe timeouts on which the oldest unacknowledged and
    /// the last packet sent were resent (selective retransmission).
    Probes => "loss_probes",
    /// Out-of-sequence requests kept for later (selective retransmission).
    HeldOutOfSequence => "held_out_of_sequence",
    /// READ and atomic requests refused for exceeding the QP's
    /// `max_dest_rd_atomic` not yet answered (NAK invalid request).
    RdAtomicRefused => "rd_atomic_refused",
}

/// Number of counters.
pub(super) const COUNT: usize = Counter::ALL.len();

/// Counters in the spirit of `rdma statistic` on a software RoCE device:
/// one value per [`Counter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    values: [u64; COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters { values: [0; COUNT] }
    }
}

impl Counters {
    /// Add `n` to counter `c`.
    pub fn add(&mut self, c: Counter, n: u64) {
        let v = &mut self.values[c as usize];
        *v = v.wrapping_add(n);
    }

    /// The values in table order.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// Counters from values in table order (missing ones are 0, extra
    /// ones ignored).
    pub fn from_values(v: &[u64]) -> Self {
        let mut c = Counters::default();
        for (d, s) in c.values.iter_mut().zip(v) {
            *d = *s;
        }
        c
    }

    /// Pairs of (name, value), in table order, for printing.
    pub fn fields(&self) -> [(&'static str, u64); COUNT] {
        std::array::from_fn(|i| (Counter::ALL[i].name(), self.values[i]))
    }

    /// The counter named `name`.
    pub fn by_name(name: &str) -> Option<Counter> {
        Counter::ALL.iter().copied().find(|c| c.name() == name)
    }
}

impl Index<Counter> for Counters {
    type Output = u64;

    fn index(&self, c: Counter) -> &u64 {
        &self.values[c as usize]
    }
}

/// Stored as a map from counter name to value.
impl Serialize for Counters {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(COUNT))?;
        for (k, v) in self.fields() {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// Read from a map of names to values: unknown names are ignored and
/// missing ones are zero, so files of other versions still load.
impl<'de> Deserialize<'de> for Counters {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct CountersVisitor;
        impl<'de> Visitor<'de> for CountersVisitor {
            type Value = Counters;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of counter names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counters, A::Error> {
                let mut c = Counters::default();
                while let Some(k) = map.next_key::<String>()? {
                    match Counters::by_name(&k) {
                        Some(counter) => c.values[counter as usize] = map.next_value()?,
                        None => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(c)
            }
        }
        d.deserialize_map(CountersVisitor)
    }
}

/// Counts one event both for a QP and for its device.
pub(crate) fn count_both(qp: &mut Counters, dev: &mut Counters, c: Counter, n: u64) {
    qp.add(c, n);
    dev.add(c, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_indexes_dense() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Counters::by_name(c.name()), Some(*c));
        }
    }

    #[test]
    fn json_round_trip_tolerates_unknown_and_missing_names() {
        let mut c = Counters::default();
        c.add(Counter::Retransmits, 3);
        c.add(Counter::TxBytes, 1 << 40);
        let s = serde_json::to_string(&c).unwrap();
        assert!(s.contains("\"retransmits\":3"));
        assert_eq!(serde_json::from_str::<Counters>(&s).unwrap(), c);
        let old: Counters = serde_json::from_str(r#"{"dropped":5,"gone":1}"#).unwrap();
        assert_eq!(old[Counter::Dropped], 5);
        assert_eq!(old[Counter::Retransmits], 0);
    }

    #[test]
    fn one_increment_counts_qp_and_device() {
        let (mut q, mut d) = (Counters::default(), Counters::default());
        count_both(&mut q, &mut d, Counter::Duplicates, 2);
        assert_eq!((q[Counter::Duplicates], d[Counter::Duplicates]), (2, 2));
    }
}

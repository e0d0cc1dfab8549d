//! Packet and error counters, per device and per QP.

use serde::{Deserialize, Serialize};

/// Counters in the spirit of `rdma statistic` on a software RoCE device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payload).
    pub tx_bytes: u64,
    /// Packets received and accepted by the parser.
    pub rx_packets: u64,
    /// Bytes received (UDP payload).
    pub rx_bytes: u64,
    /// Packets retransmitted.
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// PSN sequence error NAKs received.
    pub seq_naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Other NAKs (invalid request, access, operational) sent.
    pub error_naks_sent: u64,
    /// Other NAKs received.
    pub error_naks_received: u64,
    /// Duplicate requests received.
    pub duplicates: u64,
    /// Packets dropped for a bad ICRC.
    pub icrc_errors: u64,
    /// Packets dropped for a malformed header or unknown opcode.
    pub header_errors: u64,
    /// Packets dropped for another reason (no such QP, wrong state, wrong source, out of sequence).
    pub dropped: u64,
    /// Packets that could not be sent (socket error).
    pub tx_errors: u64,
}

impl Counters {
    /// Pairs of (name, value), for printing.
    pub fn fields(&self) -> [(&'static str, u64); 17] {
        [
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("retransmits", self.retransmits),
            ("timeouts", self.timeouts),
            ("seq_naks_sent", self.seq_naks_sent),
            ("seq_naks_received", self.seq_naks_received),
            ("rnr_naks_sent", self.rnr_naks_sent),
            ("rnr_naks_received", self.rnr_naks_received),
            ("error_naks_sent", self.error_naks_sent),
            ("error_naks_received", self.error_naks_received),
            ("duplicates", self.duplicates),
            ("icrc_errors", self.icrc_errors),
            ("header_errors", self.header_errors),
            ("dropped", self.dropped),
            ("tx_errors", self.tx_errors),
        ]
    }
}

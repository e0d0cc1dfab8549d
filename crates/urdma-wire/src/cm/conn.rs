//! The messages that set up and tear down a connection (IBTA Vol 1,
//! tables 106 to 113): REQ, MRA, REJ, REP, RTU, DREQ and DREP.

use super::field::Mad;

/// Length of a REQ's private data.
pub const REQ_PRIVATE_LEN: usize = 92;
/// Length of an MRA's private data.
pub const MRA_PRIVATE_LEN: usize = 222;
/// Length of a REJ's private data.
pub const REJ_PRIVATE_LEN: usize = 148;
/// Length of a REJ's additional rejection information.
pub const REJ_ARI_LEN: usize = 72;
/// Length of a REP's private data.
pub const REP_PRIVATE_LEN: usize = 196;
/// Length of an RTU's or a DREP's private data.
pub const RTU_PRIVATE_LEN: usize = 224;
/// Length of a DREQ's private data.
pub const DREQ_PRIVATE_LEN: usize = 220;

/// Gives a message type a `Default`: the message read from an all-zero MAD.
macro_rules! zero_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t>::read(&Mad::zeroed())
            }
        }
    )*};
}
pub(super) use zero_default;

/// A path as a REQ describes it (primary or alternate). On RoCE the LIDs
/// are 0xFFFF (permissive) and the GIDs are the IP addresses, IPv4 ones
/// mapped into IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathInfo {
    /// The sender's LID.
    pub local_lid: u16,
    /// The receiver's LID.
    pub remote_lid: u16,
    /// The sender's GID.
    pub local_gid: [u8; 16],
    /// The receiver's GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Static rate code (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// The path stays in the sender's subnet.
    pub subnet_local: bool,
    /// Local ACK timeout the sender's QP uses (5 bits, 4.096 µs × 2^t).
    pub local_ack_timeout: u8,
}

impl PathInfo {
    fn read(m: &Mad, b: usize) -> Self {
        PathInfo {
            local_lid: m.u16(b),
            remote_lid: m.u16(b + 2),
            local_gid: m.bytes(b + 4),
            remote_gid: m.bytes(b + 20),
            flow_label: m.u32(b + 36) >> 12,
            packet_rate: m.bits(b + 39, 2, 6),
            traffic_class: m.u8(b + 40),
            hop_limit: m.u8(b + 41),
            sl: m.bits(b + 42, 0, 4),
            subnet_local: m.flag(b + 42, 4),
            local_ack_timeout: m.bits(b + 43, 0, 5),
        }
    }

    fn write(&self, m: &mut Mad, b: usize) {
        m.set_u16(b, self.local_lid);
        m.set_u16(b + 2, self.remote_lid);
        m.set_bytes(b + 4, &self.local_gid);
        m.set_bytes(b + 20, &self.remote_gid);
        let fl = self.flow_label & 0xF_FFFF;
        m.set_u16(b + 36, (fl >> 4) as u16);
        m.set_bits(b + 38, 0, 4, (fl & 0xF) as u8);
        m.set_bits(b + 39, 2, 6, self.packet_rate);
        m.set_u8(b + 40, self.traffic_class);
        m.set_u8(b + 41, self.hop_limit);
        m.set_bits(b + 42, 0, 4, self.sl);
        m.set_flag(b + 42, 4, self.subnet_local);
        m.set_bits(b + 43, 0, 5, self.local_ack_timeout);
    }
}

/// Connection request (table 106).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    /// The requester's communication ID.
    pub local_comm_id: u32,
    /// The service asked for (rdma_cm: port space << 16 | port).
    pub service_id: u64,
    /// The requester's CA GUID.
    pub local_ca_guid: u64,
    /// The requester QP's Q_Key (RD only).
    pub local_qkey: u32,
    /// The requester's QP number (24 bits).
    pub local_qpn: u32,
    /// RDMA READs and atomics the requester accepts at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the requester issues at once.
    pub initiator_depth: u8,
    /// How long the requester's CM may take to answer (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service: 0 RC, 1 UC, 2 RD, 3 extended (see
    /// `extended_transport`).
    pub transport: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Starting PSN (24 bits): Linux's CM advertises the PSN the
    /// requester's QP expects to receive, and the responder sends from it.
    pub starting_psn: u32,
    /// How long the responder's CM may take to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code (4 bits: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RNR retry count (3 bits, 7 = forever).
    pub rnr_retry_count: u8,
    /// How many times the CM resends the REQ (4 bits).
    pub max_cm_retries: u8,
    /// The requester's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits, 3 = XRC).
    pub extended_transport: u8,
    /// The primary path.
    pub primary: PathInfo,
    /// The alternate path (all zero when there is none).
    pub alternate: PathInfo,
    /// Private data.
    pub private_data: [u8; REQ_PRIVATE_LEN],
}

impl Req {
    pub(super) fn read(m: &Mad) -> Self {
        Req {
            local_comm_id: m.u32(24),
            service_id: m.u64(32),
            local_ca_guid: m.u64(40),
            local_qkey: m.u32(52),
            local_qpn: m.u24(56),
            responder_resources: m.u8(59),
            initiator_depth: m.u8(63),
            remote_cm_response_timeout: m.bits(67, 0, 5),
            transport: m.bits(67, 5, 2),
            flow_control: m.flag(67, 7),
            starting_psn: m.u24(68),
            local_cm_response_timeout: m.bits(71, 0, 5),
            retry_count: m.bits(71, 5, 3),
            pkey: m.u16(72),
            path_mtu: m.bits(74, 0, 4),
            rnr_retry_count: m.bits(74, 5, 3),
            max_cm_retries: m.bits(75, 0, 4),
            srq: m.flag(75, 4),
            extended_transport: m.bits(75, 5, 3),
            primary: PathInfo::read(m, 76),
            alternate: PathInfo::read(m, 120),
            private_data: m.bytes(164),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u64(32, self.service_id);
        m.set_u64(40, self.local_ca_guid);
        m.set_u32(52, self.local_qkey);
        m.set_u24(56, self.local_qpn);
        m.set_u8(59, self.responder_resources);
        m.set_u8(63, self.initiator_depth);
        m.set_bits(67, 0, 5, self.remote_cm_response_timeout);
        m.set_bits(67, 5, 2, self.transport);
        m.set_flag(67, 7, self.flow_control);
        m.set_u24(68, self.starting_psn);
        m.set_bits(71, 0, 5, self.local_cm_response_timeout);
        m.set_bits(71, 5, 3, self.retry_count);
        m.set_u16(72, self.pkey);
        m.set_bits(74, 0, 4, self.path_mtu);
        m.set_bits(74, 5, 3, self.rnr_retry_count);
        m.set_bits(75, 0, 4, self.max_cm_retries);
        m.set_flag(75, 4, self.srq);
        m.set_bits(75, 5, 3, self.extended_transport);
        self.primary.write(m, 76);
        self.alternate.write(m, 120);
        m.set_bytes(164, &self.private_data);
    }
}

/// Message receipt acknowledgement (table 107): "your message arrived,
/// the answer takes longer".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 for a REQ not yet answered).
    pub remote_comm_id: u32,
    /// Which message is acknowledged ([`super::msg_ref`], 2 bits).
    pub message_mraed: u8,
    /// How much longer the answer takes (5 bits, 4.096 µs × 2^t).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_LEN],
}

impl Mra {
    pub(super) fn read(m: &Mad) -> Self {
        Mra {
            local_comm_id: m.u32(24),
            remote_comm_id: m.u32(28),
            message_mraed: m.bits(32, 0, 2),
            service_timeout: m.bits(33, 0, 5),
            private_data: m.bytes(34),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u32(28, self.remote_comm_id);
        m.set_bits(32, 0, 2, self.message_mraed);
        m.set_bits(33, 0, 5, self.service_timeout);
        m.set_bytes(34, &self.private_data);
    }
}

/// Reject (table 108).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rej {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected ([`super::msg_ref`], 2 bits).
    pub message_rejected: u8,
    /// Bytes of `ari` that are meaningful (7 bits).
    pub rejected_info_length: u8,
    /// Why ([`super::rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_LEN],
}

impl Rej {
    pub(super) fn read(m: &Mad) -> Self {
        Rej {
            local_comm_id: m.u32(24),
            remote_comm_id: m.u32(28),
            message_rejected: m.bits(32, 0, 2),
            rejected_info_length: m.bits(33, 0, 7),
            reason: m.u16(34),
            ari: m.bytes(36),
            private_data: m.bytes(108),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u32(28, self.remote_comm_id);
        m.set_bits(32, 0, 2, self.message_rejected);
        m.set_bits(33, 0, 7, self.rejected_info_length);
        m.set_u16(34, self.reason);
        m.set_bytes(36, &self.ari);
        m.set_bytes(108, &self.private_data);
    }
}

/// Reply to a connection request (table 110).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rep {
    /// The responder's communication ID.
    pub local_comm_id: u32,
    /// The requester's communication ID.
    pub remote_comm_id: u32,
    /// The responder QP's Q_Key (RD only).
    pub local_qkey: u32,
    /// The responder's QP number (24 bits).
    pub local_qpn: u32,
    /// Starting PSN (24 bits): the PSN the responder's QP expects to
    /// receive, as in the REQ.
    pub starting_psn: u32,
    /// RDMA READs and atomics the responder accepts at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics the responder issues at once.
    pub initiator_depth: u8,
    /// The responder's ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Whether the alternate path is accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The responder's QP uses an SRQ.
    pub srq: bool,
    /// The responder's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_LEN],
}

impl Rep {
    pub(super) fn read(m: &Mad) -> Self {
        Rep {
            local_comm_id: m.u32(24),
            remote_comm_id: m.u32(28),
            local_qkey: m.u32(32),
            local_qpn: m.u24(36),
            starting_psn: m.u24(44),
            responder_resources: m.u8(48),
            initiator_depth: m.u8(49),
            target_ack_delay: m.bits(50, 0, 5),
            failover_accepted: m.bits(50, 5, 2),
            flow_control: m.flag(50, 7),
            rnr_retry_count: m.bits(51, 0, 3),
            srq: m.flag(51, 3),
            local_ca_guid: m.u64(52),
            private_data: m.bytes(60),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u32(28, self.remote_comm_id);
        m.set_u32(32, self.local_qkey);
        m.set_u24(36, self.local_qpn);
        m.set_u24(44, self.starting_psn);
        m.set_u8(48, self.responder_resources);
        m.set_u8(49, self.initiator_depth);
        m.set_bits(50, 0, 5, self.target_ack_delay);
        m.set_bits(50, 5, 2, self.failover_accepted);
        m.set_flag(50, 7, self.flow_control);
        m.set_bits(51, 0, 3, self.rnr_retry_count);
        m.set_flag(51, 3, self.srq);
        m.set_u64(52, self.local_ca_guid);
        m.set_bytes(60, &self.private_data);
    }
}

/// Ready to use (table 111).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rtu {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_LEN],
}

impl Rtu {
    pub(super) fn read(m: &Mad) -> Self {
        Rtu {
            local_comm_id: m.u32(24),
            remote_comm_id: m.u32(28),
            private_data: m.bytes(32),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u32(28, self.remote_comm_id);
        m.set_bytes(32, &self.private_data);
    }
}

/// Disconnect request (table 112).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number (24 bits): a DREQ naming another QP is
    /// dropped.
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_LEN],
}

impl Dreq {
    pub(super) fn read(m: &Mad) -> Self {
        Dreq {
            local_comm_id: m.u32(24),
            remote_comm_id: m.u32(28),
            remote_qpn: m.u24(32),
            private_data: m.bytes(36),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.local_comm_id);
        m.set_u32(28, self.remote_comm_id);
        m.set_u24(32, self.remote_qpn);
        m.set_bytes(36, &self.private_data);
    }
}

/// Reply to a disconnect request (table 113): the RTU's layout, the two
/// communication IDs and 224 bytes of private data.
pub type Drep = Rtu;

zero_default!(Req, Mra, Rej, Rep, Rtu, Dreq);

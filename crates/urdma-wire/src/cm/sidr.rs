//! Service ID resolution for UD (IBTA Vol 1, tables 119 and 120): a
//! client asks which QP and Q_Key serve a service ID.

use super::conn::zero_default;
use super::field::Mad;

/// Length of a SIDR_REQ's private data.
pub const SIDR_REQ_PRIVATE_LEN: usize = 216;
/// Length of a SIDR_REP's private data.
pub const SIDR_REP_PRIVATE_LEN: usize = 136;
/// Length of a SIDR_REP's additional information.
pub const SIDR_REP_INFO_LEN: usize = 72;

/// SIDR_REP status: the QP and Q_Key are valid.
pub const SIDR_STATUS_VALID: u8 = 0;
/// SIDR_REP status: nobody serves the service ID.
pub const SIDR_STATUS_UNSUPPORTED: u8 = 1;
/// SIDR_REP status: the consumer rejected the request.
pub const SIDR_STATUS_REJECT: u8 = 2;

/// Service ID resolution request (table 119).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReq {
    /// The requester's ID of this request.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; SIDR_REQ_PRIVATE_LEN],
}

impl SidrReq {
    pub(super) fn read(m: &Mad) -> Self {
        SidrReq {
            request_id: m.u32(24),
            pkey: m.u16(28),
            service_id: m.u64(32),
            private_data: m.bytes(40),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.request_id);
        m.set_u16(28, self.pkey);
        m.set_u64(32, self.service_id);
        m.set_bytes(40, &self.private_data);
    }
}

/// Service ID resolution response (table 120).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRep {
    /// The request's ID.
    pub request_id: u32,
    /// `SIDR_STATUS_*`.
    pub status: u8,
    /// Bytes of `info` that are meaningful.
    pub info_length: u8,
    /// The serving QP (24 bits).
    pub qpn: u32,
    /// The service ID.
    pub service_id: u64,
    /// The serving QP's Q_Key.
    pub qkey: u32,
    /// Additional information.
    pub info: [u8; SIDR_REP_INFO_LEN],
    /// Private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_LEN],
}

impl SidrRep {
    pub(super) fn read(m: &Mad) -> Self {
        SidrRep {
            request_id: m.u32(24),
            status: m.u8(28),
            info_length: m.u8(29),
            qpn: m.u24(32),
            service_id: m.u64(36),
            qkey: m.u32(44),
            info: m.bytes(48),
            private_data: m.bytes(120),
        }
    }

    pub(super) fn write(&self, m: &mut Mad) {
        m.set_u32(24, self.request_id);
        m.set_u8(28, self.status);
        m.set_u8(29, self.info_length);
        m.set_u24(32, self.qpn);
        m.set_u64(36, self.service_id);
        m.set_u32(44, self.qkey);
        m.set_bytes(48, &self.info);
        m.set_bytes(120, &self.private_data);
    }
}

zero_default!(SidrReq, SidrRep);

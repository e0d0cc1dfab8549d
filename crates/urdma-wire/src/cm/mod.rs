//! Communication management MADs (IBTA Vol 1, chapter 12), as the
//! connection manager on QP 1 sends and receives them.
//!
//! Every CM message is one 256-byte management datagram: the 24-byte
//! common MAD header (base version 1, class [`CM_CLASS`], class version
//! [`CM_CLASS_VERSION`], method Send, a transaction ID and the attribute ID
//! naming the message) followed by the message's fields and private data.
//! On RoCEv2 it travels as the payload of a UD SEND to QP 1 with the Q_Key
//! [`GSI_QKEY`] and P_Key 0xFFFF.
//!
//! [`CmMad::parse`] reads a whole MAD, [`CmMad::emit`] writes one. Fields
//! that are not modelled (reserved bits, EE contexts of RD, the RDC and SAP
//! bits) are read as nothing and written as zero, so `parse(emit(m)) == m`
//! for every message `m`. Nothing here panics on any input.
//!
//! Field offsets in the message modules are counted from the start of the
//! MAD; bit fields are numbered from the most significant bit of their
//! byte, as the IBTA tables do.

mod cma;
mod conn;
mod field;
mod sidr;

pub use cma::{CmaHeader, CMA_HEADER_LEN, CMA_VERSION};
pub use conn::{Drep, Dreq, Mra, PathInfo, Rej, Rep, Req, Rtu};
pub use conn::{
    DREQ_PRIVATE_LEN, MRA_PRIVATE_LEN, REJ_ARI_LEN, REJ_PRIVATE_LEN, REP_PRIVATE_LEN,
    REQ_PRIVATE_LEN, RTU_PRIVATE_LEN,
};
pub use sidr::{SidrRep, SidrReq};
pub use sidr::{
    SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_LEN, SIDR_REQ_PRIVATE_LEN, SIDR_STATUS_REJECT,
    SIDR_STATUS_UNSUPPORTED, SIDR_STATUS_VALID,
};

use crate::WireError;
use field::Mad;

/// Length of every management datagram.
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// MAD base version.
pub const MAD_BASE_VERSION: u8 = 1;
/// Management class of communication management.
pub const CM_CLASS: u8 = 0x07;
/// Class version of the CM messages this module reads and writes.
pub const CM_CLASS_VERSION: u8 = 2;
/// MAD method Send: every CM message is sent with it.
pub const MAD_METHOD_SEND: u8 = 0x03;
/// QP number of the general services interface (QP 1).
pub const GSI_QPN: u32 = 1;
/// Q_Key of QP 1.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Attribute IDs of the CM messages.
pub mod attr {
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a connection request.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Reply to a disconnect request.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution response.
    pub const SIDR_REP: u16 = 0x0018;
}

/// Reject reasons (IBTA Vol 1, table 109) a CM sends and reports.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// The peer's CM timed out waiting for a reply.
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// The communication ID is not valid.
    pub const INVALID_COMM_ID: u16 = 6;
    /// The communication instance is not valid.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Nobody listens on the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The transport type is not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// A connection with this QP (or this peer's communication ID) is
    /// stale: it is still in TimeWait.
    pub const STALE_CONN: u16 = 10;
    /// The path MTU is not supported.
    pub const INVALID_MTU: u16 = 26;
    /// Too few responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// The consumer rejected the request.
    pub const CONSUMER_DEFINED: u16 = 28;
    /// The RNR retry count is not valid.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// The communication ID is in use.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// The class version is not supported.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// Which message a REJ or an MRA refers to.
pub mod msg_ref {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP for an MRA; any other for a REJ).
    pub const OTHER: u8 = 2;
}

/// A CM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// Connection request.
    Req(Req),
    /// Message receipt acknowledgement.
    Mra(Mra),
    /// Reject.
    Rej(Rej),
    /// Reply.
    Rep(Rep),
    /// Ready to use.
    Rtu(Rtu),
    /// Disconnect request.
    Dreq(Dreq),
    /// Disconnect reply.
    Drep(Drep),
    /// Service ID resolution request.
    SidrReq(SidrReq),
    /// Service ID resolution response.
    SidrRep(SidrRep),
}

impl CmMessage {
    /// The attribute ID that names this message in the MAD header.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }
}

/// A CM management datagram: its transaction ID and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    /// Transaction ID. A CM keeps it across the retransmissions of a
    /// message; replies (REP, RTU, MRA, REJ, DREP, SIDR_REP) carry the TID
    /// of the message they answer.
    pub tid: u64,
    /// The message.
    pub msg: CmMessage,
}

impl CmMad {
    /// Parses a MAD. The first [`MAD_LEN`] bytes are read (a longer buffer
    /// is what a UD receive of a padded datagram gives); the header must be
    /// a CM Send of class version 2 with a known attribute ID.
    pub fn parse(buf: &[u8]) -> Result<CmMad, WireError> {
        let mad = Mad::from_slice(buf)?;
        if mad.u8(0) != MAD_BASE_VERSION || mad.u8(1) != CM_CLASS {
            return Err(WireError::NotCmMad);
        }
        if mad.u8(2) != CM_CLASS_VERSION {
            return Err(WireError::BadMadVersion(mad.u8(2)));
        }
        if mad.u8(3) != MAD_METHOD_SEND {
            return Err(WireError::NotCmMad);
        }
        let tid = mad.u64(8);
        let msg = match mad.u16(16) {
            attr::REQ => CmMessage::Req(Req::read(&mad)),
            attr::MRA => CmMessage::Mra(Mra::read(&mad)),
            attr::REJ => CmMessage::Rej(Rej::read(&mad)),
            attr::REP => CmMessage::Rep(Rep::read(&mad)),
            attr::RTU => CmMessage::Rtu(Rtu::read(&mad)),
            attr::DREQ => CmMessage::Dreq(Dreq::read(&mad)),
            attr::DREP => CmMessage::Drep(Drep::read(&mad)),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::read(&mad)),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::read(&mad)),
            other => return Err(WireError::UnknownAttribute(other)),
        };
        Ok(CmMad { tid, msg })
    }

    /// The 256 bytes of this MAD.
    pub fn emit(&self) -> [u8; MAD_LEN] {
        let mut mad = Mad::zeroed();
        mad.set_u8(0, MAD_BASE_VERSION);
        mad.set_u8(1, CM_CLASS);
        mad.set_u8(2, CM_CLASS_VERSION);
        mad.set_u8(3, MAD_METHOD_SEND);
        mad.set_u64(8, self.tid);
        mad.set_u16(16, self.msg.attr_id());
        match &self.msg {
            CmMessage::Req(m) => m.write(&mut mad),
            CmMessage::Mra(m) => m.write(&mut mad),
            CmMessage::Rej(m) => m.write(&mut mad),
            CmMessage::Rep(m) => m.write(&mut mad),
            CmMessage::Rtu(m) => m.write(&mut mad),
            CmMessage::Dreq(m) => m.write(&mut mad),
            CmMessage::Drep(m) => m.write(&mut mad),
            CmMessage::SidrReq(m) => m.write(&mut mad),
            CmMessage::SidrRep(m) => m.write(&mut mad),
        }
        mad.into_bytes()
    }
}

/// The CM's timeouts are encoded as 4.096 µs × 2^`t` (5 bits): this is
/// that time in nanoseconds, saturating for codes above 31.
pub fn timeout_nanos(t: u8) -> u64 {
    4096u64 << t.min(31)
}

/// [`timeout_nanos`] in microseconds.
pub fn timeout_micros(t: u8) -> u64 {
    timeout_nanos(t) / 1000
}

#[cfg(test)]
mod tests;

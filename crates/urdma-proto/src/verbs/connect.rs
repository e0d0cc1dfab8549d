//! Connecting a QP: what a peer needs to know ([`Endpoint`]), the choices
//! of the side that connects ([`ConnectOptions`]) and the three modify_qp
//! steps that bring a QP from RESET to RTS ([`connect_steps`]).

use super::{AddressVector, Gid, QpAttr};
use crate::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType};
use serde::{Deserialize, Serialize};

/// What a peer needs to connect to a QP, exchanged out of band (serde).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// GID of the device (its IP address).
    pub gid: Gid,
    /// UDP port of the device.
    pub port: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN the QP will send.
    pub psn: u32,
    /// Largest MTU the QP's port supports.
    pub mtu: Mtu,
}

impl Endpoint {
    /// This endpoint advertising a path MTU of at most `mtu`: what a side
    /// that wants a smaller MTU than its port's sends its peer, so that
    /// both ends, each taking the smaller of its own and the peer's,
    /// agree.
    pub fn with_mtu_at_most(self, mtu: Mtu) -> Endpoint {
        Endpoint {
            mtu: self.mtu.min(mtu),
            ..self
        }
    }
}

/// Parameters of a connection (the Rust API's `Qp::connect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Remote access allowed on this QP.
    pub access: AccessFlags,
    /// Path MTU (lowered to what both ends support).
    pub mtu: Mtu,
    /// ACK timeout code (4.096 us * 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code sent to the peer.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests issued.
    pub max_rd_atomic: u8,
    /// Incoming READ/atomic requests accepted.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            mtu: Mtu::Mtu4096,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

/// The three modify_qp steps (RESET to INIT, INIT to RTR, RTR to RTS) that
/// connect a QP of `qp_type` whose first PSN is `local_psn` to `remote`.
/// The path MTU is the smaller of `opts.mtu` and `remote.mtu`.
pub fn connect_steps(
    qp_type: QpType,
    remote: &Endpoint,
    local_psn: u32,
    opts: &ConnectOptions,
) -> [(QpAttr, QpAttrMask); 3] {
    let rc = qp_type == QpType::Rc;
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: opts.access,
        port_num: 1,
        pkey_index: 0,
        ..QpAttr::default()
    };
    let init_mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: opts.mtu.min(remote.mtu),
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        ah_attr: AddressVector {
            dgid: remote.gid,
            udp_port: remote.port,
            ..AddressVector::default()
        },
        max_dest_rd_atomic: opts.max_dest_rd_atomic,
        min_rnr_timer: opts.min_rnr_timer,
        ..init
    };
    let mut rtr_mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    if rc {
        rtr_mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    }
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: local_psn,
        timeout: opts.timeout,
        retry_cnt: opts.retry_cnt,
        rnr_retry: opts.rnr_retry,
        max_rd_atomic: opts.max_rd_atomic,
        ..rtr
    };
    let mut rts_mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if rc {
        rts_mask |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    [(init, init_mask), (rtr, rtr_mask), (rts, rts_mask)]
}

//! Queue pairs, endpoints and connection setup.

use super::cq::Cq;
use super::mr::Pd;
use super::wr::{RecvWr, SendWr};
use crate::engine::command::{CreateQp, DestroyQp, ModifyQp, PostRecv, PostSend, QueryQp};
use crate::error::{Error, Result};
use crate::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType};
use crate::verbs::{AddressVector, Gid, QpAttr, QpCap};
use serde::{Deserialize, Serialize};

/// Attributes for creating a QP.
#[derive(Clone, Debug)]
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ of send completions.
    pub send_cq: &'a Cq,
    /// CQ of receive completions.
    pub recv_cq: &'a Cq,
    /// Queue capacities.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// An RC QP with default capacities.
    pub fn rc(send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq,
            recv_cq,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

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

/// Parameters of [`Qp::connect`].
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

/// A queue pair. Dropping it destroys the QP (its queued work is discarded).
pub struct Qp {
    pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
    qpn: u32,
    qp_type: QpType,
    initial_psn: u32,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn)
            .field("qp_type", &self.qp_type)
            .finish()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let qpn = self.qpn;
        let _ = self.pd.device().call(DestroyQp { qpn });
    }
}

impl Pd {
    /// Create a QP in the RESET state.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        let pdn = self.pdn();
        let (scq, rcq) = (init.send_cq.shared.clone(), init.recv_cq.shared.clone());
        let qpn = self.device().call(CreateQp {
            pd: pdn,
            qp_type: init.qp_type,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            send_cq: scq,
            recv_cq: rcq,
            srq: None,
        })?;
        Ok(Qp {
            pd: self.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
            qpn,
            qp_type: init.qp_type,
            initial_psn: rand::random::<u32>() & urdma_wire::PSN_MASK,
        })
    }
}

impl Qp {
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// This QP's endpoint, for the peer.
    pub fn endpoint(&self) -> Endpoint {
        let dev = self.pd.device();
        Endpoint {
            // The GID of the device's own address, whatever its index.
            gid: Gid::from_ip(dev.local_addr().ip()),
            port: dev.local_addr().port(),
            qpn: self.qpn,
            psn: self.initial_psn,
            mtu: dev.port_attr().active_mtu,
        }
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let qpn = self.qpn;
        self.pd.device().call(ModifyQp {
            qpn,
            attr: *attr,
            mask,
        })
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        let qpn = self.qpn;
        self.pd.device().call(QueryQp { qpn })
    }

    /// Bring an RC or UC QP from RESET to RTS, connected to `remote`.
    pub fn connect(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        self.connect_sending_from(remote, self.initial_psn, opts)
    }

    /// As [`Qp::connect`], but the QP's first send carries `send_psn`
    /// (`remote.psn` stays the first PSN it receives). A connection the CM
    /// sets up works so: each side advertises the PSN it expects and sends
    /// from the one its peer advertised.
    pub fn connect_sending_from(
        &self,
        remote: &Endpoint,
        send_psn: u32,
        opts: &ConnectOptions,
    ) -> Result<()> {
        if self.qp_type == QpType::Ud {
            return Err(Error::inval("UD QPs are not connected"));
        }
        let remote = Endpoint {
            mtu: remote.mtu.min(self.endpoint().mtu),
            ..remote.clone()
        };
        let mut steps = connect_steps(self.qp_type, &remote, send_psn, opts);
        // The source GID is the device's entry of the peer's family (a
        // device of a real link has its link-local IPv6 GID first).
        let dev = self.pd.device();
        if let Some(i) = dev.gid_index_for(remote.gid.to_ip()) {
            steps[1].0.ah_attr.sgid_index = u8::try_from(i).unwrap_or(0);
        }
        for (attr, mask) in steps {
            self.modify(&attr, mask)?;
        }
        Ok(())
    }

    /// Post a send work request.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let qpn = self.qpn;
        let req = wr.into_request();
        self.pd.device().call(PostSend { qpn, wr: req })
    }

    /// Post a receive work request.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let qpn = self.qpn;
        let req = wr.into_request();
        self.pd.device().call(PostRecv { qpn, wr: req })
    }
}

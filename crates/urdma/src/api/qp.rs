//! Queue pairs, endpoints and connection setup.

use super::cq::Cq;
use super::mr::Pd;
use super::wr::{RecvWr, SendWr};
use crate::engine::command::{CreateQp, DestroyQp, ModifyQp, PostRecv, PostSend, QueryQp};
use crate::error::{Error, Result};
use crate::types::{QpAttrMask, QpType};
use crate::verbs::{connect_steps, ConnectOptions, Endpoint, Gid, QpAttr, QpCap};

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

//! A session's queue pairs and shared receive queues: the requests that
//! make, change, query and destroy them, and the mapping of their work
//! queues.

use super::{Session, MAX_POLLED_RINGS};
use crate::engine::command::{
    CreateQp, CreateSrq, DestroyQp, DestroySrq, ModifyQp, ModifySrq, QueryQp, QuerySrq,
};
use crate::engine::QpRings;
use crate::error::{Error, Result};
use crate::nic::devices::AgentDevice;
use crate::proto::{Request, Value};
use crate::types::QpAttrMask;
use crate::verbs::QpCap;
use crate::wq::{self, WorkRing, WorkSource};
use std::os::fd::OwnedFd;
use std::sync::Arc;

impl Session {
    /// Run a request on QPs.
    pub(super) fn run_qp(
        &mut self,
        dev: &Arc<AgentDevice>,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use crate::engine::command::Verb as V;
        use Request as R;
        let d = &dev.driver;
        Ok(match req {
            R::CreateQp {
                pd,
                qp_type,
                cap,
                sq_sig_all,
                send_cq,
                recv_cq,
                srq,
            } => {
                let (scq, rcq) = (self.cq(send_cq)?, self.cq(recv_cq)?);
                let srq = srq.map(|s| self.srq(s)).transpose()?;
                let expected = if srq.is_some() { 1 } else { 2 };
                if fds.len() != expected {
                    return Err(Error::inval("a QP's work queues are missing"));
                }
                let qpn = d.call(CreateQp {
                    pd: self.pd(pd)?,
                    qp_type,
                    cap,
                    sq_sig_all,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq,
                })?;
                // Mapped once the engine has checked the capacities.
                let rings = map_qp_rings(&cap, fds).and_then(|(rings, sq)| {
                    d.with_engine(|e, _| e.attach_rings(qpn, rings))?;
                    Ok(sq)
                });
                match rings {
                    Err(e) => {
                        let _ = d.call(DestroyQp { qpn });
                        return Err(e);
                    }
                    // Polled from the next doorbell batch on.
                    Ok(Some(sq)) => {
                        self.send_rings.insert(qpn, sq);
                        if self.send_rings.len() > MAX_POLLED_RINGS {
                            self.stop_polling();
                        }
                    }
                    Ok(None) => {}
                }
                self.qps.insert(qpn);
                dev.own(urdma_abi::proto::Object::Qp(qpn), &self.events);
                Value::Number(qpn)
            }
            R::Verb(V::ModifyQp(ModifyQp { qpn, attr, mask })) => {
                self.qp(qpn)?;
                let mask = QpAttrMask::from_bits(mask.bits())
                    .ok_or_else(|| Error::inval("unknown attribute mask bits"))?;
                let controlled = attr.qkey & crate::engine::CONTROLLED_QKEY != 0;
                if mask.contains(QpAttrMask::QKEY) && controlled && self.uid != 0 {
                    // As Linux asks CAP_NET_RAW: a controlled Q_Key (QP 1's
                    // among them) lets a QP send as the NIC's own.
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        "a controlled Q_Key (high bit set) is reserved to root",
                    )));
                }
                d.call(ModifyQp { qpn, attr, mask })?;
                Value::Done
            }
            R::Verb(V::QueryQp(QueryQp { qpn })) => {
                self.qp(qpn)?;
                Value::QpAttr(d.call(QueryQp { qpn })?)
            }
            R::Verb(V::DestroyQp(DestroyQp { qpn })) => {
                self.qp(qpn)?;
                d.call(DestroyQp { qpn })?;
                self.qps.remove(&qpn);
                self.send_rings.remove(&qpn);
                dev.disown(urdma_abi::proto::Object::Qp(qpn));
                Value::Done
            }
            _ => return Err(Error::inval("unexpected request")),
        })
    }

    /// Run a request on SRQs.
    pub(super) fn run_srq(
        &mut self,
        dev: &Arc<AgentDevice>,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use crate::engine::command::Verb as V;
        use Request as R;
        let d = &dev.driver;
        Ok(match req {
            R::Verb(V::CreateSrq(CreateSrq { pd, attr })) => {
                let pd = self.pd(pd)?;
                let fd = only_fd(fds, "an SRQ's work queue")?;
                let (srqn, got) = d.with_engine(|e, now| {
                    let n = e.call(now, CreateSrq { pd, attr })?;
                    e.call(now, QuerySrq { srqn: n }).map(|q| (n, q))
                })?;
                let ring = WorkRing::from_fd(fd, attr.max_wr, wq::recv_slot_len(attr.max_sge));
                let attached = ring
                    .map_err(Error::from)
                    .and_then(|r| d.with_engine(|e, _| e.attach_srq_ring(srqn, Arc::new(r))));
                if let Err(e) = attached {
                    let _ = d.call(DestroySrq { srqn });
                    return Err(e);
                }
                self.srqs.insert(srqn);
                dev.own(urdma_abi::proto::Object::Srq(srqn), &self.events);
                Value::Srq(srqn, got)
            }
            R::Verb(V::ModifySrq(ModifySrq {
                srqn,
                max_wr,
                limit,
            })) => {
                let srqn = self.srq(srqn)?;
                let Some(n) = max_wr else {
                    d.call(ModifySrq {
                        srqn,
                        max_wr: None,
                        limit,
                    })?;
                    return Ok(Value::Done);
                };
                // A new size comes with the ring the driver posts to from
                // now on, of the SRQ's own slot size; the engine checks
                // everything (size and limit together) before it changes
                // anything.
                let fd = only_fd(fds, "a resized SRQ's work queue")?;
                if n == 0 || n > dev.nic.attr().max_qp_wr {
                    return Err(Error::inval("SRQ size out of range"));
                }
                let sge = d.call(QuerySrq { srqn })?.max_sge;
                let ring = Arc::new(WorkRing::from_fd(fd, n, wq::recv_slot_len(sge))?);
                d.with_engine(|e, _| e.resize_srq(srqn, n, limit, Some(ring)))?;
                Value::Done
            }
            R::Verb(V::QuerySrq(QuerySrq { srqn })) => Value::SrqAttr(d.call(QuerySrq {
                srqn: self.srq(srqn)?,
            })?),
            R::Verb(V::DestroySrq(DestroySrq { srqn })) => {
                d.call(DestroySrq {
                    srqn: self.srq(srqn)?,
                })?;
                self.srqs.remove(&srqn);
                dev.disown(urdma_abi::proto::Object::Srq(srqn));
                Value::Done
            }
            _ => return Err(Error::inval("unexpected request")),
        })
    }
}

/// The one descriptor a request passed (`what` it is).
pub(super) fn only_fd(fds: &mut Vec<OwnedFd>, what: &str) -> Result<OwnedFd> {
    match (fds.pop(), fds.is_empty()) {
        (Some(fd), true) => Ok(fd),
        _ => Err(Error::inval(format!("{what} is missing"))),
    }
}

/// Map the work queues a driver made for a QP of capacities `cap`: the
/// send queue, then the receive queue unless the QP uses an SRQ. The send
/// queue comes back a second time, as the ring the session polls.
fn map_qp_rings(cap: &QpCap, fds: &mut Vec<OwnedFd>) -> Result<(QpRings, Option<Arc<WorkRing>>)> {
    let mut fds = fds.drain(..);
    let sq = fds.next().map(|fd| {
        let len = wq::send_slot_len(cap.max_send_sge, cap.max_inline_data);
        WorkRing::from_fd(fd, cap.max_send_wr, len).map(Arc::new)
    });
    let rq = fds.next().map(|fd| {
        WorkRing::from_fd(fd, cap.max_recv_wr, wq::recv_slot_len(cap.max_recv_sge)).map(Arc::new)
    });
    let sq = sq.transpose()?;
    let rings = QpRings {
        sq: sq.clone().map(|r| r as Arc<dyn WorkSource>),
        rq: rq.transpose()?.map(|r| r as Arc<dyn WorkSource>),
    };
    Ok((rings, sq))
}

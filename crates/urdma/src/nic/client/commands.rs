//! The engine commands a driver runs at the NIC, as requests to the
//! agent, and the SRQs they make and resize.

use super::{done, number, unexpected, AgentLink, QpMirror, SrqMirror};
use crate::engine::command::{AbandonQp, Command, DestroyQp, Reply};
use crate::error::{Error, Result};
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::nic::proto::{Request, Value};
use crate::types::{QpAttrMask, QpState};
use crate::wq::{self, WorkRing};
use std::os::fd::AsRawFd;
use std::sync::{Arc, RwLock};

impl AgentLink {
    /// Run an engine command at the NIC.
    pub fn execute(&self, cmd: Command) -> Result<Reply> {
        use Command as C;
        Ok(match cmd {
            C::AllocPd(_) => Reply::Number(number(self.request(&Request::AllocPd, &[])?)?),
            C::DeallocPd(c) => done(self.request(&Request::DeallocPd { pd: c.pd }, &[])?)?,
            C::AllocMw(c) => Reply::Number(number(self.request(
                &Request::AllocMw {
                    pd: c.pd,
                    kind: c.kind,
                },
                &[],
            )?)?),
            C::DeallocMw(c) => done(self.request(&Request::DeallocMw { rkey: c.rkey }, &[])?)?,
            C::RegMr(c) => {
                let Some(region) = c.mem.as_any().downcast_ref::<MemRegion>() else {
                    return Err(Error::NotSupported(
                        "memory a NIC in another process cannot reach".into(),
                    ));
                };
                let fd = region.shared_fd().map(|f| f.as_raw_fd());
                let req = Request::RegMr {
                    pd: c.pd,
                    access: c.access,
                    iova: c.iova,
                    addr: region.addr() as u64,
                    len: region.len() as u64,
                    shared: fd.is_some(),
                    rekey: c.rekey,
                };
                let key = number(self.request(&req, fd.as_slice())?)?;
                let entry = Arc::new(MrEntry::from_boxed(key, c.pd, c.access, c.iova, c.mem));
                let replaced = self
                    .mrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, entry.clone());
                // A re-registration under the key: the old memory is out
                // of reach at once, as the engine's table does it.
                if let Some(old) = replaced {
                    old.mem.invalidate();
                }
                Reply::Mr(entry)
            }
            C::DeregMr(c) => {
                self.request(&Request::DeregMr { key: c.key }, &[])?;
                let entry = self
                    .mrs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c.key)
                    .ok_or_else(|| Error::NotFound(format!("MR {:#x}", c.key)))?;
                Reply::Mr(entry)
            }
            C::CreateQp(c) => {
                let sq = WorkRing::new_shared(
                    c.cap.max_send_wr,
                    wq::send_slot_len(c.cap.max_send_sge, c.cap.max_inline_data),
                )?;
                let rq = match c.srq {
                    Some(_) => None,
                    None => Some(WorkRing::new_shared(
                        c.cap.max_recv_wr,
                        wq::recv_slot_len(c.cap.max_recv_sge),
                    )?),
                };
                let fds: Vec<_> = [sq.fd(), rq.as_ref().and_then(WorkRing::fd)]
                    .into_iter()
                    .flatten()
                    .map(|f| f.as_raw_fd())
                    .collect();
                let req = Request::CreateQp {
                    pd: c.pd,
                    qp_type: c.qp_type,
                    cap: c.cap,
                    sq_sig_all: c.sq_sig_all,
                    send_cq: c.send_cq.cqn(),
                    recv_cq: c.recv_cq.cqn(),
                    srq: c.srq,
                };
                let qpn = number(self.request(&req, &fds)?)?;
                // The NIC mapped them: the descriptors are no longer needed.
                let mut sq = sq;
                sq.close_fd();
                let rq = rq.map(|mut r| {
                    r.close_fd();
                    r
                });
                let m = QpMirror {
                    qp_type: c.qp_type,
                    cap: c.cap,
                    state: QpState::Reset,
                    max_rd_atomic: 0,
                    sq: Arc::new(sq),
                    rq: rq.map(Arc::new),
                };
                self.qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(qpn, m);
                Reply::Number(qpn)
            }
            C::ModifyQp(c) => {
                let req = Request::ModifyQp {
                    qpn: c.qpn,
                    attr: c.attr,
                    mask: c.mask.bits(),
                };
                let r = self.request(&req, &[]);
                if let Some(m) = self
                    .qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(&c.qpn)
                {
                    if r.is_ok() {
                        if c.mask.contains(QpAttrMask::STATE) {
                            m.state = c.attr.qp_state;
                        }
                        if c.mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
                            m.max_rd_atomic = c.attr.max_rd_atomic;
                        }
                    }
                }
                done(r?)?
            }
            C::QueryQp(c) => match self.request(&Request::QueryQp { qpn: c.qpn }, &[])? {
                Value::QpAttr(a) => Reply::QpAttr(a),
                v => return Err(unexpected(v)),
            },
            // A driver in a program is the owner: it only destroys.
            C::DestroyQp(DestroyQp { qpn }) | C::AbandonQp(AbandonQp { qpn }) => {
                self.request(&Request::DestroyQp { qpn }, &[])?;
                self.qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&qpn);
                Reply::Done(())
            }
            C::CqInUse(c) => match self.request(&Request::CqInUse { cqn: c.cqn }, &[])? {
                Value::Flag(f) => Reply::Flag(f),
                v => return Err(unexpected(v)),
            },
            C::CreateSrq(c) => Reply::Number(self.create_srq(c.pd, c.attr)?.0),
            C::ModifySrq(c) => {
                let req = Request::ModifySrq {
                    srqn: c.srqn,
                    max_wr: c.max_wr,
                    limit: c.limit,
                };
                match c.max_wr {
                    Some(n) => self.resize_srq(c.srqn, n, &req)?,
                    None => done(self.request(&req, &[])?)?,
                }
            }
            C::QuerySrq(c) => match self.request(&Request::QuerySrq { srqn: c.srqn }, &[])? {
                Value::SrqAttr(a) => Reply::SrqAttr(a),
                v => return Err(unexpected(v)),
            },
            C::DestroySrq(c) => {
                self.request(&Request::DestroySrq { srqn: c.srqn }, &[])?;
                self.srqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c.srqn);
                Reply::Done(())
            }
            C::PostSend(c) => {
                self.post_sends(c.qpn, vec![c.wr]).map_err(|(_, e)| e)?;
                Reply::Done(())
            }
            C::PostRecv(c) => {
                self.post_recvs(c.qpn, false, vec![c.wr])
                    .map_err(|(_, e)| e)?;
                Reply::Done(())
            }
            C::PostSrqRecv(c) => {
                self.post_recvs(c.srqn, true, vec![c.wr])
                    .map_err(|(_, e)| e)?;
                Reply::Done(())
            }
        })
    }

    /// Give SRQ `srqn` a ring of `max_wr` requests with `req` (its
    /// ModifySrq): posts wait meanwhile, then go to the new ring; the NIC
    /// takes what the old one holds first.
    fn resize_srq(&self, srqn: u32, max_wr: u32, req: &Request) -> Result<Reply> {
        let m = self
            .srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("SRQ {srqn}")))?;
        let ring = WorkRing::new_shared(max_wr, wq::recv_slot_len(m.max_sge))?;
        let fd = ring
            .fd()
            .ok_or_else(|| Error::inval("SRQ ring without a descriptor"))?
            .as_raw_fd();
        let mut cur = m.ring.write().unwrap_or_else(|e| e.into_inner());
        let reply = done(self.request(req, &[fd])?)?;
        *cur = Arc::new(ring);
        Ok(reply)
    }

    /// Create an SRQ and read back its attributes.
    pub fn create_srq(
        &self,
        pd: u32,
        attr: crate::engine::SrqAttr,
    ) -> Result<(u32, crate::engine::SrqAttr)> {
        let ring = WorkRing::new_shared(attr.max_wr, wq::recv_slot_len(attr.max_sge))?;
        let fd = ring
            .fd()
            .ok_or_else(|| Error::inval("SRQ ring without a descriptor"))?
            .as_raw_fd();
        match self.request(&Request::CreateSrq { pd, attr }, &[fd])? {
            Value::Srq(n, a) => {
                let m = SrqMirror {
                    max_sge: a.max_sge,
                    ring: Arc::new(RwLock::new(Arc::new(ring))),
                };
                self.srqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(n, m);
                Ok((n, a))
            }
            v => Err(unexpected(v)),
        }
    }
}

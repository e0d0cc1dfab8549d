//! The engine commands a driver runs at the NIC, as requests to the
//! agent, and the SRQs they make and resize.

use super::{number, unexpected, AgentLink, QpMirror, SrqMirror};
use crate::engine::command::{
    AbandonQp, Command, CreateSrq, DeregMr, DestroyQp, ModifySrq, Reply, Verb,
};
use crate::error::{Error, Result};
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::nic::proto::{Request, Value};
use crate::types::{QpAttrMask, QpState};
use crate::wq::{self, WorkRing};
use std::os::fd::AsRawFd;
use std::sync::{Arc, RwLock};

impl AgentLink {
    /// Run a command that is plain data at the NIC, as it is, and take
    /// its answer.
    fn verb(&self, v: Verb, fds: &[std::os::fd::RawFd]) -> Result<Reply> {
        Ok(match self.request(&Request::Verb(v), fds)? {
            Value::Number(n) => Reply::Number(n),
            Value::Done => Reply::Done(()),
            Value::QpAttr(a) => Reply::QpAttr(a),
            Value::SrqAttr(a) => Reply::SrqAttr(a),
            Value::Flag(f) => Reply::Flag(f),
            v => return Err(unexpected(v)),
        })
    }

    /// Run an engine command at the NIC. Plain-data commands go as they
    /// are ([`Verb`]); those that hold this process's memory, CQs or
    /// work requests, or change what the driver mirrors, go their own
    /// ways.
    pub fn execute(&self, cmd: Command) -> Result<Reply> {
        use Command as C;
        Ok(match cmd {
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
                self.verb(Verb::DeregMr(DeregMr { key: c.key }), &[])?;
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
                let r = self.verb(Verb::ModifyQp(c.clone()), &[]);
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
                r?
            }
            // A driver in a program is the owner: it only destroys.
            C::DestroyQp(DestroyQp { qpn }) | C::AbandonQp(AbandonQp { qpn }) => {
                self.verb(Verb::DestroyQp(DestroyQp { qpn }), &[])?;
                self.qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&qpn);
                Reply::Done(())
            }
            C::CreateSrq(c) => Reply::Number(self.create_srq(c.pd, c.attr)?.0),
            C::ModifySrq(c) => match c.max_wr {
                Some(n) => self.resize_srq(n, c)?,
                None => self.verb(Verb::ModifySrq(c), &[])?,
            },
            C::DestroySrq(c) => {
                let srqn = c.srqn;
                self.verb(Verb::DestroySrq(c), &[])?;
                self.srqs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&srqn);
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
            // The driver's own commands: it destroys (above), never abandons.
            other => match other.into_verb() {
                Ok(v) => self.verb(v, &[])?,
                Err(c) => return Err(Error::NotSupported(format!("{c:?} at the NIC agent"))),
            },
        })
    }

    /// Give SRQ `c.srqn` a ring of `max_wr` requests with `c` (its
    /// ModifySrq): posts wait meanwhile, then go to the new ring; the NIC
    /// takes what the old one holds first.
    fn resize_srq(&self, max_wr: u32, c: ModifySrq) -> Result<Reply> {
        let srqn = c.srqn;
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
        let reply = self.verb(Verb::ModifySrq(c), &[fd])?;
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
        match self.request(
            &Request::Verb(Verb::CreateSrq(CreateSrq { pd, attr })),
            &[fd],
        )? {
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

//! A session's protection domains, memory regions and windows, and
//! completion queues: the requests that make, bind and free them.

use super::{not_found, Session, MAX_RESERVED_CQS};
use crate::cq::{CqShared, Ring};
use crate::engine::command::{AllocMw, AllocPd, CqInUse, DeallocMw, DeallocPd, DeregMr, RegMr};
use crate::engine::mw;
use crate::error::{Error, Result};
use crate::mem::MemRegion;
use crate::nic::devices::AgentDevice;
use crate::proto::{Event, Request, Value};
use std::os::fd::OwnedFd;
use std::sync::Arc;

impl Session {
    /// Run a request on PDs, MRs or memory windows.
    pub(super) fn run_memory(
        &mut self,
        dev: &Arc<AgentDevice>,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use crate::engine::command::Verb as V;
        use Request as R;
        let d = &dev.driver;
        Ok(match req {
            R::Verb(V::AllocPd(_)) => {
                let pd = d.call(AllocPd {})?;
                self.pds.insert(pd);
                Value::Number(pd)
            }
            R::Verb(V::DeallocPd(DeallocPd { pd })) => {
                d.call(DeallocPd { pd: self.pd(pd)? })?;
                self.pds.remove(&pd);
                Value::Done
            }
            R::RegMr {
                pd,
                access,
                iova,
                addr,
                len,
                shared,
                rekey,
            } => {
                if let Some(k) = rekey {
                    if !self.mrs.contains_key(&k) {
                        return Err(not_found("MR", k));
                    }
                }
                let len = usize::try_from(len).map_err(|_| Error::inval("MR too large"))?;
                let mem = if shared {
                    let fd = fds.pop().ok_or_else(|| Error::inval("MR memory missing"))?;
                    MemRegion::in_mapping(crate::shm::SharedMapping::from_fd(fd, len)?)
                } else {
                    MemRegion::in_process(self.mem.clone(), addr, len)
                        .ok_or_else(|| Error::inval("MR wraps the address space"))?
                };
                let entry = d.call(RegMr {
                    pd: self.pd(pd)?,
                    access,
                    iova,
                    mem: Box::new(mem),
                    rekey,
                })?;
                let key = entry.lkey;
                self.mrs.insert(key, entry);
                Value::Number(key)
            }
            R::Verb(V::AllocMw(AllocMw { pd, kind })) => {
                let rkey = d.call(AllocMw {
                    pd: self.pd(pd)?,
                    kind,
                })?;
                self.mws.insert(mw::index_of(rkey));
                Value::Number(rkey)
            }
            R::Verb(V::DeallocMw(DeallocMw { rkey })) => {
                if !self.mws.contains(&mw::index_of(rkey)) {
                    return Err(not_found("memory window", rkey));
                }
                d.call(DeallocMw { rkey })?;
                self.mws.remove(&mw::index_of(rkey));
                Value::Done
            }
            R::Verb(V::DeregMr(DeregMr { key })) => {
                if !self.mrs.contains_key(&key) {
                    return Err(not_found("MR", key));
                }
                d.call(DeregMr { key })?;
                self.mrs.remove(&key);
                Value::Done
            }
            _ => return Err(Error::inval("unexpected request")),
        })
    }

    /// Run a request on CQs (or one binding a QP or SRQ to the kernel).
    pub(super) fn run_cq(
        &mut self,
        dev: &Arc<AgentDevice>,
        req: Request,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<Value> {
        use crate::engine::command::Verb as V;
        use Request as R;
        let d = &dev.driver;
        Ok(match req {
            R::ReserveCq => {
                if self.reserved_cqs.len() >= MAX_RESERVED_CQS {
                    return Err(Error::Exhausted("CQ numbers reserved and not used".into()));
                }
                let cqn = dev.reserve_cqn();
                self.reserved_cqs.insert(cqn);
                Value::Number(cqn)
            }
            R::CreateCq { cqn, capacity } => {
                // A ring holds one entry more than its CQ's capacity.
                if capacity < 2 || capacity > dev.nic.attr().max_cqe + 1 {
                    return Err(Error::inval("CQ capacity out of range"));
                }
                if !self.reserved_cqs.remove(&cqn) {
                    return Err(not_found("reserved CQ", cqn));
                }
                let fd = fds.pop().ok_or_else(|| Error::inval("CQ ring missing"))?;
                let cq = Arc::new(CqShared::from_fd(cqn, capacity as usize, fd)?);
                let sink = self.events.clone();
                cq.set_notifier(Some(Box::new(move || sink.send(&Event::CqFired(cqn)))));
                dev.own(urdma_abi::proto::Object::Cq(cqn), &self.events);
                self.cqs.insert(cqn, cq);
                Value::Number(cqn)
            }
            R::BindCq { cqn, kernel } => {
                let cq = self.cq(cqn)?;
                let notify = crate::kernel::cq_notifier(kernel.clone(), self.pid)
                    .map_err(|e| Error::NotSupported(format!("kernel completion events: {e}")))?;
                cq.set_notifier(Some(notify));
                dev.route_to_kernel(urdma_abi::proto::Object::Cq(cqn), kernel, self.pid);
                Value::Done
            }
            R::BindQp { qpn, kernel } => {
                self.qp(qpn)?;
                self.route_to_kernel(dev, urdma_abi::proto::Object::Qp(qpn), kernel)?
            }
            R::BindSrq { srqn, kernel } => {
                self.srq(srqn)?;
                self.route_to_kernel(dev, urdma_abi::proto::Object::Srq(srqn), kernel)?
            }
            R::ResizeCq { cqn, capacity } => {
                if capacity < 2 || capacity > dev.nic.attr().max_cqe + 1 {
                    return Err(Error::inval("CQ capacity out of range"));
                }
                let cq = self.cq(cqn)?;
                let fd = fds.pop().ok_or_else(|| Error::inval("CQ ring missing"))?;
                cq.replace_ring(Ring::from_fd(capacity as usize, fd)?, false)?;
                Value::Done
            }
            R::DestroyCq { cqn } => {
                let cq = self.cq(cqn)?;
                if d.call(CqInUse { cqn })? {
                    return Err(Error::Busy(format!("CQ {cqn} has QPs")));
                }
                cq.set_notifier(None);
                self.cqs.remove(&cqn);
                dev.disown(urdma_abi::proto::Object::Cq(cqn));
                Value::Done
            }
            R::Verb(V::CqInUse(CqInUse { cqn })) => {
                self.cq(cqn)?;
                Value::Flag(d.call(CqInUse { cqn })?)
            }
            _ => return Err(Error::inval("unexpected request")),
        })
    }
}

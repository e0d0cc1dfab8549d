//! A session's calls on the device's connection manager, confined to its
//! own connections, services and QPs.

use super::{not_found, Session};
use crate::cm::CmOp;
use crate::error::{Error, Result};

impl Session {
    /// A call on the device's CM, for connections and services of this
    /// session and with its own QPs only.
    pub(super) fn cm(&mut self, op: CmOp) -> Result<Option<u32>> {
        let dev = self.device()?.clone();
        match &op {
            CmOp::Connect(p) => {
                self.qp(p.qpn)?;
            }
            CmOp::Accept { params, .. } => {
                self.qp(params.qpn)?;
            }
            CmOp::AnswerResolve { qpn, .. } => {
                self.qp(*qpn)?;
            }
            _ => {}
        }
        let routes = || dev.cm_routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = op.conn() {
            if routes().owner(id) != Some(self.id) {
                return Err(not_found("connection", id));
            }
        }
        match op {
            CmOp::Listen { service_id } => {
                // Routed first, so that a request right after is not lost.
                if !routes().listen(service_id, self.id, &self.events) {
                    return Err(Error::Busy(format!(
                        "service {service_id:#x} has a listener"
                    )));
                }
                let r = dev.driver.cm(op);
                if r.is_err() {
                    routes().unlisten(service_id, self.id);
                }
                r
            }
            CmOp::Unlisten { service_id } => {
                if routes().listener(service_id) != Some(self.id) {
                    return Err(Error::NotFound(format!("listener {service_id:#x}")));
                }
                // The CM first: a request meanwhile still finds its route.
                let r = dev.driver.cm(op);
                routes().unlisten(service_id, self.id);
                r
            }
            op => {
                let gone = match &op {
                    CmOp::Reject { id, .. }
                    | CmOp::Destroy { id }
                    | CmOp::AnswerResolve { id, .. } => Some(*id),
                    _ => None,
                };
                let r = dev.driver.cm(op)?;
                if let Some(id) = r {
                    routes().claim(id, self.id, &self.events);
                }
                if let Some(id) = gone {
                    routes().forget(id);
                }
                Ok(r)
            }
        }
    }
}

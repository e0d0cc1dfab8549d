//! Which session a device's CM events go to: the owner of the connection,
//! or for a new connection request the session listening on its service.

use super::proto::Event;
use super::session::EventSink;
use crate::cm::{CmEvent, ConnId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

/// Events of connections no session claimed yet, kept at most.
const MAX_UNCLAIMED: usize = 64;

type Owner = (u64, Weak<EventSink>);

/// The owners of one device's CM connections and listeners.
#[derive(Default)]
pub struct CmRoutes {
    conns: HashMap<ConnId, Owner>,
    listeners: HashMap<u64, Owner>,
    /// Events that came before their connection was claimed (a REJ that
    /// overtakes the answer to the connect).
    unclaimed: VecDeque<CmEvent>,
}

impl CmRoutes {
    /// The session that owns connection `id`.
    pub fn owner(&self, id: ConnId) -> Option<u64> {
        self.conns.get(&id).map(|o| o.0)
    }

    /// The session listening on `service_id`.
    pub fn listener(&self, service_id: u64) -> Option<u64> {
        self.listeners.get(&service_id).map(|o| o.0)
    }

    /// Session `session` listens on `service_id`.
    pub fn listen(&mut self, service_id: u64, session: u64, sink: &Arc<EventSink>) {
        self.listeners
            .insert(service_id, (session, Arc::downgrade(sink)));
        let parked: Vec<CmEvent> = self.unclaimed.drain(..).collect();
        for ev in parked {
            self.route(ev);
        }
    }

    /// Nobody listens on `service_id` any more.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    /// Connection `id` belongs to `session`; events that came before are
    /// delivered now.
    pub fn claim(&mut self, id: ConnId, session: u64, sink: &Arc<EventSink>) {
        self.conns.insert(id, (session, Arc::downgrade(sink)));
        let (mine, rest): (Vec<CmEvent>, Vec<CmEvent>) =
            self.unclaimed.drain(..).partition(|ev| ev.id() == id);
        self.unclaimed.extend(rest);
        for ev in mine {
            self.route(ev);
        }
    }

    /// Forget what `session` owns; answers its connections and services.
    pub fn release(&mut self, session: u64) -> (Vec<ConnId>, Vec<u64>) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, o)| o.0 == session)
            .map(|(&id, _)| id)
            .collect();
        for id in &conns {
            self.conns.remove(id);
        }
        let services: Vec<u64> = self
            .listeners
            .iter()
            .filter(|(_, o)| o.0 == session)
            .map(|(&s, _)| s)
            .collect();
        for s in &services {
            self.listeners.remove(s);
        }
        (conns, services)
    }

    /// Deliver an event to its session.
    pub fn route(&mut self, ev: CmEvent) {
        let id = ev.id();
        if let CmEvent::ConnectRequest { req, .. } = &ev {
            if let Some(owner) = self.listeners.get(&req.service_id).cloned() {
                self.conns.insert(id, owner);
            }
        }
        let Some((_, sink)) = self.conns.get(&id) else {
            if self.unclaimed.len() >= MAX_UNCLAIMED {
                self.unclaimed.pop_front();
            }
            self.unclaimed.push_back(ev);
            return;
        };
        if let Some(s) = sink.upgrade() {
            s.send(&Event::Cm(ev.clone()));
        }
        // The CM forgot the connection: so do the routes.
        if matches!(
            ev,
            CmEvent::Rejected { .. } | CmEvent::Unreachable { .. } | CmEvent::TimewaitExit { .. }
        ) {
            self.conns.remove(&id);
        }
    }
}

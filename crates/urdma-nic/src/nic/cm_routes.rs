//! Which session a device's CM events go to: the owner of the connection,
//! or for a new connection request the session listening on its service.

use super::event_sink::EventSink;
use super::proto::Event;
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

    /// Session `session` listens on `service_id`, unless another does:
    /// false then.
    pub fn listen(&mut self, service_id: u64, session: u64, sink: &Arc<EventSink>) -> bool {
        match self.listeners.get(&service_id) {
            Some(o) if o.0 != session => return false,
            _ => {}
        }
        self.listeners
            .insert(service_id, (session, Arc::downgrade(sink)));
        let parked: Vec<CmEvent> = self.unclaimed.drain(..).collect();
        for ev in parked {
            self.route(ev);
        }
        true
    }

    /// `session` no longer listens on `service_id`.
    pub fn unlisten(&mut self, service_id: u64, session: u64) {
        if self.listener(service_id) == Some(session) {
            self.listeners.remove(&service_id);
        }
    }

    /// Connection `id` is gone from the CM without an event (rejected or
    /// destroyed by its owner).
    pub fn forget(&mut self, id: ConnId) {
        self.conns.remove(&id);
    }

    /// The services `session` listens on.
    pub fn services_of(&self, session: u64) -> Vec<u64> {
        owned_by(&self.listeners, session)
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

    /// Forget what `session` owns; answers its connections.
    pub fn release(&mut self, session: u64) -> Vec<ConnId> {
        let conns = owned_by(&self.conns, session);
        for id in &conns {
            self.conns.remove(id);
        }
        self.listeners.retain(|_, o| o.0 != session);
        conns
    }

    /// Deliver an event to its session.
    pub fn route(&mut self, ev: CmEvent) {
        let id = ev.id();
        let requested = match &ev {
            CmEvent::ConnectRequest { req, .. } => Some(req.service_id),
            CmEvent::ServiceRequest { req, .. } => Some(req.service_id),
            _ => None,
        };
        if let Some(owner) = requested.and_then(|s| self.listeners.get(&s).cloned()) {
            self.conns.insert(id, owner);
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
            CmEvent::Rejected { .. }
                | CmEvent::Unreachable { .. }
                | CmEvent::TimewaitExit { .. }
                | CmEvent::ServiceReply { .. }
        ) {
            self.conns.remove(&id);
        }
    }
}

/// The keys of `map` that `session` owns, in order.
fn owned_by<K: Copy + Ord>(map: &HashMap<K, Owner>, session: u64) -> Vec<K> {
    let mut keys: Vec<K> = map
        .iter()
        .filter(|(_, o)| o.0 == session)
        .map(|(&k, _)| k)
        .collect();
    keys.sort_unstable();
    keys
}

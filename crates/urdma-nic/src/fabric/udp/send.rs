//! The send path of a UDP device: handing on what the engine produced
//! (events, datagrams for the network, for other devices in this process
//! and for the kernel's QP 1) and rearming the receive thread's timer.

use super::{Engine, GsiDatagram, Routed, TimerOnDrop, UdpDriver};
use crate::engine::dma::whole;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

impl UdpDriver {
    /// Hand on what the engine produced at engine time `now`: queue its
    /// events, release the engine, send the datagrams (in engine order,
    /// see `send_order`) and rearm the receive thread's timer.
    pub(super) fn flush(&self, mut eng: MutexGuard<'_, Engine>, now: u64) {
        let out: Vec<_> = eng.drain_tx().collect();
        let for_kernel = eng.take_kernel_gsi();
        self.events.push(eng.take_events());
        self.cm_events.push(eng.take_cm_events());
        // A deadline nearer than the receive thread's sleep: one due now
        // (a ring to look at again) wakes the thread at once; a later one
        // sets the thread's timer when this flush ends, once the datagrams
        // are on their way (a system call a message need not wait for).
        let deadline = eng.next_deadline();
        let armed = self.wake.sleeping_until.load(Ordering::Acquire);
        let nearer = deadline.filter(|&d| d < armed);
        // A timer set for a deadline that is gone (a message's timers,
        // stopped by its acknowledgement) would wake the sleeping thread
        // for nothing, a context switch per message of a ping-pong: it is
        // taken back, and the thread sleeps until its own deadline.
        let own = self.wake.own_wake.load(Ordering::Acquire);
        let gone = deadline.is_none() && armed != 0 && armed < own;
        let retimed = nearer.or(gone.then_some(own));
        if let Some(d) = retimed {
            self.wake.sleeping_until.store(d, Ordering::Release);
        }
        let _timer = match nearer {
            Some(d) if d <= now => {
                self.wake.alarm.wake();
                TimerOnDrop(self, None)
            }
            _ => TimerOnDrop(self, retimed),
        };
        if out.is_empty() {
            drop(eng);
            self.to_kernel_gsi(for_kernel);
            self.take_own_inbox();
            return;
        }
        let mut routed = Routed::new(out);
        let internal = routed.internal_count();
        if internal > 0 {
            eng.count_loopback(internal as u64);
        }
        let sending = self.send_order.lock().unwrap_or_else(|e| e.into_inner());
        drop(eng);
        // With the engine free; before the capture records them.
        self.seal_for_network(routed.external_mut());
        use std::os::fd::AsRawFd;
        // Recorded before sending, so that no answer precedes its request
        // in the capture. A program may exit without closing its device:
        // each batch reaches the file at once.
        self.captures.each(|cap| {
            for (t, internal) in routed.all() {
                let src = self.local_for(t.dst);
                if !internal {
                    cap.record(src, t.dst, &t.data);
                } else if let Some(whole) = whole(&t.data, t.source.as_ref()) {
                    cap.record_internal(src, t.dst, &whole);
                }
            }
            cap.flush();
        });
        let (internal, external) = routed.split();
        // Queued in engine order, taken (below) with nothing held.
        let mut targets: smallvec::SmallVec<[_; 4]> = smallvec::SmallVec::new();
        for (target, to, datagrams) in internal {
            // Never to this device itself: its inbox is drained below.
            let many =
                super::loopback::hand_off(&datagrams) && !std::ptr::eq(Arc::as_ptr(&target), self);
            target.inbox.push(self.local_for(to), datagrams);
            targets.push((target, many));
        }
        let mut external = external;
        let mut failed = 0;
        if self.second.is_some()
            && external
                .iter()
                .any(|t| t.dst.is_ipv4() != self.local.is_ipv4())
        {
            // Each family through its own socket.
            let (mut other, mut same): (Vec<_>, Vec<_>) = external
                .into_iter()
                .partition(|t| t.dst.is_ipv4() != self.local.is_ipv4());
            let s = self.socket_for(other[0].dst);
            failed += super::super::batch::send_all(s.as_raw_fd(), &mut other);
            failed += super::super::batch::send_all(self.socket.as_raw_fd(), &mut same);
            same.append(&mut other);
            external = same;
        } else {
            failed = super::super::batch::send_all(self.socket.as_raw_fd(), &mut external);
        }
        drop(sending);
        crate::bufpool::give_all(external.into_iter().map(|t| t.data));
        for (target, many) in targets {
            if many {
                target.wake_for_inbox();
            } else {
                super::loopback::run_inline(target);
            }
        }
        self.take_own_inbox();
        self.to_kernel_gsi(for_kernel);
        if failed > 0 {
            tracing::debug!(failed, "datagrams not sent");
            self.lock().count_tx_errors(failed as u64);
        }
    }

    /// Give an ICRC to datagrams that were closed without one for a peer
    /// inside this process (RC and UC QPs whose peer was internal when
    /// they were connected) but go to the network: that device has
    /// stopped and another process may hold its address now. A zero
    /// field is what such a datagram carries; a sealed one whose ICRC
    /// happens to be zero is sealed again to the same value.
    fn seal_for_network<'a>(
        &self,
        external: impl Iterator<Item = &'a mut crate::engine::Transmit>,
    ) {
        for t in external {
            if t.data.ends_with(&[0; urdma_wire::ICRC_LEN]) {
                let ctx = urdma_wire::IcrcContext::new(self.local_for(t.dst), t.dst);
                if let Err(e) = urdma_wire::reseal(&mut t.data, &ctx) {
                    tracing::debug!(dst = %t.dst, error = %e, "cannot seal a datagram");
                }
            }
        }
    }

    /// Set the receive thread's timer for deadline `d` (engine time),
    /// unless the thread no longer sleeps until `d`: a nearer deadline
    /// came since (whose flush sets the timer) or the thread woke and
    /// times its own sleep. The deadline the thread's own sleep ends at
    /// needs no timer: it is stopped instead.
    pub(super) fn arm_alarm(&self, d: Option<u64>) {
        let Some(d) = d else { return };
        let _arming = self.wake.arming.lock().unwrap_or_else(|e| e.into_inner());
        if self.wake.sleeping_until.load(Ordering::Acquire) != d {
            return;
        }
        if d == self.wake.own_wake.load(Ordering::Acquire) {
            self.wake.alarm.stop_timer();
        } else {
            let after = d.saturating_sub(self.now());
            self.wake.alarm.wake_after(Duration::from_nanos(after));
        }
    }

    /// Hand datagrams to the kernel's QP 1.
    fn to_kernel_gsi(&self, datagrams: Vec<GsiDatagram>) {
        if datagrams.is_empty() {
            return;
        }
        if let Some(sink) = self
            .kernel_gsi_sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            sink(datagrams);
        }
    }
}

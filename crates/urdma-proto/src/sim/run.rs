//! Advancing the virtual clock: one event at a time, until a predicate
//! holds, or up to a time.

use super::stats::digest;
use super::trace::TraceKind;
use super::SimNet;
use std::cmp::Reverse;

/// Why [`SimNet::run_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The predicate holds.
    Satisfied,
    /// The next event lies after the time limit; the clock stands at the limit.
    TimeLimit,
    /// Nothing is left to happen: no packet in flight, no timer armed.
    Idle,
    /// The step budget ([`SimNet::set_max_steps`]) ran out.
    StepLimit,
    /// More datagrams were in flight than [`SimNet::set_max_in_flight`]
    /// allows (a packet storm).
    Flooded {
        /// Datagrams in flight.
        in_flight: usize,
    },
    /// An engine still reports a due deadline after handling its timers,
    /// so time cannot advance (a livelock in the engine).
    Stuck {
        /// The device whose timer stays due.
        device: usize,
        /// The deadline it keeps reporting.
        deadline: u64,
    },
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// A datagram was handed to a device.
    Delivered,
    /// Timers of one or more devices were run.
    Timers,
    /// Nothing was pending.
    Idle,
    /// A device's deadline stayed due after its timers ran.
    Stuck {
        /// The device.
        device: usize,
        /// Its deadline.
        deadline: u64,
    },
}

impl SimNet {
    /// Stop [`SimNet::run_until`] after this many steps (per call).
    pub fn set_max_steps(&mut self, max: u64) {
        self.max_steps = max;
    }

    /// Stop [`SimNet::run_until`] when more than `max` datagrams are in
    /// flight.
    pub fn set_max_in_flight(&mut self, max: usize) {
        self.max_in_flight = max;
    }

    /// The earliest engine deadline, if any.
    fn next_timer(&self) -> Option<u64> {
        self.devices
            .iter()
            .filter_map(|d| d.engine.next_deadline())
            .min()
    }

    /// Time of the next event (packet arrival or timer), if any. Datagrams
    /// the engines queued outside [`SimNet::with_engine`] are not counted
    /// until the next step picks them up.
    pub fn next_event_time(&self) -> Option<u64> {
        let pkt = self.queue.peek().map(|r| r.0.at);
        match (pkt, self.next_timer()) {
            (Some(p), Some(t)) => Some(p.min(t)),
            (p, t) => p.or(t),
        }
    }

    /// Advance the clock to the next event and handle it: deliver the
    /// earliest datagram, or run the timers of every device whose deadline
    /// is due (a datagram arriving at the same time as a deadline goes
    /// first). Returns false if nothing was pending.
    pub fn step(&mut self) -> bool {
        !matches!(self.step_detailed(), StepOutcome::Idle)
    }

    /// [`SimNet::step`], saying what it did.
    pub fn step_detailed(&mut self) -> StepOutcome {
        self.collect_all();
        let pkt = self.queue.peek().map(|r| r.0.at);
        let timer = self.next_timer();
        let deliver = match (pkt, timer) {
            (None, None) => return StepOutcome::Idle,
            (Some(p), Some(t)) => p <= t,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        self.stats.steps += 1;
        if deliver {
            let Some(Reverse(p)) = self.queue.pop() else {
                return StepOutcome::Idle;
            };
            self.now = self.now.max(p.at);
            let src_addr = self.addr(p.src);
            let dst_addr = self.addr(p.dst);
            self.stats.delivered += 1;
            self.stats.digest = digest(self.stats.digest, &p);
            if self.trace.is_some() {
                self.record(TraceKind::Delivered, p.src, dst_addr, &p.data);
            }
            let now = self.now;
            if let Some(d) = self.devices.get_mut(p.dst) {
                d.engine.handle_datagram(now, src_addr, &p.data);
            }
            self.collect(p.dst);
            StepOutcome::Delivered
        } else {
            let Some(t) = timer else {
                return StepOutcome::Idle;
            };
            self.now = self.now.max(t);
            let now = self.now;
            let mut stuck = None;
            for i in 0..self.devices.len() {
                let due = self.devices[i].engine.next_deadline();
                if !matches!(due, Some(d) if d <= now) {
                    continue;
                }
                self.stats.timer_events += 1;
                if self.trace.is_some() {
                    let a = self.addr(i);
                    self.record(TraceKind::Timer, i, a, &[]);
                }
                self.devices[i].engine.handle_timeouts(now);
                self.collect(i);
                if let Some(d) = self.devices[i].engine.next_deadline() {
                    if d <= now && stuck.is_none() {
                        stuck = Some((i, d));
                    }
                }
            }
            match stuck {
                Some((device, deadline)) => StepOutcome::Stuck { device, deadline },
                None => StepOutcome::Timers,
            }
        }
    }

    /// Step until `pred` holds, or the next event would come after
    /// `time_limit` (absolute virtual time, ns), or nothing is left to do.
    /// The predicate is checked before every step.
    pub fn run_until(
        &mut self,
        mut pred: impl FnMut(&SimNet) -> bool,
        time_limit: u64,
    ) -> RunOutcome {
        let mut steps = 0u64;
        loop {
            if pred(self) {
                return RunOutcome::Satisfied;
            }
            self.collect_all();
            match self.next_event_time() {
                None => return RunOutcome::Idle,
                Some(t) if t > time_limit => {
                    self.now = self.now.max(time_limit);
                    return RunOutcome::TimeLimit;
                }
                Some(_) => {}
            }
            if steps >= self.max_steps {
                return RunOutcome::StepLimit;
            }
            if self.queue.len() > self.max_in_flight {
                return RunOutcome::Flooded {
                    in_flight: self.queue.len(),
                };
            }
            steps += 1;
            match self.step_detailed() {
                StepOutcome::Stuck { device, deadline } => {
                    return RunOutcome::Stuck { device, deadline }
                }
                StepOutcome::Idle => return RunOutcome::Idle,
                StepOutcome::Delivered | StepOutcome::Timers => {}
            }
        }
    }

    /// Handle every event up to and including time `t`, then set the
    /// clock to `t` (if it is not already later).
    pub fn advance_to(&mut self, t: u64) -> RunOutcome {
        match self.run_until(|_| false, t) {
            RunOutcome::Idle | RunOutcome::TimeLimit => {
                self.now = self.now.max(t);
                RunOutcome::TimeLimit
            }
            other => other,
        }
    }
}

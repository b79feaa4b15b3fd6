//! The dispatch controller: every launch the runtime makes passes through it.
//!
//! Hot path: with no per-stream limit configured, `begin` and `end` touch two
//! atomic counters and nothing else: no lock, no map, no event. Once any stream
//! has an in-flight limit, launches on *that* stream record a completion event
//! after enqueueing, and `begin` waits on the host (the caller has released the
//! GIL) while the stream has `limit` launches in flight. Other streams keep
//! the untracked path's semantics but take the lock to find out they are
//! untracked.
//!
//! Kernel pacing (the scheduler's): once partitions are registered with
//! [`DispatchController::set_pacing`] so that some launch could ever be held
//! (a rate below 1, or a class that yields to a higher registered class), every
//! launch is tracked and passes the [`Pacer`] of `scheduler::pacing`, under the
//! calling thread's current partition (launches outside any partition count as
//! the BestEffort default partition). A held launch waits on the host, the lock
//! released, polling completions, at most `max_hold` per launch: a higher-class
//! launch that never completes (it waits on the lower class's work) cannot
//! deadlock the process. Kernel time is measured from the completion events:
//! a launch's time is from when it could start (its enqueue, or the previous
//! completion on its stream) to when its completion was observed.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use crate::limits::{current_partition, PartitionId, DEFAULT_PARTITION};
use crate::scheduler::pacing::{Hold, Nanos, Pacer, PacingConfig, Ticket as PaceTicket};
use crate::scheduler::QosClass;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one launch may be held by pacing before it goes anyway.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_millis(50);

/// Tickets of tracked launches carry this bit, so `end` knows to take the lock.
const TRACKED: u64 = 1 << 63;

#[derive(Default)]
struct StreamDispatch {
    limit: Option<u32>,
    in_flight: VecDeque<Event>,
    launched: u64,
    completed: u64,
    failed: u64,
}

/// A paced launch between its enqueue and its observed completion.
struct PacedLaunch {
    event: Event,
    ticket: PaceTicket,
    enqueued: Nanos,
}

/// Pacing counters of one partition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PacingStats {
    pub partition: PartitionId,
    pub class: Option<QosClass>,
    /// `(rate, burst_ns, yield_to_higher)`.
    pub config: Option<(f64, Nanos, bool)>,
    pub launched: u64,
    /// Launches that waited before being enqueued.
    pub held: u64,
    /// Total time launches waited, in nanoseconds.
    pub held_ns: u64,
    /// Launches released by `max_hold` while still held.
    pub forced: u64,
    /// Kernel time measured from completion events, in nanoseconds.
    pub measured_ns: u64,
    pub pending: u32,
}

#[derive(Default)]
struct Paced {
    pacer: Pacer,
    /// Classes and configs as registered (the pacer keeps no public view of them).
    lanes: HashMap<PartitionId, (QosClass, PacingConfig)>,
    in_flight: HashMap<(i32, Stream), VecDeque<PacedLaunch>>,
    last_completion: HashMap<(i32, Stream), Nanos>,
    stats: HashMap<PartitionId, PacingStats>,
    /// Some registered launch could ever be held.
    active: bool,
}

#[derive(Default)]
struct Tracked {
    streams: HashMap<(i32, Stream), StreamDispatch>,
    open: HashMap<u64, (i32, Stream)>,
    /// Tickets of paced launches, from `begin` to `end`.
    open_paced: HashMap<u64, (PaceTicket, Nanos)>,
    events: HashMap<i32, EventPool>,
    paced: Paced,
}

/// Counters of one stream with a limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamDispatchStats {
    pub device: i32,
    pub stream: Stream,
    pub limit: Option<u32>,
    pub in_flight: u64,
    pub launched: u64,
    pub completed: u64,
    pub failed: u64,
}

/// Counters of the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// `begin` calls.
    pub begun: u64,
    /// Launches reported failed by `end`.
    pub failed: u64,
    pub streams: Vec<StreamDispatchStats>,
}

/// See the module documentation.
pub struct DispatchController {
    next_ticket: AtomicU64,
    failed: AtomicU64,
    tracking: AtomicBool,
    tracked: Mutex<Tracked>,
    epoch: Instant,
    max_hold_ns: AtomicU64,
}

impl Default for DispatchController {
    fn default() -> Self {
        DispatchController {
            next_ticket: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            tracking: AtomicBool::new(false),
            tracked: Mutex::new(Tracked::default()),
            epoch: Instant::now(),
            max_hold_ns: AtomicU64::new(DEFAULT_MAX_HOLD.as_nanos() as u64),
        }
    }
}

impl DispatchController {
    pub fn new() -> Self {
        Self::default()
    }

    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Sets (or with `None` removes) the in-flight limit of a stream.
    pub fn set_stream_limit(&self, device: i32, stream: Stream, limit: Option<u32>) {
        let mut t = self.lock();
        t.streams.entry((device, stream)).or_default().limit = limit.map(|l| l.max(1));
        self.update_tracking(&t);
    }

    fn update_tracking(&self, t: &Tracked) {
        let any = t.streams.values().any(|s| s.limit.is_some()) || t.paced.active;
        self.tracking.store(any, Ordering::Release);
    }

    /// Registers (or with `None` unregisters) partition `id` for pacing, with its
    /// class and config. The default partition is registered as BestEffort with
    /// its class default whenever another partition is.
    pub fn set_pacing(
        &self,
        id: PartitionId,
        pacing: Option<(QosClass, PacingConfig)>,
    ) -> Result<(), String> {
        let now = self.now();
        let mut t = self.lock();
        let p = &mut t.paced;
        match pacing {
            Some((class, config)) => {
                p.pacer
                    .register(id, class, config, now)
                    .map_err(|e| e.to_string())?;
                p.lanes.insert(id, (class, config));
            }
            None => {
                p.pacer.unregister(id);
                p.lanes.remove(&id);
            }
        }
        let others = p.lanes.keys().any(|&k| k != DEFAULT_PARTITION);
        if others && !p.lanes.contains_key(&DEFAULT_PARTITION) {
            let config = PacingConfig::default_for(QosClass::BestEffort);
            p.pacer
                .register(DEFAULT_PARTITION, QosClass::BestEffort, config, now)
                .map_err(|e| e.to_string())?;
            p.lanes
                .insert(DEFAULT_PARTITION, (QosClass::BestEffort, config));
        }
        p.active = p.lanes.values().any(|(class, config)| {
            config.rate < 1.0
                || (config.yield_to_higher && p.lanes.values().any(|(c, _)| c > class))
        });
        self.update_tracking(&t);
        Ok(())
    }

    /// True while some registered launch could be held (a launch pays for pacing then).
    pub fn pacing_active(&self) -> bool {
        self.lock().paced.active
    }

    /// The most one launch may be held by pacing.
    pub fn set_max_hold(&self, max_hold: Duration) {
        self.max_hold_ns
            .store(max_hold.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Pacing counters of every registered partition, by id.
    pub fn pacing_stats(&self) -> Vec<PacingStats> {
        let t = self.lock();
        let mut ids: Vec<PartitionId> = t.paced.lanes.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .map(|id| {
                let mut s = t.paced.stats.get(&id).cloned().unwrap_or_default();
                s.partition = id;
                if let Some((class, c)) = t.paced.lanes.get(&id) {
                    s.class = Some(*class);
                    s.config = Some((c.rate, c.burst_ns, c.yield_to_higher));
                }
                s.pending = t.paced.pacer.pending(id).unwrap_or(0);
                s
            })
            .collect()
    }

    /// Completes the paced launches whose events have completed, front first per stream.
    fn poll_paced(&self, backend: &dyn DeviceBackend, t: &mut Tracked) -> BackendResult<()> {
        let now = self.now();
        let Tracked { paced, events, .. } = t;
        for (&(device, stream), queue) in paced.in_flight.iter_mut() {
            while let Some(front) = queue.front() {
                if !backend.event_query(front.event)? {
                    break;
                }
                let launch = queue.pop_front().expect("front exists");
                let last = paced.last_completion.entry((device, stream)).or_insert(0);
                let measured = now.saturating_sub(launch.enqueued.max(*last));
                *last = now;
                // A partition unregistered meanwhile has no lane: nothing to settle.
                let _ = paced.pacer.complete(launch.ticket, measured, now);
                paced
                    .stats
                    .entry(launch.ticket.partition)
                    .or_default()
                    .measured_ns += measured;
                events.entry(device).or_default().give(launch.event);
            }
        }
        Ok(())
    }

    /// Waits (the lock released between polls) until the pacer lets the calling
    /// thread's partition launch, or `max_hold` passes. `None` when unpaced.
    fn pace<'a>(
        &'a self,
        backend: &dyn DeviceBackend,
        stream: Stream,
        mut t: std::sync::MutexGuard<'a, Tracked>,
    ) -> BackendResult<(std::sync::MutexGuard<'a, Tracked>, Option<PaceTicket>)> {
        // A launch into a CUDA graph being captured does not run now: nothing to
        // pace, and no event may be recorded into the capture.
        if !t.paced.active || backend.stream_is_capturing(stream)? {
            return Ok((t, None));
        }
        let mut id = current_partition();
        if !t.paced.lanes.contains_key(&id) {
            id = DEFAULT_PARTITION;
        }
        if t.paced.pacer.enqueue(id).is_err() {
            return Ok((t, None));
        }
        let start = self.now();
        let max_hold = self.max_hold_ns.load(Ordering::Relaxed);
        let mut held = false;
        loop {
            self.poll_paced(backend, &mut t)?;
            let now = self.now();
            let decision = match t.paced.pacer.try_launch(id, now) {
                Ok(d) => d,
                Err(_) => {
                    // Unregistered while waiting: launch unpaced.
                    return Ok((t, None));
                }
            };
            let wait = match decision {
                Ok(ticket) => {
                    let s = t.paced.stats.entry(id).or_default();
                    s.launched += 1;
                    if held {
                        s.held += 1;
                        s.held_ns += now - start;
                    }
                    return Ok((t, Some(ticket)));
                }
                Err(_) if now - start >= max_hold => {
                    let s = t.paced.stats.entry(id).or_default();
                    s.launched += 1;
                    s.held += 1;
                    s.forced += 1;
                    s.held_ns += now - start;
                    let ticket = PaceTicket {
                        partition: id,
                        granted_ns: 0,
                    };
                    return Ok((t, Some(ticket)));
                }
                Err(Hold::RateLimited { ready_at }) => ready_at.saturating_sub(now),
                // Completions are observed by polling: look again soon.
                Err(Hold::HigherClassPending(_)) => 20_000,
            };
            held = true;
            let wait = wait.clamp(5_000, 500_000).min(max_hold - (now - start));
            drop(t);
            std::thread::sleep(Duration::from_nanos(wait.max(1)));
            t = self.lock();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.tracked.lock().expect("dispatch controller poisoned")
    }

    /// The hot path: a ticket without taking the lock, or `None` when some
    /// stream has a limit and [`DispatchController::begin`] must decide.
    pub fn begin_untracked(&self) -> Option<u64> {
        if self.tracking.load(Ordering::Acquire) {
            return None;
        }
        Some(self.next_ticket.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Before enqueueing work on `stream`; may wait while the stream is at its limit.
    pub fn begin(
        &self,
        backend: &dyn DeviceBackend,
        device: i32,
        stream: Stream,
    ) -> BackendResult<u64> {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed) + 1;
        if !self.tracking.load(Ordering::Acquire) {
            return Ok(ticket);
        }
        let (mut t, paced) = self.pace(backend, stream, self.lock())?;
        if let Some(p) = paced {
            t.open_paced.insert(ticket | TRACKED, (p, self.now()));
            t.open.insert(ticket | TRACKED, (device, stream));
        }
        let Some(s) = t.streams.get_mut(&(device, stream)) else {
            return Ok(if paced.is_some() {
                ticket | TRACKED
            } else {
                ticket
            });
        };
        let Some(limit) = s.limit else {
            return Ok(if paced.is_some() {
                ticket | TRACKED
            } else {
                ticket
            });
        };
        let mut done = Vec::new();
        while let Some(&ev) = s.in_flight.front() {
            let complete = if s.in_flight.len() >= limit as usize {
                backend.event_synchronize(ev)?;
                true
            } else {
                backend.event_query(ev)?
            };
            if !complete {
                break;
            }
            s.in_flight.pop_front();
            s.completed += 1;
            done.push(ev);
        }
        let pool = t.events.entry(device).or_default();
        done.into_iter().for_each(|ev| pool.give(ev));
        t.open.insert(ticket | TRACKED, (device, stream));
        Ok(ticket | TRACKED)
    }

    /// The hot path of `end`: true when the ticket needed no tracking and is done.
    pub fn end_untracked(&self, ticket: u64, ok: bool) -> bool {
        if ticket & TRACKED != 0 {
            return false;
        }
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// The device a tracked ticket was issued for.
    pub fn ticket_device(&self, ticket: u64) -> Option<i32> {
        self.lock().open.get(&ticket).map(|&(device, _)| device)
    }

    /// Right after the launch was enqueued (`ok` false if it failed).
    pub fn end(&self, backend: &dyn DeviceBackend, ticket: u64, ok: bool) -> BackendResult<()> {
        if self.end_untracked(ticket, ok) {
            return Ok(());
        }
        let mut t = self.lock();
        let Some((device, stream)) = t.open.remove(&ticket) else {
            return Ok(());
        };
        let paced = t.open_paced.remove(&ticket);
        let limited = t
            .streams
            .get(&(device, stream))
            .is_some_and(|s| s.limit.is_some());
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Some((p, _)) = paced {
                let _ = t.paced.pacer.withdraw(p.partition);
            }
            if limited {
                t.streams.entry((device, stream)).or_default().failed += 1;
            }
            return Ok(());
        }
        if let Some((p, enqueued)) = paced {
            let event = t
                .events
                .entry(device)
                .or_default()
                .record(backend, device, stream)?;
            t.paced
                .in_flight
                .entry((device, stream))
                .or_default()
                .push_back(PacedLaunch {
                    event,
                    ticket: p,
                    enqueued,
                });
        }
        if !limited {
            return Ok(());
        }
        let ev = t
            .events
            .entry(device)
            .or_default()
            .record(backend, device, stream)?;
        let s = t.streams.entry((device, stream)).or_default();
        s.in_flight.push_back(ev);
        s.launched += 1;
        Ok(())
    }

    pub fn stats(&self) -> DispatchStats {
        let t = self.lock();
        let mut streams: Vec<StreamDispatchStats> = t
            .streams
            .iter()
            .map(|(&(device, stream), s)| StreamDispatchStats {
                device,
                stream,
                limit: s.limit,
                in_flight: s.in_flight.len() as u64,
                launched: s.launched,
                completed: s.completed,
                failed: s.failed,
            })
            .collect();
        streams.sort_by_key(|s| (s.device, s.stream));
        DispatchStats {
            begun: self.next_ticket.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            streams,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    #[test]
    fn untracked_launches_record_no_events() {
        let fake = FakeBackend::new(0);
        let d = DispatchController::new();
        for ok in [true, false, true] {
            let t = d.begin(&fake, 0, 5).unwrap();
            d.end(&fake, t, ok).unwrap();
        }
        assert_eq!(fake.live_events(), 0);
        let s = d.stats();
        assert_eq!((s.begun, s.failed, s.streams.len()), (3, 1, 0));
        assert!(d.begin_untracked().is_some());
    }

    #[test]
    fn a_stream_at_its_limit_waits_for_its_oldest_launch() {
        let fake = FakeBackend::new(0);
        let d = DispatchController::new();
        d.set_stream_limit(0, 5, Some(2));
        assert_eq!(
            d.begin_untracked(),
            None,
            "a limit anywhere sends launches to the lock"
        );
        for _ in 0..2 {
            let t = d.begin(&fake, 0, 5).unwrap();
            d.end(&fake, t, true).unwrap();
        }
        assert_eq!(fake.completions(5), 0);
        let t = d.begin(&fake, 0, 5).unwrap();
        assert_eq!(fake.completions(5), 1, "third launch waited on the host");
        d.end(&fake, t, true).unwrap();
        // Another stream is not limited and not tracked.
        let other = d.begin(&fake, 0, 6).unwrap();
        d.end(&fake, other, true).unwrap();
        let s = &d.stats().streams[0];
        assert_eq!(
            (s.launched, s.completed, s.in_flight, s.limit),
            (3, 2, 1, Some(2))
        );
        d.set_stream_limit(0, 5, None);
        assert!(!d.tracking.load(Ordering::Relaxed));
    }

    fn paced_pair() -> (
        std::sync::Arc<FakeBackend>,
        std::sync::Arc<DispatchController>,
    ) {
        let d = DispatchController::new();
        d.set_pacing(
            1,
            Some((
                QosClass::Guaranteed,
                PacingConfig::default_for(QosClass::Guaranteed),
            )),
        )
        .unwrap();
        assert!(
            d.pacing_active(),
            "launches outside partitions count as BestEffort and yield to Guaranteed"
        );
        d.set_pacing(
            2,
            Some((
                QosClass::BestEffort,
                PacingConfig::default_for(QosClass::BestEffort),
            )),
        )
        .unwrap();
        (
            std::sync::Arc::new(FakeBackend::new(0)),
            std::sync::Arc::new(d),
        )
    }

    #[test]
    fn best_effort_waits_while_guaranteed_work_is_pending() {
        let (fake, d) = paced_pair();
        assert!(d.pacing_active() && d.begin_untracked().is_none());
        crate::limits::set_current_partition(1);
        let g = d.begin(&*fake, 0, 5).unwrap();
        d.end(&*fake, g, true).unwrap();
        crate::limits::set_current_partition(0);
        let (f2, d2) = (fake.clone(), d.clone());
        let waiter = std::thread::spawn(move || {
            crate::limits::set_current_partition(2);
            let start = Instant::now();
            let t = d2.begin(&*f2, 0, 6).unwrap();
            let waited = start.elapsed();
            d2.end(&*f2, t, true).unwrap();
            waited
        });
        std::thread::sleep(Duration::from_millis(20));
        fake.complete_stream(5);
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(15), "waited {waited:?}");
        assert!(
            waited < DEFAULT_MAX_HOLD,
            "released by the completion, not the bound"
        );
        let stats = d.pacing_stats();
        let be = stats.iter().find(|s| s.partition == 2).unwrap();
        assert_eq!((be.launched, be.held, be.forced), (1, 1, 0));
        let g = stats.iter().find(|s| s.partition == 1).unwrap();
        assert_eq!((g.launched, g.held, g.pending), (1, 0, 0));
        assert!(g.measured_ns >= 15_000_000, "{g:?}");
        // Guaranteed never waits for BestEffort work.
        crate::limits::set_current_partition(1);
        let t = d.begin(&*fake, 0, 5).unwrap();
        d.end(&*fake, t, true).unwrap();
        crate::limits::set_current_partition(0);
    }

    #[test]
    fn a_hold_is_bounded_and_failed_launches_withdraw() {
        let (fake, d) = paced_pair();
        d.set_max_hold(Duration::from_millis(10));
        crate::limits::set_current_partition(1);
        let g = d.begin(&*fake, 0, 5).unwrap();
        d.end(&*fake, g, true).unwrap(); // never completes
        let failed = d.begin(&*fake, 0, 5).unwrap();
        d.end(&*fake, failed, false).unwrap();
        crate::limits::set_current_partition(2);
        let start = Instant::now();
        let t = d.begin(&*fake, 0, 6).unwrap();
        d.end(&*fake, t, true).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(10));
        crate::limits::set_current_partition(0);
        let stats = d.pacing_stats();
        let be = stats.iter().find(|s| s.partition == 2).unwrap();
        assert_eq!((be.held, be.forced), (1, 1));
        let g = stats.iter().find(|s| s.partition == 1).unwrap();
        assert_eq!(g.pending, 1, "the failed launch was withdrawn");
        d.set_pacing(2, None).unwrap();
        d.set_pacing(1, None).unwrap();
        assert!(!d.pacing_active() && d.begin_untracked().is_some());
    }

    #[test]
    fn a_rate_paces_a_partition_alone() {
        let fake = FakeBackend::new(0);
        fake.set_auto_complete(true);
        let d = DispatchController::new();
        let config = PacingConfig {
            rate: 0.5,
            burst_ns: 1_000_000,
            yield_to_higher: false,
        };
        d.set_pacing(3, Some((QosClass::Burstable, config)))
            .unwrap();
        assert!(d.pacing_active());
        crate::limits::set_current_partition(3);
        for _ in 0..3 {
            let t = d.begin(&fake, 0, 7).unwrap();
            d.end(&fake, t, true).unwrap();
        }
        crate::limits::set_current_partition(0);
        let s = d
            .pacing_stats()
            .into_iter()
            .find(|s| s.partition == 3)
            .unwrap();
        assert_eq!((s.launched, s.config), (3, Some((0.5, 1_000_000, false))));
    }

    #[test]
    fn launches_into_a_capture_are_not_paced() {
        let (fake, d) = paced_pair();
        fake.set_capturing(6, true);
        crate::limits::set_current_partition(1);
        let g = d.begin(&*fake, 0, 5).unwrap();
        d.end(&*fake, g, true).unwrap(); // pending, never completes
        crate::limits::set_current_partition(2);
        let start = Instant::now();
        let t = d.begin(&*fake, 0, 6).unwrap();
        d.end(&*fake, t, true).unwrap();
        crate::limits::set_current_partition(0);
        assert!(start.elapsed() < Duration::from_millis(10), "not held");
        let be = d
            .pacing_stats()
            .into_iter()
            .find(|s| s.partition == 2)
            .unwrap();
        assert_eq!((be.launched, be.pending), (0, 0), "and not counted");
    }
}

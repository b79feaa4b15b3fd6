//! The dispatch controller: every launch the runtime makes passes through it.
//!
//! Hot path: with no per-stream limit configured, `begin` and `end` touch two
//! atomic counters and nothing else: no lock, no map, no event. Once any stream
//! has an in-flight limit, launches on *that* stream record a completion event
//! after enqueueing, and `begin` waits on the host (the caller has released the
//! GIL) while the stream has `limit` launches in flight. Other streams keep
//! the untracked path's semantics but take the lock to find out they are
//! untracked. The scheduler builds pacing and priorities on this.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

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

#[derive(Default)]
struct Tracked {
    streams: HashMap<(i32, Stream), StreamDispatch>,
    open: HashMap<u64, (i32, Stream)>,
    events: HashMap<i32, EventPool>,
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
#[derive(Default)]
pub struct DispatchController {
    next_ticket: AtomicU64,
    failed: AtomicU64,
    tracking: AtomicBool,
    tracked: Mutex<Tracked>,
}

impl DispatchController {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (or with `None` removes) the in-flight limit of a stream.
    pub fn set_stream_limit(&self, device: i32, stream: Stream, limit: Option<u32>) {
        let mut t = self.lock();
        t.streams.entry((device, stream)).or_default().limit = limit.map(|l| l.max(1));
        let any = t.streams.values().any(|s| s.limit.is_some());
        self.tracking.store(any, Ordering::Release);
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
        let mut t = self.lock();
        let Some(s) = t.streams.get_mut(&(device, stream)) else {
            return Ok(ticket);
        };
        let Some(limit) = s.limit else {
            return Ok(ticket);
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
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
            t.streams.entry((device, stream)).or_default().failed += 1;
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
}

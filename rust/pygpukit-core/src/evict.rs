//! Choosing which evictable block to spill under memory pressure.
//!
//! Policy: least recently used first (by the pool clock of the block's last
//! allocation or touch). Invariant: a block is never chosen before its
//! *last-use event* has completed. That event is an idle fence recorded on the
//! block's last-use stream when the block is first considered (later than its
//! last use); a touch after that makes the fence stale and a new one is
//! recorded. A block whose fence is pending is skipped in favour of the next
//! least recently used one; when every candidate is busy, the pool waits on the
//! host for the least recently used candidate's fence.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use std::collections::HashMap;

/// A block that may be spilled: `(id, lru clock, last-use stream)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: u64,
    pub lru: u64,
    pub last_stream: Stream,
}

/// Idle fences of evictable blocks. See the module documentation.
#[derive(Default)]
pub struct EvictionTracker {
    /// Block id -> (fence event, the block's lru clock when the fence was recorded).
    fences: HashMap<u64, (Event, u64)>,
}

impl EvictionTracker {
    /// The block to spill next, or `None` when there is no candidate.
    pub fn pick(
        &mut self,
        mut candidates: Vec<Candidate>,
        backend: &dyn DeviceBackend,
        device: i32,
        events: &mut EventPool,
    ) -> BackendResult<Option<u64>> {
        candidates.sort_unstable_by_key(|c| (c.lru, c.id));
        for c in &candidates {
            let ev = self.fence_for(c, backend, device, events)?;
            if backend.event_query(ev)? {
                self.forget(c.id, events);
                return Ok(Some(c.id));
            }
        }
        let Some(oldest) = candidates.first() else {
            return Ok(None);
        };
        let (ev, _) = self.fences[&oldest.id];
        backend.event_synchronize(ev)?;
        self.forget(oldest.id, events);
        Ok(Some(oldest.id))
    }

    /// The block's idle fence, recorded now if it has none or it predates the last touch.
    fn fence_for(
        &mut self,
        c: &Candidate,
        backend: &dyn DeviceBackend,
        device: i32,
        events: &mut EventPool,
    ) -> BackendResult<Event> {
        match self.fences.get(&c.id) {
            Some(&(ev, lru)) if lru == c.lru => Ok(ev),
            _ => {
                self.forget(c.id, events);
                let ev = events.record(backend, device, c.last_stream)?;
                self.fences.insert(c.id, (ev, c.lru));
                Ok(ev)
            }
        }
    }

    /// Drops the block's fence (the block was freed, spilled or is in use again).
    pub fn forget(&mut self, id: u64, events: &mut EventPool) {
        if let Some((ev, _)) = self.fences.remove(&id) {
            // The event may still be pending; the pool only records it again,
            // which is allowed, and never waits on a reused event for this block.
            events.give(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    fn cand(id: u64, lru: u64, last_stream: Stream) -> Candidate {
        Candidate {
            id,
            lru,
            last_stream,
        }
    }

    #[test]
    fn least_recently_used_idle_block_goes_first() {
        let fake = FakeBackend::new(0);
        fake.set_auto_complete(true);
        let mut t = EvictionTracker::default();
        let mut events = EventPool::default();
        let pick = t.pick(
            vec![cand(1, 5, 0), cand(2, 3, 0), cand(3, 9, 0)],
            &fake,
            0,
            &mut events,
        );
        assert_eq!(pick.unwrap(), Some(2));
    }

    #[test]
    fn busy_blocks_are_skipped_then_waited_for() {
        let fake = FakeBackend::new(0);
        let mut t = EvictionTracker::default();
        let mut events = EventPool::default();
        let both_busy = t
            .pick(vec![cand(1, 1, 1), cand(2, 2, 2)], &fake, 0, &mut events)
            .unwrap();
        assert_eq!(
            both_busy,
            Some(1),
            "every candidate busy: wait for the oldest"
        );
        // Block 3 is older but its stream is busy; block 2's fence (stream 2) has completed.
        fake.complete_stream(2);
        assert_eq!(
            t.pick(vec![cand(3, 1, 3), cand(2, 2, 2)], &fake, 0, &mut events)
                .unwrap(),
            Some(2)
        );
        assert_eq!(t.pick(vec![], &fake, 0, &mut events).unwrap(), None);
    }
}

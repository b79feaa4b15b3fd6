//! Stream-ordered reuse without an event per free.
//!
//! A freed block goes at once to the free list of the stream it was freed on:
//! work enqueued later on that stream runs after its last use, so that stream
//! may reuse it immediately. Each free gets a sequence number of its stream.
//!
//! Another stream may reuse it only once the work before the free has
//! completed. We record no event at free time. When an allocation misses on
//! its own stream, we record a *fence* event on each other stream that has
//! unfenced frees; the fence is later than those frees, so its completion
//! proves that their last uses are done. Completed fences *clear* the ranges
//! (they become reusable by any stream). Policy: a stream never waits on
//! another stream's fence (no `stream_wait_event`, so no false dependencies
//! between streams); it takes only cleared ranges, and otherwise allocates a
//! new segment. Under memory pressure, releasing cached segments waits on the
//! host for the fence instead (see `DevicePool::release_cached`).

use super::FastMap;
use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use std::collections::VecDeque;

#[derive(Default)]
struct StreamFences {
    /// Sequence number of the latest free on this stream.
    last_seq: u64,
    /// Highest sequence number covered by a recorded fence.
    fenced: u64,
    /// Fences not yet seen complete, oldest first: (covered seq, event).
    fences: VecDeque<(u64, Event)>,
    /// Free ranges not yet cleared, in free order: (seq, range start).
    frees: VecDeque<(u64, u64)>,
}

/// Per-stream free sequence numbers and fences. See the module documentation.
#[derive(Default)]
pub struct StreamOrder {
    streams: FastMap<Stream, StreamFences>,
}

impl StreamOrder {
    /// The sequence number for a free on `stream`.
    pub fn next_seq(&mut self, stream: Stream) -> u64 {
        let s = self.streams.entry(stream).or_default();
        s.last_seq += 1;
        s.last_seq
    }

    /// Remembers that the free range at `ptr`, owned by `stream` with sequence
    /// number `seq`, waits to be cleared.
    pub fn note_free(&mut self, stream: Stream, seq: u64, ptr: u64) {
        self.streams
            .entry(stream)
            .or_default()
            .frees
            .push_back((seq, ptr));
    }

    /// Records a fence on every stream not `skip`ped that has frees not covered by one.
    /// (The pool skips the allocating stream and streams being captured: an event
    /// recorded on a capturing stream would become part of the graph.)
    pub fn fence_others(
        &mut self,
        skip: impl Fn(Stream) -> bool,
        backend: &dyn DeviceBackend,
        device: i32,
        events: &mut EventPool,
    ) -> BackendResult<()> {
        for (&stream, s) in self.streams.iter_mut() {
            if !skip(stream) && s.fenced < s.last_seq && !s.frees.is_empty() {
                let ev = events.record(backend, device, stream)?;
                s.fences.push_back((s.last_seq, ev));
                s.fenced = s.last_seq;
            }
        }
        Ok(())
    }

    /// Polls fences; returns `(stream, seq, ptr)` for every free now known
    /// complete. The caller clears those ranges (stale entries are ignored there).
    pub fn poll(
        &mut self,
        backend: &dyn DeviceBackend,
        events: &mut EventPool,
    ) -> BackendResult<Vec<(Stream, u64, u64)>> {
        let mut done = Vec::new();
        for (&stream, s) in self.streams.iter_mut() {
            let mut cleared = None;
            while let Some(&(seq, ev)) = s.fences.front() {
                if !backend.event_query(ev)? {
                    break;
                }
                s.fences.pop_front();
                events.give(ev);
                cleared = Some(seq);
            }
            if let Some(seq) = cleared {
                drain_cleared(stream, s, seq, &mut done);
            }
        }
        Ok(done)
    }

    /// Waits on the host for everything enqueued on `stream` so far; returns
    /// every free on it as complete, as [`StreamOrder::poll`] does.
    pub fn wait_stream(
        &mut self,
        stream: Stream,
        backend: &dyn DeviceBackend,
        device: i32,
        events: &mut EventPool,
    ) -> BackendResult<Vec<(Stream, u64, u64)>> {
        let mut done = Vec::new();
        let Some(s) = self.streams.get_mut(&stream) else {
            return Ok(done);
        };
        let ev = events.record(backend, device, stream)?;
        let waited = backend.event_synchronize(ev);
        events.give(ev);
        waited?;
        // Older fences on this stream are complete too: events complete in stream order.
        for (_, old) in s.fences.drain(..) {
            events.give(old);
        }
        s.fenced = s.last_seq;
        let seq = s.last_seq;
        drain_cleared(stream, s, seq, &mut done);
        Ok(done)
    }

    /// Streams with frees waiting to be cleared.
    pub fn has_pending(&self) -> bool {
        self.streams.values().any(|s| !s.frees.is_empty())
    }
}

fn drain_cleared(
    stream: Stream,
    s: &mut StreamFences,
    seq: u64,
    done: &mut Vec<(Stream, u64, u64)>,
) {
    while let Some(&(free_seq, ptr)) = s.frees.front() {
        if free_seq > seq {
            break;
        }
        s.frees.pop_front();
        done.push((stream, seq, ptr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    #[test]
    fn frees_clear_only_after_a_later_fence_completes() {
        let fake = FakeBackend::new(0);
        let mut events = EventPool::default();
        let mut order = StreamOrder::default();
        let seq = order.next_seq(1);
        order.note_free(1, seq, 100);
        order
            .fence_others(|s| s == 1, &fake, 0, &mut events)
            .unwrap();
        assert!(
            fake.live_events() == 0,
            "no fence on the freeing stream's own behalf"
        );
        order
            .fence_others(|s| s == 2, &fake, 0, &mut events)
            .unwrap();
        assert!(order.poll(&fake, &mut events).unwrap().is_empty());
        let seq2 = order.next_seq(1);
        order.note_free(1, seq2, 200);
        fake.complete_stream(1);
        assert_eq!(order.poll(&fake, &mut events).unwrap(), vec![(1, 1, 100)]);
        assert!(order.has_pending(), "the second free came after the fence");
        assert_eq!(
            order.wait_stream(1, &fake, 0, &mut events).unwrap(),
            vec![(1, 2, 200)]
        );
        assert!(!order.has_pending());
    }
}

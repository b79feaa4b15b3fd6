//! Device-to-host downloads into pageable memory, chunked through pinned
//! staging buffers on the D2H copy stream.
//!
//! Pure bookkeeping over [`DeviceBackend`] and [`HostMemory`], driven by its
//! callers under one lock: `pump` enqueues `memcpy_async` device -> pinned of
//! the highest-priority request's next chunk (ties: oldest first); when a
//! chunk's event completes, its bytes are copied pinned -> pageable (spread over
//! the copy threads). At most `slots` chunks are in flight.
//!
//! Invariant: a staging buffer is reused only after the event recorded after
//! its copy has completed. A ticket completes when its last chunk has reached
//! the pageable destination.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use crate::pinned::{PinnedBuf, PinnedPool};
use crate::transfer::{HostMemory, Ticket, TransferRequest, TransferState};
use std::collections::{HashMap, VecDeque};

struct Job {
    request: TransferRequest,
    enqueued: u64,
    chunks_left: u64,
    /// This copy's chunk size (see [`Downloads::chunk_for`]).
    chunk: u64,
}

struct Chunk {
    ticket: Ticket,
    event: Event,
    buf: PinnedBuf,
    /// The pageable destination and length to copy to when the event completes.
    copy_out: (u64, u64),
}

/// See the module documentation.
pub struct Downloads {
    device: i32,
    stream: Stream,
    chunk: u64,
    slots: usize,
    staging: PinnedPool,
    events: EventPool,
    queued: HashMap<Ticket, Job>,
    in_flight: VecDeque<Chunk>,
    complete: HashMap<Ticket, ()>,
}

impl Downloads {
    /// Downloads on `stream` in chunks of `chunk` bytes with `slots` staging buffers in flight.
    pub fn new(device: i32, stream: Stream, chunk: u64, slots: usize) -> Self {
        Self {
            device,
            stream,
            chunk: chunk.max(1),
            slots: slots.max(1),
            staging: PinnedPool::new(device),
            events: EventPool::default(),
            queued: HashMap::new(),
            in_flight: VecDeque::new(),
            complete: HashMap::new(),
        }
    }

    /// Queues a copy under `ticket` (unique per engine; lower tickets are older). The host and
    /// device ranges must stay valid until the ticket is complete.
    pub fn submit(&mut self, ticket: Ticket, request: TransferRequest) {
        if request.nbytes == 0 {
            self.complete.insert(ticket, ());
            return;
        }
        let chunk = self.chunk_for(request.nbytes);
        let job = Job {
            request,
            enqueued: 0,
            chunks_left: request.nbytes.div_ceil(chunk),
            chunk,
        };
        self.queued.insert(ticket, job);
    }

    /// The chunk size for a copy of `nbytes`: the configured chunk, but at least
    /// one chunk per slot down to 1/16 of it (4 KiB multiples). The pipeline
    /// fills with the first chunk's DMA and drains with the last chunk's host
    /// copy; a 64 MiB copy in four 16 MiB chunks would spend half its time
    /// there, in eight 8 MiB chunks a quarter.
    fn chunk_for(&self, nbytes: u64) -> u64 {
        let per_slot = nbytes.div_ceil(self.slots as u64).next_multiple_of(4096);
        per_slot.max(self.chunk / 16).min(self.chunk).max(1)
    }

    /// Where `ticket` stands; `None` for an unknown or released ticket.
    pub fn state(&self, ticket: Ticket) -> Option<TransferState> {
        if self.complete.contains_key(&ticket) {
            return Some(TransferState::Complete(None));
        }
        let job = self.queued.get(&ticket)?;
        Some(if job.enqueued < job.request.nbytes {
            TransferState::Queued
        } else {
            TransferState::InFlight
        })
    }

    /// Staging bytes held.
    pub fn staging_reserved(&self) -> u64 {
        self.staging.reserved()
    }

    /// Enqueues up to `max_chunks` chunks, highest priority first; returns how many.
    pub fn pump(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        max_chunks: usize,
    ) -> BackendResult<usize> {
        let mut moved = 0;
        while moved < max_chunks {
            self.retire_completed(backend, host)?;
            let Some(ticket) = self.next_job() else { break };
            if self.in_flight.len() >= self.slots {
                self.retire_oldest(backend, host)?;
            }
            self.enqueue_chunk(backend, ticket)?;
            moved += 1;
        }
        self.retire_completed(backend, host)?;
        Ok(moved)
    }

    /// Pumps until `ticket` has landed in host memory; the ticket stays known until released.
    pub fn finish(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        ticket: Ticket,
    ) -> BackendResult<()> {
        let result = loop {
            let step = match self.state(ticket) {
                None | Some(TransferState::Complete(_)) => break Ok(()),
                Some(TransferState::Queued) => self.pump(backend, host, 1).map(drop),
                Some(TransferState::InFlight) => self.retire_oldest(backend, host),
            };
            if let Err(e) = step {
                break Err(e);
            }
        };
        if result.is_err() {
            // The caller gets the error and may free its host memory at once: the job's
            // chunks still in flight must not be copied out there (see `retire_front`).
            self.queued.remove(&ticket);
        }
        result
    }

    /// [`Downloads::finish`], then releases the ticket.
    pub fn wait(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        ticket: Ticket,
    ) -> BackendResult<()> {
        self.finish(backend, host, ticket)?;
        self.release(ticket);
        Ok(())
    }

    /// Forgets a complete ticket.
    pub fn release(&mut self, ticket: Ticket) {
        self.complete.remove(&ticket);
    }

    fn next_job(&self) -> Option<Ticket> {
        self.queued
            .iter()
            .filter(|(_, j)| j.enqueued < j.request.nbytes)
            .max_by_key(|(&t, j)| (j.request.priority, std::cmp::Reverse(t)))
            .map(|(t, _)| *t)
    }

    fn enqueue_chunk(&mut self, backend: &dyn DeviceBackend, ticket: Ticket) -> BackendResult<()> {
        let job = &self.queued[&ticket];
        let r = job.request;
        let offset = job.enqueued;
        let len = job.chunk.min(r.nbytes - offset);
        // A multi-chunk copy stages every chunk, whatever its size, in a buffer of the configured
        // chunk size: the slots stay one size class, so later transfers reuse them instead of
        // pinning new buffers for their own chunk or remainder sizes (page-locking costs ~1 ms
        // per MiB-sized call).
        let want = if r.nbytes > job.chunk {
            self.chunk
        } else {
            len
        };
        let buf = self.staging.acquire(backend, want)?;
        if let Err(e) = backend.memcpy_async(buf.ptr, r.device + offset, len, self.stream) {
            // Nothing was enqueued: the buffer is idle.
            self.staging.release(backend, buf, None)?;
            return Err(e);
        }
        let event = self.events.record(backend, self.device, self.stream)?;
        self.in_flight.push_back(Chunk {
            ticket,
            event,
            buf,
            copy_out: (r.host + offset, len),
        });
        let job = self.queued.get_mut(&ticket).expect("job vanished");
        job.enqueued += len;
        Ok(())
    }

    fn retire_completed(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
    ) -> BackendResult<()> {
        while let Some(c) = self.in_flight.front() {
            if !backend.event_query(c.event)? {
                break;
            }
            self.retire_front(backend, host)?;
        }
        Ok(())
    }

    fn retire_oldest(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
    ) -> BackendResult<()> {
        if let Some(c) = self.in_flight.front() {
            backend.event_synchronize(c.event)?;
            self.retire_front(backend, host)?;
        }
        Ok(())
    }

    /// Finishes the oldest chunk, whose event has completed.
    fn retire_front(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
    ) -> BackendResult<()> {
        let c = self.in_flight.pop_front().expect("a chunk to retire");
        let job = self.queued.get_mut(&c.ticket);
        if job.is_some() {
            let (dst, len) = c.copy_out;
            host.copy_spread(dst, c.buf.ptr, len);
        }
        self.events.give(c.event);
        // The event completed: the buffer is idle, no guard needed.
        self.staging.release(backend, c.buf, None)?;
        // A failed job was dropped by `finish`; its landed chunks are discarded.
        let Some(job) = job else { return Ok(()) };
        job.chunks_left -= 1;
        if job.chunks_left == 0 {
            self.queued.remove(&c.ticket);
            self.complete.insert(c.ticket, ());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::{pattern, FakeBackend};
    use crate::transfer::Direction;

    const CHUNK: u64 = 64 << 10;

    fn request(host: u64, device: u64, nbytes: u64) -> TransferRequest {
        TransferRequest {
            direction: Direction::DeviceToHost,
            host,
            device,
            nbytes,
            priority: 0,
        }
    }

    #[test]
    fn lands_after_each_chunk_completes() {
        let fake = FakeBackend::new(1 << 30);
        let n = 3 * CHUNK;
        let dev = fake.mem_alloc(0, n).unwrap();
        let dst = fake.host_alloc(n).unwrap();
        let data = pattern(n as usize, 9);
        fake.write(dev, &data);
        let mut engine = Downloads::new(0, 12, CHUNK, 4);
        engine.submit(1, request(dst, dev, n));
        engine.pump(&fake, &fake, usize::MAX).unwrap();
        assert_eq!(
            engine.state(1),
            Some(TransferState::InFlight),
            "copies pending on the D2H stream"
        );
        assert_ne!(fake.read(dst, 16), data[..16].to_vec());
        fake.complete_stream(12);
        engine.pump(&fake, &fake, 0).unwrap();
        assert_eq!(engine.state(1), Some(TransferState::Complete(None)));
        assert_eq!(fake.read(dst, n as usize), data);
    }

    #[test]
    fn reuses_slots_after_their_event_and_lands_intact() {
        let fake = FakeBackend::new(1 << 30);
        let n = 23 * CHUNK + 4097; // many more chunks than slots, a short last one
        let host = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 5);
        fake.write(dev, &data);
        let mut engine = Downloads::new(0, 12, CHUNK, 3);
        engine.submit(1, request(host, dev, n));
        engine.pump(&fake, &fake, 3).unwrap();
        assert_eq!(fake.copies().len(), 3, "three slots in flight");
        // The fourth chunk needs a slot: the oldest chunk is waited for and copied out first.
        engine.pump(&fake, &fake, 1).unwrap();
        assert_eq!(fake.read(host, CHUNK as usize), data[..CHUNK as usize]);
        engine.wait(&fake, &fake, 1).unwrap();
        assert_eq!(fake.read(host, n as usize), data);
        let offsets: Vec<u64> = fake.copies().iter().map(|c| c.1 - dev).collect();
        let expected: Vec<u64> = (0..n.div_ceil(CHUNK)).map(|i| i * CHUNK).collect();
        assert_eq!(offsets, expected, "chunk order");
        assert_eq!(
            engine.staging_reserved(),
            3 * CHUNK,
            "three buffers, reused"
        );
    }

    #[test]
    fn higher_priority_overtakes_between_chunks() {
        let fake = FakeBackend::new(1 << 30);
        fake.set_auto_complete(true);
        let dst = fake.host_alloc(8 * CHUNK).unwrap();
        let dev = fake.mem_alloc(0, 8 * CHUNK).unwrap();
        let mut engine = Downloads::new(0, 12, CHUNK, 2);
        engine.submit(1, request(dst, dev, 6 * CHUNK));
        engine.pump(&fake, &fake, 2).unwrap();
        let mut urgent = request(dst + 6 * CHUNK, dev + 6 * CHUNK, 2 * CHUNK);
        urgent.priority = 5;
        engine.submit(2, urgent);
        engine.pump(&fake, &fake, 2).unwrap();
        let order: Vec<u64> = fake.copies().iter().map(|c| c.1 - dev).collect();
        assert_eq!(order, vec![0, CHUNK, 6 * CHUNK, 7 * CHUNK]);
        engine.wait(&fake, &fake, 1).unwrap();
        assert_eq!(fake.copies().len(), 8);
    }

    #[test]
    fn mid_sized_copies_use_one_chunk_per_slot_and_empty_ones_complete_at_once() {
        const MIB: u64 = 1 << 20;
        let fake = FakeBackend::new(1 << 31);
        fake.set_auto_complete(true);
        let mut engine = Downloads::new(0, 12, 16 * MIB, 8);
        // (bytes, expected DMA copy sizes)
        let cases = [
            (64 * MIB, vec![8 * MIB; 8]),
            (3 * MIB, vec![MIB; 3]),
            (MIB / 2, vec![MIB / 2]),
        ];
        for (t, (n, sizes)) in cases.into_iter().enumerate() {
            let host = fake.host_alloc(n).unwrap();
            let dev = fake.mem_alloc(0, n).unwrap();
            let before = fake.copies().len();
            engine.submit(t as u64, request(host, dev, n));
            engine.wait(&fake, &fake, t as u64).unwrap();
            let got: Vec<u64> = fake.copies()[before..].iter().map(|c| c.2).collect();
            assert_eq!(got, sizes, "{n} bytes");
        }
        engine.submit(9, request(0, 0, 0));
        assert_eq!(engine.state(9), Some(TransferState::Complete(None)));
    }

    #[test]
    fn a_failed_copy_surfaces_and_the_engine_stays_usable() {
        let fake = FakeBackend::new(1 << 30);
        fake.set_auto_complete(true);
        let n = 4 * CHUNK;
        let dev = fake.mem_alloc(0, n).unwrap();
        let dst = fake.host_alloc(n).unwrap();
        let data = pattern(n as usize, 1);
        fake.write(dev, &data);
        let mut engine = Downloads::new(0, 12, CHUNK, 2);
        fake.fail_copy_after(2);
        engine.submit(1, request(dst, dev, n));
        assert!(engine.finish(&fake, &fake, 1).is_err());
        engine.submit(2, request(dst, dev, n));
        engine.wait(&fake, &fake, 2).unwrap();
        assert_eq!(fake.read(dst, n as usize), data);
    }
}

//! The transfer engine: host<->device copies of pageable host memory on
//! dedicated copy streams, chunked through pinned staging buffers.
//!
//! Pure bookkeeping over [`DeviceBackend`] and [`HostMemory`]; no thread of its
//! own. Callers `submit` requests and `pump` the engine (or `wait` for one
//! ticket, which pumps). Each pump step moves one chunk of the highest-priority
//! request (ties: oldest first), so a small urgent copy overtakes a large one
//! between chunks.
//!
//! Pipelining: at most `slots` staging buffers are in flight. Host-to-device:
//! copy a chunk pageable -> pinned on the CPU, then `memcpy_async` pinned ->
//! device on the H2D stream, while earlier chunks are still copying.
//! Device-to-host: `memcpy_async` device -> pinned on the D2H stream; when the
//! chunk's event completes, copy pinned -> pageable on the CPU.
//!
//! Invariant: a staging buffer is rewritten only after the event recorded
//! after its last copy has completed. A host-to-device ticket completes with an
//! event on the H2D stream (consumers `stream_wait_event` on it, no host
//! wait); a device-to-host ticket completes when its last chunk has reached
//! the pageable destination.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use crate::pinned::{PinnedBuf, PinnedPool};
use std::collections::{HashMap, VecDeque};

/// Copies between host addresses (pageable and pinned) on the CPU.
pub trait HostMemory {
    fn copy(&self, dst: u64, src: u64, nbytes: u64);
}

/// Real host memory.
pub struct ProcessMemory;

/// Below this a copy runs on the calling thread; above it, in parts of at
/// least this size on up to [`MAX_COPY_THREADS`] threads. One core copies
/// pageable memory far slower than a PCIe 5 link moves it, so the staging
/// copy, not the DMA, would bound a large upload.
const PARALLEL_COPY_PART: u64 = 4 << 20;
const MAX_COPY_THREADS: u64 = 8;

impl HostMemory for ProcessMemory {
    fn copy(&self, dst: u64, src: u64, nbytes: u64) {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let parts = (nbytes / PARALLEL_COPY_PART)
            .min(threads)
            .min(MAX_COPY_THREADS);
        if parts < 2 {
            // SAFETY: submitters guarantee both ranges are live host memory until their
            // ticket completes (see `TransferEngine::submit`).
            unsafe {
                std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, nbytes as usize)
            };
            return;
        }
        let part = nbytes.div_ceil(parts);
        std::thread::scope(|scope| {
            for i in 1..parts {
                let offset = i * part;
                let len = part.min(nbytes - offset);
                // SAFETY: as above; the parts are disjoint and the scope joins them before returning.
                scope.spawn(move || unsafe {
                    std::ptr::copy_nonoverlapping(
                        (src + offset) as *const u8,
                        (dst + offset) as *mut u8,
                        len as usize,
                    )
                });
            }
            // SAFETY: as above; the first part is copied here.
            unsafe {
                std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, part as usize)
            };
        });
    }
}

impl HostMemory for crate::fake_backend::FakeBackend {
    fn copy(&self, dst: u64, src: u64, nbytes: u64) {
        let data = self.read(src, nbytes as usize);
        self.write(dst, &data);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
}

/// One copy: `nbytes` between pageable `host` and `device` memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferRequest {
    pub direction: Direction,
    pub host: u64,
    pub device: u64,
    pub nbytes: u64,
    /// Higher runs first.
    pub priority: i32,
}

pub type Ticket = u64;

/// Where a ticket stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferState {
    /// Chunks are still to be enqueued.
    Queued,
    /// Every chunk is enqueued; waiting for the copies (and, for D2H, the copy-outs).
    InFlight,
    /// Done: for H2D, the event to wait on (already complete for D2H).
    Complete(Option<Event>),
}

struct Job {
    request: TransferRequest,
    /// Submission order, for ties between equal priorities.
    seq: u64,
    enqueued: u64,
    chunks_left: u64,
}

struct Chunk {
    ticket: Ticket,
    event: Event,
    buf: PinnedBuf,
    /// D2H: the pageable destination and length to copy to when the event completes.
    copy_out: Option<(u64, u64)>,
}

/// See the module documentation.
pub struct TransferEngine {
    device: i32,
    h2d_stream: Stream,
    d2h_stream: Stream,
    chunk: u64,
    slots: usize,
    staging: PinnedPool,
    events: EventPool,
    next: u64,
    queued: HashMap<Ticket, Job>,
    in_flight: VecDeque<Chunk>,
    complete: HashMap<Ticket, Option<Event>>,
}

impl TransferEngine {
    /// An engine copying on the given streams in chunks of `chunk` bytes with
    /// `slots` staging buffers in flight (2 gives double buffering).
    pub fn new(
        device: i32,
        h2d_stream: Stream,
        d2h_stream: Stream,
        chunk: u64,
        slots: usize,
    ) -> Self {
        Self {
            device,
            h2d_stream,
            d2h_stream,
            chunk: chunk.max(1),
            slots: slots.max(1),
            staging: PinnedPool::new(device),
            events: EventPool::default(),
            next: 0,
            queued: HashMap::new(),
            in_flight: VecDeque::new(),
            complete: HashMap::new(),
        }
    }

    /// Queues a copy. The host and device ranges must stay valid until the
    /// ticket is complete.
    pub fn submit(&mut self, request: TransferRequest) -> Ticket {
        self.next += 1;
        if request.nbytes == 0 {
            self.complete.insert(self.next, None);
            return self.next;
        }
        let chunks = request.nbytes.div_ceil(self.chunk);
        let job = Job {
            request,
            seq: self.next,
            enqueued: 0,
            chunks_left: chunks,
        };
        self.queued.insert(self.next, job);
        self.next
    }

    /// Where `ticket` stands; `None` for an unknown or released ticket.
    pub fn state(&self, ticket: Ticket) -> Option<TransferState> {
        if let Some(ev) = self.complete.get(&ticket) {
            return Some(TransferState::Complete(*ev));
        }
        let job = self.queued.get(&ticket)?;
        Some(if job.enqueued < job.request.nbytes {
            TransferState::Queued
        } else {
            TransferState::InFlight
        })
    }

    /// For a host-to-device ticket whose chunks are all enqueued: the event that
    /// completes with the whole copy, for `stream_wait_event` on a consumer stream.
    /// Valid until the ticket is released.
    pub fn completion_event(&self, ticket: Ticket) -> Option<Event> {
        match self.state(ticket)? {
            TransferState::Complete(ev) => ev,
            TransferState::Queued => None,
            TransferState::InFlight => {
                let job = &self.queued[&ticket];
                if job.request.direction != Direction::HostToDevice {
                    return None;
                }
                self.in_flight
                    .iter()
                    .rev()
                    .find(|c| c.ticket == ticket)
                    .map(|c| c.event)
            }
        }
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
            self.enqueue_chunk(backend, host, ticket)?;
            moved += 1;
        }
        self.retire_completed(backend, host)?;
        Ok(moved)
    }

    /// Pumps until `ticket` is complete and waits for its copy on the host;
    /// the ticket stays known until released.
    pub fn finish(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        ticket: Ticket,
    ) -> BackendResult<()> {
        loop {
            match self.state(ticket) {
                None => return Ok(()),
                Some(TransferState::Complete(ev)) => {
                    if let Some(ev) = ev {
                        backend.event_synchronize(ev)?;
                    }
                    return Ok(());
                }
                Some(TransferState::Queued) => {
                    self.pump(backend, host, 1)?;
                }
                Some(TransferState::InFlight) => self.retire_oldest(backend, host)?,
            }
        }
    }

    /// [`TransferEngine::finish`], then releases the ticket.
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

    /// Forgets a complete ticket (its event returns to the engine's pool).
    pub fn release(&mut self, ticket: Ticket) {
        if let Some(Some(ev)) = self.complete.remove(&ticket) {
            self.events.give(ev);
        }
    }

    fn next_job(&self) -> Option<Ticket> {
        self.queued
            .iter()
            .filter(|(_, j)| j.enqueued < j.request.nbytes)
            .max_by_key(|(_, j)| (j.request.priority, std::cmp::Reverse(j.seq)))
            .map(|(t, _)| *t)
    }

    fn enqueue_chunk(
        &mut self,
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        ticket: Ticket,
    ) -> BackendResult<()> {
        let job = &self.queued[&ticket];
        let r = job.request;
        let offset = job.enqueued;
        let len = self.chunk.min(r.nbytes - offset);
        let buf = self.staging.acquire(backend, len)?;
        let (stream, copy_out) = match r.direction {
            Direction::HostToDevice => {
                host.copy(buf.ptr, r.host + offset, len);
                backend.memcpy_async(r.device + offset, buf.ptr, len, self.h2d_stream)?;
                (self.h2d_stream, None)
            }
            Direction::DeviceToHost => {
                backend.memcpy_async(buf.ptr, r.device + offset, len, self.d2h_stream)?;
                (self.d2h_stream, Some((r.host + offset, len)))
            }
        };
        let event = self.events.record(backend, self.device, stream)?;
        self.in_flight.push_back(Chunk {
            ticket,
            event,
            buf,
            copy_out,
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
        if let Some((dst, len)) = c.copy_out {
            host.copy(dst, c.buf.ptr, len);
        }
        // The event completed: the buffer is idle, no guard needed.
        self.staging.release(backend, c.buf, None)?;
        let job = self
            .queued
            .get_mut(&c.ticket)
            .expect("chunk of an unknown job");
        job.chunks_left -= 1;
        if job.chunks_left > 0 {
            self.events.give(c.event);
            return Ok(());
        }
        let job = self.queued.remove(&c.ticket).expect("job vanished");
        // Chunks complete in stream order, so the last chunk's event covers the whole copy.
        let done = match job.request.direction {
            Direction::HostToDevice => Some(c.event),
            Direction::DeviceToHost => {
                self.events.give(c.event);
                None
            }
        };
        self.complete.insert(c.ticket, done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    const CHUNK: u64 = 64 << 10;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn host_to_device_is_chunked_pipelined_and_intact() {
        let fake = FakeBackend::new(1 << 30);
        let n = 10 * CHUNK + 123;
        let src = fake.host_alloc(n).unwrap(); // stands in for pageable memory
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 3);
        fake.write(src, &data);
        let mut engine = TransferEngine::new(0, 11, 12, CHUNK, 2);
        let t = engine.submit(TransferRequest {
            direction: Direction::HostToDevice,
            host: src,
            device: dev,
            nbytes: n,
            priority: 0,
        });
        assert_eq!(engine.state(t), Some(TransferState::Queued));
        engine.pump(&fake, &fake, usize::MAX).unwrap();
        let ev = engine.completion_event(t).expect("all chunks enqueued");
        fake.stream_wait_event(5, ev).unwrap();
        engine.wait(&fake, &fake, t).unwrap();
        assert_eq!(fake.read(dev, n as usize), data);
        let copies: Vec<_> = fake.copies().into_iter().filter(|c| c.3 == 11).collect();
        assert_eq!(copies.len(), 11);
        assert_eq!(
            engine.staging_reserved(),
            2 * CHUNK,
            "two staging buffers, reused"
        );
        assert_eq!(engine.state(t), None);
    }

    #[test]
    fn process_memory_copies_large_ranges_in_parallel_parts_exactly() {
        for n in [0usize, 7, (8 << 20) + 3, (33 << 20) + 1] {
            let src: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; n];
            ProcessMemory.copy(dst.as_mut_ptr() as u64, src.as_ptr() as u64, n as u64);
            assert!(dst == src, "copy of {n} bytes differs");
        }
    }

    #[test]
    fn device_to_host_lands_after_each_chunk_completes() {
        let fake = FakeBackend::new(1 << 30);
        let n = 3 * CHUNK;
        let dev = fake.mem_alloc(0, n).unwrap();
        let dst = fake.host_alloc(n).unwrap();
        let data = pattern(n as usize, 9);
        fake.write(dev, &data);
        let mut engine = TransferEngine::new(0, 11, 12, CHUNK, 4);
        let t = engine.submit(TransferRequest {
            direction: Direction::DeviceToHost,
            host: dst,
            device: dev,
            nbytes: n,
            priority: 0,
        });
        engine.pump(&fake, &fake, usize::MAX).unwrap();
        assert_eq!(
            engine.state(t),
            Some(TransferState::InFlight),
            "copies pending on the D2H stream"
        );
        assert_ne!(fake.read(dst, 16), data[..16].to_vec());
        fake.complete_stream(12);
        engine.pump(&fake, &fake, 0).unwrap();
        assert_eq!(engine.state(t), Some(TransferState::Complete(None)));
        assert_eq!(fake.read(dst, n as usize), data);
    }

    #[test]
    fn higher_priority_overtakes_between_chunks() {
        let fake = FakeBackend::new(1 << 30);
        fake.set_auto_complete(true);
        let src = fake.host_alloc(8 * CHUNK).unwrap();
        let dev = fake.mem_alloc(0, 8 * CHUNK).unwrap();
        let mut engine = TransferEngine::new(0, 11, 12, CHUNK, 2);
        let req = |device, nbytes, priority| TransferRequest {
            direction: Direction::HostToDevice,
            host: src,
            device,
            nbytes,
            priority,
        };
        let bulk = engine.submit(req(dev, 6 * CHUNK, 0));
        engine.pump(&fake, &fake, 2).unwrap();
        let urgent = engine.submit(req(dev + 6 * CHUNK, 2 * CHUNK, 5));
        engine.pump(&fake, &fake, 2).unwrap();
        assert!(matches!(
            engine.state(urgent),
            Some(TransferState::Complete(_))
        ));
        assert_eq!(engine.state(bulk), Some(TransferState::Queued));
        let order: Vec<u64> = fake.copies().iter().map(|c| c.0 - dev).collect();
        assert_eq!(order, vec![0, CHUNK, 6 * CHUNK, 7 * CHUNK]);
        engine.wait(&fake, &fake, bulk).unwrap();
        assert_eq!(fake.copies().len(), 8);
    }

    #[test]
    fn empty_copies_complete_at_once() {
        let mut engine = TransferEngine::new(0, 1, 2, CHUNK, 2);
        let t = engine.submit(TransferRequest {
            direction: Direction::DeviceToHost,
            host: 0,
            device: 0,
            nbytes: 0,
            priority: 0,
        });
        assert_eq!(engine.state(t), Some(TransferState::Complete(None)));
    }
}

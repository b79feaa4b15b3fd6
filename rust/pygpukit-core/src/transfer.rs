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

/// Below this a copy runs on the calling thread; above it, in parts of about
/// this size on the calling thread and up to [`MAX_COPY_THREADS`] - 1 pool
/// threads. One core copies pageable memory far slower than a PCIe 5 link
/// moves it (~10 GB/s against ~55), so the staging copy, not the DMA, bounds a
/// large transfer unless it is spread over most of the cores. 1 MiB parts split
/// a 16 MiB chunk 16 ways while each part stays long enough that handing it to
/// a thread (~5 us) is noise.
const PARALLEL_COPY_PART: u64 = 1 << 20;
const MAX_COPY_THREADS: u64 = 16;

/// A part of a parallel copy, for a pool thread.
struct CopyPart {
    dst: u64,
    src: u64,
    len: u64,
    done: std::sync::Arc<Latch>,
}

/// Counts finished parts; the submitting thread waits for all of them.
struct Latch {
    left: std::sync::Mutex<u64>,
    zero: std::sync::Condvar,
}

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        *left -= 1;
        if *left == 0 {
            self.zero.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        while *left > 0 {
            left = self.zero.wait(left).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Copy threads started once and kept (spawning 15 threads per chunk cost
/// ~100 us of a ~300 us chunk): they wait on one queue of parts.
struct CopyThreads {
    queue: std::sync::Mutex<std::sync::mpsc::Sender<CopyPart>>,
    /// Threads that copy, the caller included.
    width: u64,
    /// The process that started them: a forked child has the queue but not the threads.
    pid: u32,
}

fn copy_threads() -> &'static CopyThreads {
    static POOL: std::sync::OnceLock<CopyThreads> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let width = cores.clamp(1, MAX_COPY_THREADS);
        let (tx, rx) = std::sync::mpsc::channel::<CopyPart>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let mut started = 1;
        for i in 1..width {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pygpukit-copy-{i}"))
                .spawn(move || loop {
                    let part = {
                        let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                        match rx.recv() {
                            Ok(p) => p,
                            Err(_) => return,
                        }
                    };
                    // SAFETY: the submitter keeps both ranges live until the latch reaches
                    // zero (it waits for it); parts of one copy are disjoint.
                    unsafe { copy_bytes(part.dst, part.src, part.len) };
                    part.done.count_down();
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        CopyThreads {
            queue: std::sync::Mutex::new(tx),
            width: started,
            pid: std::process::id(),
        }
    })
}

/// Copies `len` bytes. Large copies use non-temporal stores on x86-64: the
/// destination (a staging buffer the DMA engine reads next, or a host array
/// written once) is not read back by this CPU soon, and streaming stores skip
/// the read-for-ownership of every destination line, a third of the memory
/// traffic of a cached copy.
///
/// # Safety
/// `src` and `dst` must be valid, non-overlapping ranges of `len` bytes.
unsafe fn copy_bytes(dst: u64, src: u64, len: u64) {
    #[cfg(target_arch = "x86_64")]
    if len >= 256 << 10 {
        // SAFETY: as the caller guarantees.
        unsafe { copy_streaming(dst as *mut u8, src as *const u8, len as usize) };
        return;
    }
    // SAFETY: as the caller guarantees.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len as usize) };
}

/// 64 bytes per step: unaligned 16-byte loads, aligned 16-byte streaming stores
/// (SSE2, part of every x86-64), then a fence so the stores are visible before
/// the copy is reported done.
///
/// # Safety
/// As [`copy_bytes`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    // SAFETY: every access stays within [0, len) of both ranges, which the caller guarantees.
    unsafe {
        let head = dst.align_offset(16).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let s = src.add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}

impl HostMemory for ProcessMemory {
    fn copy(&self, dst: u64, src: u64, nbytes: u64) {
        let parts = if nbytes >= 2 * PARALLEL_COPY_PART && copy_threads().pid == std::process::id()
        {
            (nbytes / PARALLEL_COPY_PART).min(copy_threads().width)
        } else {
            1
        };
        if parts < 2 {
            // SAFETY: submitters guarantee both ranges are live host memory until their
            // ticket completes (see `TransferEngine::submit`).
            unsafe { copy_bytes(dst, src, nbytes) };
            return;
        }
        // Parts end on 4 KiB boundaries (whole pages per thread), the last one takes the rest.
        let part = nbytes.div_ceil(parts).next_multiple_of(4096);
        let pool = copy_threads();
        let others = (nbytes - 1) / part; // parts after the first
        let done = std::sync::Arc::new(Latch {
            left: std::sync::Mutex::new(others),
            zero: std::sync::Condvar::new(),
        });
        let mut handed = 0;
        {
            let queue = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
            for i in 1..=others {
                let offset = i * part;
                let sent = queue.send(CopyPart {
                    dst: dst + offset,
                    src: src + offset,
                    len: part.min(nbytes - offset),
                    done: done.clone(),
                });
                if sent.is_err() {
                    break;
                }
                handed += 1;
            }
        }
        for i in handed + 1..=others {
            // No pool thread took it (none could start): copy it here.
            let offset = i * part;
            // SAFETY: as above.
            unsafe { copy_bytes(dst + offset, src + offset, part.min(nbytes - offset)) };
            done.count_down();
        }
        // SAFETY: as above; the first part is copied here, the others by the pool, and the
        // ranges stay live until the latch says every part is done.
        unsafe { copy_bytes(dst, src, part.min(nbytes)) };
        done.wait();
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
    /// This copy's chunk size (see [`TransferEngine::chunk_for`]).
    chunk: u64,
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
        let chunk = self.chunk_for(request.nbytes);
        let job = Job {
            request,
            seq: self.next,
            enqueued: 0,
            chunks_left: request.nbytes.div_ceil(chunk),
            chunk,
        };
        self.queued.insert(self.next, job);
        self.next
    }

    /// The chunk size for a copy of `nbytes`: the configured chunk, but at least
    /// one chunk per slot down to 1/16 of it (4 KiB multiples). The pipeline
    /// fills with the first chunk's host copy and drains with the last chunk's
    /// DMA; a 64 MiB copy in four 16 MiB chunks would spend half its time
    /// there, in eight 8 MiB chunks a quarter.
    fn chunk_for(&self, nbytes: u64) -> u64 {
        let per_slot = nbytes.div_ceil(self.slots as u64).next_multiple_of(4096);
        per_slot.max(self.chunk / 16).min(self.chunk).max(1)
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
        for n in [
            0usize,
            7,
            (256 << 10) + 5,
            (2 << 20) + 1,
            (8 << 20) + 3,
            (33 << 20) + 1,
        ] {
            // Misaligned on both sides too: the streaming copy aligns its stores itself.
            for (skew_src, skew_dst) in [(0, 0), (3, 11)] {
                let src: Vec<u8> = (0..n + skew_src).map(|i| (i * 31 % 251) as u8).collect();
                let mut dst = vec![0u8; n + skew_dst + 1];
                ProcessMemory.copy(
                    dst[skew_dst..].as_mut_ptr() as u64,
                    src[skew_src..].as_ptr() as u64,
                    n as u64,
                );
                assert!(
                    dst[skew_dst..skew_dst + n] == src[skew_src..],
                    "copy of {n} bytes differs"
                );
                assert_eq!(dst[skew_dst + n], 0, "wrote past the end");
            }
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

    /// Host copies as the engine makes them, checked against the fake's completions: a
    /// staging buffer is rewritten (H2D) only after a host wait completed the copy stream
    /// since its previous use; every host byte is copied exactly once.
    struct Recorder<'a> {
        fake: &'a FakeBackend,
        stream: Stream,
        host: (u64, u64),
        /// staging ptr -> the stream's completion count when it was last filled
        filled: std::cell::RefCell<HashMap<u64, u64>>,
        /// host bytes touched, by offset from `host.0`
        seen: std::cell::RefCell<Vec<u8>>,
    }

    impl Recorder<'_> {
        fn note_host(&self, addr: u64, len: u64) {
            let (base, n) = self.host;
            assert!(
                addr >= base && addr + len <= base + n,
                "outside the host range"
            );
            let mut seen = self.seen.borrow_mut();
            for b in &mut seen[(addr - base) as usize..(addr - base + len) as usize] {
                *b += 1;
            }
        }
    }

    impl HostMemory for Recorder<'_> {
        fn copy(&self, dst: u64, src: u64, nbytes: u64) {
            let done = self.fake.completions(self.stream);
            if src >= self.host.0 && src < self.host.0 + self.host.1 {
                // Host-to-device: pageable -> staging `dst`.
                if let Some(before) = self.filled.borrow_mut().insert(dst, done) {
                    assert!(
                        done > before,
                        "staging buffer {dst:#x} rewritten before its copy completed"
                    );
                }
                self.note_host(src, nbytes);
            } else {
                self.note_host(dst, nbytes);
            }
            self.fake.copy(dst, src, nbytes);
        }
    }

    #[test]
    fn pipeline_reuses_slots_only_after_their_event_and_copies_each_byte_once() {
        for (direction, stream) in [(Direction::HostToDevice, 11), (Direction::DeviceToHost, 12)] {
            let fake = FakeBackend::new(1 << 30);
            let n = 23 * CHUNK + 4097; // many more chunks than slots, a short last one
            let host = fake.host_alloc(n).unwrap();
            let dev = fake.mem_alloc(0, n).unwrap();
            let data = pattern(n as usize, 5);
            let (from, to) = match direction {
                Direction::HostToDevice => (host, dev),
                Direction::DeviceToHost => (dev, host),
            };
            fake.write(from, &data);
            let rec = Recorder {
                fake: &fake,
                stream,
                host: (host, n),
                filled: Default::default(),
                seen: std::cell::RefCell::new(vec![0; n as usize]),
            };
            let mut engine = TransferEngine::new(0, 11, 12, CHUNK, 3);
            let t = engine.submit(TransferRequest {
                direction,
                host,
                device: dev,
                nbytes: n,
                priority: 0,
            });
            engine.wait(&fake, &rec, t).unwrap();
            assert_eq!(
                fake.read(to, n as usize),
                data,
                "{direction:?}: data differs"
            );
            assert!(
                rec.seen.borrow().iter().all(|&c| c == 1),
                "{direction:?}: a host byte copied other than once"
            );
            // The DMA copies run in order, back to back, on the direction's stream.
            let offsets: Vec<u64> = fake
                .copies()
                .iter()
                .filter(|c| c.3 == stream)
                .map(|c| match direction {
                    Direction::HostToDevice => c.0 - dev,
                    Direction::DeviceToHost => c.1 - dev,
                })
                .collect();
            let expected: Vec<u64> = (0..n.div_ceil(CHUNK)).map(|i| i * CHUNK).collect();
            assert_eq!(offsets, expected, "{direction:?}: chunk order");
            assert_eq!(
                engine.staging_reserved(),
                3 * CHUNK,
                "{direction:?}: three staging buffers, reused"
            );
        }
    }

    #[test]
    fn short_last_chunks_reuse_full_slots_across_transfers() {
        let fake = FakeBackend::new(1 << 30);
        fake.set_auto_complete(true);
        let chunk = 256 << 10;
        let mut engine = TransferEngine::new(0, 11, 12, chunk, 2);
        for tail in [70 << 10, 130 << 10, 3] {
            let n = 2 * chunk + tail;
            let src = fake.host_alloc(n).unwrap();
            let dev = fake.mem_alloc(0, n).unwrap();
            let data = pattern(n as usize, tail as u8);
            fake.write(src, &data);
            let t = engine.submit(TransferRequest {
                direction: Direction::HostToDevice,
                host: src,
                device: dev,
                nbytes: n,
                priority: 0,
            });
            engine.wait(&fake, &fake, t).unwrap();
            assert_eq!(fake.read(dev, n as usize), data);
            let reserved = engine.staging_reserved();
            assert!(
                reserved % chunk == 0 && reserved <= 2 * chunk,
                "a staging buffer pinned for a remainder: {reserved} bytes"
            );
        }
    }

    #[test]
    fn mid_sized_copies_use_one_chunk_per_slot_in_full_size_slots() {
        const MIB: u64 = 1 << 20;
        let fake = FakeBackend::new(1 << 31);
        fake.set_auto_complete(true);
        let mut engine = TransferEngine::new(0, 11, 12, 16 * MIB, 8);
        // (bytes, expected DMA copy sizes)
        let cases = [
            (64 * MIB, vec![8 * MIB; 8]),
            (256 * MIB, vec![16 * MIB; 16]),
            (3 * MIB, vec![MIB; 3]),
            (MIB / 2, vec![MIB / 2]),
        ];
        for (n, sizes) in cases {
            let src = fake.host_alloc(n).unwrap();
            let dev = fake.mem_alloc(0, n).unwrap();
            let before = fake.copies().len();
            let t = engine.submit(TransferRequest {
                direction: Direction::HostToDevice,
                host: src,
                device: dev,
                nbytes: n,
                priority: 0,
            });
            engine.wait(&fake, &fake, t).unwrap();
            let got: Vec<u64> = fake.copies()[before..].iter().map(|c| c.2).collect();
            assert_eq!(got, sizes, "{n} bytes");
        }
        // Multi-chunk copies staged in 16 MiB slots only; the 512 KiB copy in its own class.
        assert_eq!(engine.staging_reserved() % (16 * MIB), MIB / 2);
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

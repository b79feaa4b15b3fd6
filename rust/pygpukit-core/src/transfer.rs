//! The transfer engine: host<->device copies of pageable host memory on
//! dedicated copy streams, chunked through pinned staging buffers.
//!
//! One [`TransferEngine`] per device pairs [`Uploads`] (host-to-device: chunks
//! staged and enqueued by several threads at once, see `upload.rs`) with
//! [`Downloads`] (device-to-host: pumped by the submitting thread, see
//! `download.rs`). Each side has its own lock and staging, so a download never
//! holds up the threads of an upload. Both order work by priority at chunk
//! granularity (ties: oldest first).
//!
//! A host-to-device ticket completes with an event on the H2D stream
//! (consumers `stream_wait_event` on it, no host wait); a device-to-host ticket
//! completes when its last chunk has reached the pageable destination.
//!
//! This module also holds what both sides share: the request types, host
//! copies ([`HostMemory`], [`ProcessMemory`]) and the copy threads.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::download::Downloads;
use crate::upload::{Uploads, UPLOAD_CHUNK, UPLOAD_WORKERS};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Copies between host addresses (pageable and pinned) on the CPU. Called from the copy
/// threads too, hence `Send + Sync`.
pub trait HostMemory: Send + Sync {
    /// Copies on the calling thread only. Pool threads call this: a copy that waited for other
    /// pool threads could wait for itself.
    fn copy(&self, dst: u64, src: u64, nbytes: u64);

    /// Copies, possibly spread over the copy threads (never call it from one of them).
    fn copy_spread(&self, dst: u64, src: u64, nbytes: u64) {
        self.copy(dst, src, nbytes);
    }

    /// Copies with ordinary (cached) stores on the calling thread: for a destination read again
    /// soon from the cache, such as a slot of the upload ring (`pull_ring.rs`).
    fn copy_cached(&self, dst: u64, src: u64, nbytes: u64) {
        self.copy(dst, src, nbytes);
    }

    /// Reads a u32 flag in pinned memory that the device writes (acquire: what the device wrote
    /// before it is visible after).
    fn load_flag(&self, addr: u64) -> u32;

    /// Writes a u32 flag in pinned memory that the device reads (release: every store before it,
    /// including streaming ones, is visible first).
    fn store_flag(&self, addr: u64, value: u32);
}

/// Real host memory.
pub struct ProcessMemory;

/// Below this a spread copy runs on the calling thread; above it, in parts of
/// about this size on the calling thread and up to [`MAX_COPY_THREADS`] - 1 pool
/// threads. One core copies pageable memory far slower than a PCIe 5 link
/// moves it (~10 GB/s against ~55), so the staging copy, not the DMA, bounds a
/// large transfer unless it is spread over most of the cores. 1 MiB parts split
/// a 16 MiB chunk 16 ways while each part stays long enough that handing it to
/// a thread (~5 us) is noise.
const PARALLEL_COPY_PART: u64 = 1 << 20;
const MAX_COPY_THREADS: u64 = 16;

/// Counts finished parts; the submitting thread waits for all of them.
struct Latch {
    left: Mutex<u64>,
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

type Task = Box<dyn FnOnce() + Send>;

/// Copy threads started once and kept (spawning 15 threads per chunk cost ~100 us of a
/// ~300 us chunk): they run tasks from one queue, oldest first. Tasks are parts of a spread
/// copy ([`HostMemory::copy_spread`]) and upload workers (`upload.rs`).
pub struct CopyThreads {
    queue: Mutex<std::sync::mpsc::Sender<Task>>,
    /// Threads that copy, the caller included.
    width: u64,
    /// The process that started them: a forked child has the queue but not the threads.
    pid: u32,
}

impl CopyThreads {
    /// Pool threads that can take tasks from this process (0 in a forked child).
    pub fn helpers(&self) -> usize {
        if self.pid == std::process::id() {
            self.width as usize - 1
        } else {
            0
        }
    }

    /// Queues `task` for a pool thread; false when none can run it (then it is dropped).
    pub fn run(&self, task: Task) -> bool {
        if self.helpers() == 0 {
            return false;
        }
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.send(task).is_ok()
    }
}

/// The process's copy threads.
pub fn copy_threads() -> &'static CopyThreads {
    static POOL: std::sync::OnceLock<CopyThreads> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let width = cores.clamp(1, MAX_COPY_THREADS);
        let (tx, rx) = std::sync::mpsc::channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 1;
        for i in 1..width {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pygpukit-copy-{i}"))
                .spawn(move || loop {
                    let task = {
                        let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                        match rx.recv() {
                            Ok(t) => t,
                            Err(_) => return,
                        }
                    };
                    task();
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        CopyThreads {
            queue: Mutex::new(tx),
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
        // SAFETY: submitters guarantee both ranges are live host memory until their ticket
        // completes (see `TransferEngine::submit`).
        unsafe { copy_bytes(dst, src, nbytes) };
    }

    fn copy_cached(&self, dst: u64, src: u64, nbytes: u64) {
        // SAFETY: as in `copy`.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, nbytes as usize) };
    }

    fn load_flag(&self, addr: u64) -> u32 {
        // SAFETY: flags are 4-byte aligned u32s in pinned memory that lives as long as the ring.
        let value = unsafe { &*(addr as *const AtomicU32) }.load(Ordering::Acquire);
        // Acquire orders within the inner-shareable domain only; a device reaches the flag
        // through the outer one.
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a barrier instruction, no memory access.
        unsafe {
            std::arch::asm!("dmb oshld", options(nostack, preserves_flags))
        };
        value
    }

    fn store_flag(&self, addr: u64, value: u32) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86-64. Orders earlier streaming stores before the flag, which
        // the release below does not.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
        // As in `load_flag`: the device must see the slot's bytes before the flag.
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a barrier instruction, no memory access.
        unsafe {
            std::arch::asm!("dmb oshst", options(nostack, preserves_flags))
        };
        // SAFETY: as in `load_flag`.
        unsafe { &*(addr as *const AtomicU32) }.store(value, Ordering::Release);
    }

    fn copy_spread(&self, dst: u64, src: u64, nbytes: u64) {
        let pool = copy_threads();
        let parts = if nbytes >= 2 * PARALLEL_COPY_PART {
            (nbytes / PARALLEL_COPY_PART).min(pool.helpers() as u64 + 1)
        } else {
            1
        };
        if parts < 2 {
            self.copy(dst, src, nbytes);
            return;
        }
        // Parts end on 4 KiB boundaries (whole pages per thread), the last one takes the rest.
        let part = nbytes.div_ceil(parts).next_multiple_of(4096);
        let others = (nbytes - 1) / part; // parts after the first
        let done = Arc::new(Latch {
            left: Mutex::new(others),
            zero: std::sync::Condvar::new(),
        });
        for i in 1..=others {
            let offset = i * part;
            let len = part.min(nbytes - offset);
            let latch = done.clone();
            let task: Task = Box::new(move || {
                // SAFETY: the caller keeps both ranges live until the latch reaches zero (it
                // waits for it); parts of one copy are disjoint.
                unsafe { copy_bytes(dst + offset, src + offset, len) };
                latch.count_down();
            });
            if !pool.run(task) {
                // No pool thread took it: copy it here.
                // SAFETY: as above.
                unsafe { copy_bytes(dst + offset, src + offset, len) };
                done.count_down();
            }
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

    fn load_flag(&self, addr: u64) -> u32 {
        self.read_u32(addr)
    }

    fn store_flag(&self, addr: u64, value: u32) {
        self.write(addr, &value.to_le_bytes());
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

/// Tickets carry their direction in the low bit, so the engine routes them without a table.
const DOWNLOAD_BIT: Ticket = 1;

/// See the module documentation.
pub struct TransferEngine {
    backend: Arc<dyn DeviceBackend>,
    host: Arc<dyn HostMemory>,
    uploads: Arc<Uploads>,
    downloads: Mutex<Downloads>,
    /// Ticket numbers, in submission order (shifted past the direction bit).
    next: AtomicU64,
}

impl TransferEngine {
    /// An engine copying on the given streams: downloads in chunks of `chunk` bytes with
    /// `slots` staging buffers in flight, uploads as [`Uploads`] with its constants (large ones
    /// by the upload kernel on `pull_stream`, when given and the backend can launch it).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device: i32,
        backend: Arc<dyn DeviceBackend>,
        host: Arc<dyn HostMemory>,
        h2d_stream: Stream,
        d2h_stream: Stream,
        pull_stream: Option<Stream>,
        chunk: u64,
        slots: usize,
    ) -> Self {
        let uploads = Uploads::new(
            device,
            backend.clone(),
            host.clone(),
            h2d_stream,
            pull_stream,
            UPLOAD_CHUNK,
            UPLOAD_WORKERS,
        );
        Self {
            downloads: Mutex::new(Downloads::new(device, d2h_stream, chunk, slots)),
            uploads: Arc::new(uploads),
            backend,
            host,
            next: AtomicU64::new(1),
        }
    }

    fn downloads(&self) -> MutexGuard<'_, Downloads> {
        self.downloads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Submits a copy and drives it until every chunk is enqueued (host-to-device: the
    /// completion event is recorded) or has landed in host memory (device-to-host). Returns
    /// the ticket; on a backend error the ticket is forgotten and the error returned.
    ///
    /// Uploads run on the H2D stream (staged) or the pull stream (the upload kernel), so two
    /// tickets to overlapping destinations are ordered only if the caller orders them: the C++
    /// core makes the H2D stream wait for the caller's stream, and the caller's stream wait for
    /// each ticket.
    ///
    /// # Safety
    /// `request.host` must be valid host memory of `request.nbytes` bytes (read for
    /// host-to-device, written for device-to-host) until the ticket completes.
    pub unsafe fn submit(&self, request: TransferRequest) -> BackendResult<Ticket> {
        let n = self.next.fetch_add(1, Ordering::Relaxed) << 1;
        match request.direction {
            Direction::HostToDevice => {
                self.uploads.submit(n, request);
                self.uploads.finish(n)?;
                Ok(n)
            }
            Direction::DeviceToHost => {
                let ticket = n | DOWNLOAD_BIT;
                self.downloads().submit(ticket, request);
                // One chunk per lock, so downloads submitted by other threads interleave by
                // priority.
                loop {
                    let mut d = self.downloads();
                    match d.state(ticket) {
                        Some(TransferState::Queued) => {
                            if let Err(e) = d.pump(&*self.backend, &*self.host, 1) {
                                d.finish(&*self.backend, &*self.host, ticket).ok();
                                d.release(ticket);
                                return Err(e);
                            }
                        }
                        Some(TransferState::InFlight) => {
                            d.finish(&*self.backend, &*self.host, ticket)?;
                        }
                        _ => return Ok(ticket),
                    }
                }
            }
        }
    }

    /// Where `ticket` stands; `None` for an unknown or released ticket.
    pub fn state(&self, ticket: Ticket) -> Option<TransferState> {
        if ticket & DOWNLOAD_BIT != 0 {
            self.downloads().state(ticket)
        } else {
            self.uploads.state(ticket)
        }
    }

    /// For a complete host-to-device ticket: the event that completes with the whole copy.
    pub fn completion_event(&self, ticket: Ticket) -> Option<Event> {
        if ticket & DOWNLOAD_BIT != 0 {
            return None;
        }
        self.uploads.completion_event(ticket)
    }

    /// Waits on the host for the copy of `ticket`, then forgets it.
    pub fn wait(&self, ticket: Ticket) -> BackendResult<()> {
        if ticket & DOWNLOAD_BIT != 0 {
            self.downloads().wait(&*self.backend, &*self.host, ticket)
        } else {
            self.uploads.wait(ticket)
        }
    }

    /// Forgets a ticket that will not be waited on.
    pub fn release(&self, ticket: Ticket) {
        if ticket & DOWNLOAD_BIT != 0 {
            self.downloads().release(ticket);
        } else {
            self.uploads.release(ticket);
        }
    }

    /// Uploads copied by the upload kernel so far.
    pub fn upload_kernel_launches(&self) -> u64 {
        self.uploads.kernel_launches()
    }

    /// Pinned staging bytes held by both directions.
    pub fn staging_reserved(&self) -> u64 {
        self.uploads.staging_reserved() + self.downloads().staging_reserved()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    #[test]
    fn spread_copies_land_exactly_in_parallel_parts() {
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
                let (d, s) = (
                    dst[skew_dst..].as_mut_ptr() as u64,
                    src[skew_src..].as_ptr() as u64,
                );
                ProcessMemory.copy_spread(d, s, n as u64);
                assert!(
                    dst[skew_dst..skew_dst + n] == src[skew_src..],
                    "{n} bytes differ"
                );
                assert_eq!(dst[skew_dst + n], 0, "wrote past the end");
                dst.fill(0);
                ProcessMemory.copy(d, s, n as u64);
                assert!(
                    dst[skew_dst..skew_dst + n] == src[skew_src..],
                    "{n} bytes differ"
                );
            }
        }
    }

    #[test]
    fn tickets_route_by_direction_and_both_directions_round_trip() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        fake.set_auto_complete(true);
        let chunk = 64 << 10;
        let engine = TransferEngine::new(0, fake.clone(), fake.clone(), 11, 12, None, chunk, 4);
        let n = 5 * chunk + 17;
        let src = fake.host_alloc(n).unwrap();
        let back = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
        fake.write(src, &data);
        let req = |direction, host| TransferRequest {
            direction,
            host,
            device: dev,
            nbytes: n,
            priority: 0,
        };
        // SAFETY: fake memory, live for the test.
        let up = unsafe { engine.submit(req(Direction::HostToDevice, src)) }.unwrap();
        assert!(engine.completion_event(up).is_some());
        engine.wait(up).unwrap();
        assert_eq!(engine.state(up), None);
        // SAFETY: as above.
        let down = unsafe { engine.submit(req(Direction::DeviceToHost, back)) }.unwrap();
        assert_eq!(engine.state(down), Some(TransferState::Complete(None)));
        assert_eq!(engine.completion_event(down), None);
        engine.release(down);
        assert_eq!(engine.state(down), None);
        assert_eq!(fake.read(back, n as usize), data);
    }
}

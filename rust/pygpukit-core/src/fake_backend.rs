//! A fake device for tests: a byte budget instead of GPU memory, events that
//! complete only when the test says so, streams that can be marked capturing.
//!
//! Memory contents are real (lazily created byte vectors), so spill and restore
//! can be checked for data integrity. Copies happen at once; what the fake
//! models is *completion*: an event recorded on a stream stays pending until
//! [`FakeBackend::complete_stream`] or [`FakeBackend::complete_all`] runs (or at
//! once with [`FakeBackend::set_auto_complete`]).
//!
//! The upload kernel ([`DeviceBackend::pull_launch`]) runs for real, on host threads that
//! follow the kernel's protocol over the fake memory; events recorded on its stream after a
//! launch complete when those threads have copied every chunk.

use crate::backend::{BackendError, BackendResult, DevPtr, DeviceBackend, Event, Stream};
use crate::backend::{PullArgs, PULL_FLAG_STRIDE};
use crate::backend::{CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OUT_OF_MEMORY};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEVICE_BASE: u64 = 0x1000_0000_0000;
const HOST_BASE: u64 = 0x7000_0000_0000;
/// Gap between fake allocations, so an overrun never lands in a neighbour.
const GUARD: u64 = 1 << 20;
const CUDA_ERROR_INVALID_VALUE: i32 = 1;

#[derive(Default)]
struct Region {
    size: u64,
    bytes: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
enum EventState {
    Created,
    Pending(Stream),
    /// Recorded after upload kernels that had not finished: complete once they all have.
    AfterPulls(Vec<Arc<AtomicBool>>),
    Complete,
}

impl EventState {
    fn pending_on(&self, stream: Stream) -> bool {
        matches!(self, EventState::Pending(s) if *s == stream)
    }
}

/// How the fake's upload kernel behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullMode {
    /// Launches run (the default).
    Run,
    /// `pull_launch` returns `CUDA_ERROR_NOT_SUPPORTED`, as a backend without the kernel would.
    Unsupported,
    /// The next launch fails with `CUDA_ERROR_LAUNCH_FAILED` (719), then `Run`.
    FailNext,
    /// Launches succeed but the kernel faults before reading anything: its events report 719.
    Fault,
}

/// What `event_query` and `event_synchronize` report after a faulted upload kernel.
const CUDA_ERROR_LAUNCH_FAILED: i32 = 719;
/// An emulated kernel that waits this long for a chunk gives up (a test would otherwise hang).
const PULL_PATIENCE: Duration = Duration::from_secs(20);

#[derive(Default)]
struct State {
    device_used: u64,
    next_device: u64,
    next_host: u64,
    regions: BTreeMap<u64, Region>,
    events: HashMap<Event, EventState>,
    next_event: Event,
    capturing: HashSet<Stream>,
    auto_complete: bool,
    idle_streams: HashSet<Stream>,
    /// How often each stream's recorded work was completed (by the test or a host wait).
    completions: HashMap<Stream, u64>,
    waits: Vec<(Stream, Event)>,
    copies: Vec<(u64, u64, u64, Stream)>,
    /// Per event: how many `memcpy_async` calls came before its last record.
    copies_at_record: HashMap<Event, usize>,
    /// Per copy: its stream's completion count when it was enqueued.
    copy_epochs: Vec<u64>,
    /// `memcpy_async` calls left before one fails (then none again).
    fail_copy_in: Option<u64>,
    host_used: u64,
    pull_mode: Option<PullMode>,
    /// Per stream: the done flags of upload kernels launched on it.
    pulls: HashMap<Stream, Vec<Arc<AtomicBool>>>,
    pull_launches: Vec<PullArgs>,
    faulted: bool,
    /// The next `event_record` on this stream fails.
    fail_record_on: Option<Stream>,
}

/// See the module documentation.
pub struct FakeBackend {
    budget: u64,
    state: Arc<Mutex<State>>,
}

/// Bytes that differ from their neighbours (never all zero), for round-trip checks in tests.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

impl FakeBackend {
    /// A device with `budget` bytes of memory.
    pub fn new(budget: u64) -> Self {
        let state = State {
            next_device: DEVICE_BASE,
            next_host: HOST_BASE,
            next_event: 1,
            ..State::default()
        };
        Self {
            budget,
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// How the upload kernel behaves from now on (see [`PullMode`]).
    pub fn set_pull_mode(&self, mode: PullMode) {
        self.lock().pull_mode = Some(mode);
    }

    /// The next `event_record` on `stream` fails (then records work again).
    pub fn fail_next_record_on(&self, stream: Stream) {
        self.lock().fail_record_on = Some(stream);
    }

    /// Every successful `pull_launch`, in order.
    pub fn pull_launches(&self) -> Vec<PullArgs> {
        self.lock().pull_launches.clone()
    }

    /// Upload kernels launched and not finished.
    pub fn pulls_running(&self) -> usize {
        self.lock()
            .pulls
            .values()
            .flatten()
            .filter(|d| !d.load(Ordering::Acquire))
            .count()
    }

    /// Reads a little-endian u32 at `addr`.
    pub fn read_u32(&self, addr: u64) -> u32 {
        read_u32(&self.state, addr)
    }

    /// Events complete as soon as they are recorded.
    pub fn set_auto_complete(&self, on: bool) {
        self.lock().auto_complete = on;
    }

    /// Marks `stream` as having no work: events recorded on it complete at once.
    pub fn set_stream_idle(&self, stream: Stream, idle: bool) {
        let mut s = self.lock();
        if idle {
            s.idle_streams.insert(stream);
        } else {
            s.idle_streams.remove(&stream);
        }
    }

    /// Completes every event recorded on `stream` so far.
    pub fn complete_stream(&self, stream: Stream) {
        let mut s = self.lock();
        for state in s.events.values_mut() {
            if state.pending_on(stream) {
                *state = EventState::Complete;
            }
        }
        *s.completions.entry(stream).or_default() += 1;
    }

    /// Completes every recorded event.
    pub fn complete_all(&self) {
        let streams: HashSet<Stream> = self
            .lock()
            .events
            .values()
            .filter_map(|e| match e {
                EventState::Pending(s) => Some(*s),
                _ => None,
            })
            .collect();
        streams.into_iter().for_each(|s| self.complete_stream(s));
    }

    /// How many times work recorded on `stream` has been completed so far: work
    /// enqueued when this read `n` is known complete once it reads more than `n`.
    pub fn completions(&self, stream: Stream) -> u64 {
        self.lock().completions.get(&stream).copied().unwrap_or(0)
    }

    pub fn set_capturing(&self, stream: Stream, capturing: bool) {
        let mut s = self.lock();
        if capturing {
            s.capturing.insert(stream);
        } else {
            s.capturing.remove(&stream);
        }
    }

    /// Device bytes currently allocated through `mem_alloc`.
    pub fn device_used(&self) -> u64 {
        self.lock().device_used
    }

    /// Host bytes currently allocated through `host_alloc`.
    pub fn host_used(&self) -> u64 {
        self.lock().host_used
    }

    /// Events created and not destroyed.
    pub fn live_events(&self) -> usize {
        self.lock().events.len()
    }

    /// Every `(stream, event)` passed to `stream_wait_event`, in order.
    pub fn waits(&self) -> Vec<(Stream, Event)> {
        self.lock().waits.clone()
    }

    /// Every `(dst, src, nbytes, stream)` passed to `memcpy_async`, in order.
    pub fn copies(&self) -> Vec<(u64, u64, u64, Stream)> {
        self.lock().copies.clone()
    }

    /// The `n`th `memcpy_async` from now (0: the next) fails without copying.
    pub fn fail_copy_after(&self, n: u64) {
        self.lock().fail_copy_in = Some(n);
    }

    /// True when a copy enqueued on `stream` may still be running (enqueued after the stream
    /// was last completed).
    pub fn copies_pending(&self, stream: Stream) -> bool {
        let s = self.lock();
        let done = s.completions.get(&stream).copied().unwrap_or(0);
        s.copies
            .iter()
            .zip(&s.copy_epochs)
            .any(|(c, &epoch)| c.3 == stream && epoch == done)
    }

    /// True when a copy that reads `[addr, addr + len)` may still be running: it was enqueued
    /// after its stream was last completed.
    pub fn reads_pending(&self, addr: u64, len: u64) -> bool {
        let s = self.lock();
        s.copies.iter().zip(&s.copy_epochs).any(|(c, &epoch)| {
            let (_, src, n, stream) = *c;
            let done = s.completions.get(&stream).copied().unwrap_or(0);
            epoch == done && src < addr + len && addr < src + n
        })
    }

    /// How many `memcpy_async` calls (see [`FakeBackend::copies`]) came before `event`'s last
    /// record: in stream order, the event covers those on its stream.
    pub fn copies_before(&self, event: Event) -> usize {
        self.lock()
            .copies_at_record
            .get(&event)
            .copied()
            .unwrap_or(0)
    }

    /// Writes `data` at `addr` (device or host), as a kernel or the user would.
    pub fn write(&self, addr: u64, data: &[u8]) {
        write(&self.state, addr, data);
    }

    /// Reads `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        read(&self.state, addr, len)
    }

    /// True when every upload kernel behind an `AfterPulls` event has finished.
    fn pulls_done(done: &[Arc<AtomicBool>]) -> bool {
        done.iter().all(|d| d.load(Ordering::Acquire))
    }

    fn new_region(s: &mut State, base: u64, size: u64) {
        s.regions.insert(base, Region { size, bytes: None });
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().expect("fake backend poisoned")
}

fn write(state: &Mutex<State>, addr: u64, data: &[u8]) {
    let mut s = lock(state);
    let (base, region) =
        find_region(&mut s.regions, addr, data.len() as u64).expect("fake write out of bounds");
    let off = (addr - base) as usize;
    let size = region.size as usize;
    region.bytes.get_or_insert_with(|| vec![0; size])[off..off + data.len()].copy_from_slice(data);
}

fn read(state: &Mutex<State>, addr: u64, len: usize) -> Vec<u8> {
    let mut s = lock(state);
    let (base, region) =
        find_region(&mut s.regions, addr, len as u64).expect("fake read out of bounds");
    let off = (addr - base) as usize;
    match &region.bytes {
        Some(bytes) => bytes[off..off + len].to_vec(),
        None => vec![0; len],
    }
}

fn read_u32(state: &Mutex<State>, addr: u64) -> u32 {
    let b = read(state, addr, 4);
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// One thread block of the emulated upload kernel: takes chunks in sequence order from
/// `next`, waits for each one's `ready` flag, copies it, then sets its `freed` flag.
fn pull_worker(state: &Mutex<State>, args: &PullArgs, next: &AtomicU64) {
    let chunks = args.nbytes.div_ceil(args.chunk_bytes);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= chunks {
            return;
        }
        let seq = args.first_seq + i;
        let slot = seq % args.slots as u64;
        let want = ((seq / args.slots as u64) as u32).wrapping_add(1);
        let ready = args.ready + slot * PULL_FLAG_STRIDE;
        let start = Instant::now();
        while (read_u32(state, ready).wrapping_sub(want) as i32) < 0 {
            assert!(
                start.elapsed() < PULL_PATIENCE,
                "fake upload kernel: chunk {seq} never ready"
            );
            std::thread::yield_now();
        }
        let len = args.chunk_bytes.min(args.nbytes - i * args.chunk_bytes);
        let data = read(state, args.ring + slot * args.chunk_bytes, len as usize);
        write(state, args.dst + i * args.chunk_bytes, &data);
        write(
            state,
            args.freed + slot * PULL_FLAG_STRIDE,
            &want.to_le_bytes(),
        );
    }
}

fn find_region(
    regions: &mut BTreeMap<u64, Region>,
    addr: u64,
    len: u64,
) -> Option<(u64, &mut Region)> {
    let (&base, region) = regions.range_mut(..=addr).next_back()?;
    (addr + len <= base + region.size).then_some((base, region))
}

impl DeviceBackend for FakeBackend {
    fn mem_alloc(&self, _device: i32, nbytes: u64) -> BackendResult<DevPtr> {
        let mut s = self.lock();
        if s.device_used + nbytes > self.budget {
            return Err(BackendError::new(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"));
        }
        let base = s.next_device;
        // 256-byte aligned, as cuMemAlloc is.
        s.next_device += (nbytes.max(1) + GUARD).next_multiple_of(256);
        s.device_used += nbytes;
        Self::new_region(&mut s, base, nbytes);
        Ok(base)
    }

    fn mem_free(&self, _device: i32, ptr: DevPtr) -> BackendResult<()> {
        let mut s = self.lock();
        match s.regions.remove(&ptr) {
            Some(region) if ptr < HOST_BASE => {
                s.device_used -= region.size;
                Ok(())
            }
            _ => Err(BackendError::new(CUDA_ERROR_INVALID_VALUE, "cuMemFree")),
        }
    }

    fn mem_get_info(&self, _device: i32) -> BackendResult<(u64, u64)> {
        Ok((self.budget - self.lock().device_used, self.budget))
    }

    fn host_alloc(&self, nbytes: u64) -> BackendResult<u64> {
        let mut s = self.lock();
        let base = s.next_host;
        s.next_host += nbytes.max(1) + GUARD;
        s.host_used += nbytes;
        Self::new_region(&mut s, base, nbytes);
        Ok(base)
    }

    fn host_free(&self, ptr: u64) -> BackendResult<()> {
        let mut s = self.lock();
        match s.regions.remove(&ptr) {
            Some(region) if ptr >= HOST_BASE => {
                s.host_used -= region.size;
                Ok(())
            }
            _ => Err(BackendError::new(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost")),
        }
    }

    fn event_create(&self, _device: i32) -> BackendResult<Event> {
        let mut s = self.lock();
        let ev = s.next_event;
        s.next_event += 1;
        s.events.insert(ev, EventState::Created);
        Ok(ev)
    }

    fn event_destroy(&self, event: Event) -> BackendResult<()> {
        match self.lock().events.remove(&event) {
            Some(_) => Ok(()),
            None => Err(BackendError::new(
                CUDA_ERROR_INVALID_VALUE,
                "cuEventDestroy",
            )),
        }
    }

    fn event_record(&self, event: Event, stream: Stream) -> BackendResult<()> {
        let mut s = self.lock();
        if s.fail_record_on == Some(stream) {
            s.fail_record_on = None;
            return Err(BackendError::new(CUDA_ERROR_LAUNCH_FAILED, "cuEventRecord"));
        }
        let idle = s.auto_complete || s.idle_streams.contains(&stream);
        let running: Vec<Arc<AtomicBool>> = s
            .pulls
            .get(&stream)
            .into_iter()
            .flatten()
            .filter(|d| !d.load(Ordering::Acquire))
            .cloned()
            .collect();
        let next = if !running.is_empty() {
            EventState::AfterPulls(running)
        } else if idle {
            EventState::Complete
        } else {
            EventState::Pending(stream)
        };
        let copies = s.copies.len();
        match s.events.get_mut(&event) {
            Some(state) => {
                *state = next;
                s.copies_at_record.insert(event, copies);
                Ok(())
            }
            None => Err(BackendError::new(CUDA_ERROR_INVALID_VALUE, "cuEventRecord")),
        }
    }

    fn event_query(&self, event: Event) -> BackendResult<bool> {
        let s = self.lock();
        if s.faulted {
            return Err(BackendError::new(CUDA_ERROR_LAUNCH_FAILED, "cuEventQuery"));
        }
        match s.events.get(&event) {
            Some(EventState::Pending(_)) => Ok(false),
            Some(EventState::AfterPulls(done)) => Ok(Self::pulls_done(done)),
            Some(_) => Ok(true),
            None => Err(BackendError::new(CUDA_ERROR_INVALID_VALUE, "cuEventQuery")),
        }
    }

    /// The fake has no device to wait for: synchronizing completes the event's stream, or
    /// waits for the upload kernels the event was recorded after.
    fn event_synchronize(&self, event: Event) -> BackendResult<()> {
        let (state, faulted) = {
            let s = self.lock();
            (s.events.get(&event).cloned(), s.faulted)
        };
        if faulted {
            return Err(BackendError::new(
                CUDA_ERROR_LAUNCH_FAILED,
                "cuEventSynchronize",
            ));
        }
        match state {
            Some(EventState::Pending(stream)) => {
                self.complete_stream(stream);
                Ok(())
            }
            Some(EventState::AfterPulls(done)) => {
                while !Self::pulls_done(&done) {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Ok(())
            }
            Some(_) => Ok(()),
            None => Err(BackendError::new(
                CUDA_ERROR_NOT_READY,
                "cuEventSynchronize",
            )),
        }
    }

    fn stream_wait_event(&self, stream: Stream, event: Event) -> BackendResult<()> {
        self.lock().waits.push((stream, event));
        Ok(())
    }

    fn memcpy_async(&self, dst: u64, src: u64, nbytes: u64, stream: Stream) -> BackendResult<()> {
        {
            let mut s = self.lock();
            match s.fail_copy_in {
                Some(0) => {
                    s.fail_copy_in = None;
                    return Err(BackendError::new(CUDA_ERROR_INVALID_VALUE, "cuMemcpyAsync"));
                }
                Some(n) => s.fail_copy_in = Some(n - 1),
                None => {}
            }
        }
        let data = self.read(src, nbytes as usize);
        self.write(dst, &data);
        let mut s = self.lock();
        let epoch = s.completions.get(&stream).copied().unwrap_or(0);
        s.copies.push((dst, src, nbytes, stream));
        s.copy_epochs.push(epoch);
        Ok(())
    }

    fn stream_is_capturing(&self, stream: Stream) -> BackendResult<bool> {
        Ok(self.lock().capturing.contains(&stream))
    }

    /// Runs the kernel on up to four host threads (see [`pull_worker`]).
    fn pull_launch(&self, _device: i32, stream: Stream, args: &PullArgs) -> BackendResult<()> {
        let mut s = self.lock();
        match s.pull_mode.unwrap_or(PullMode::Run) {
            PullMode::Unsupported => {
                return Err(BackendError::new(CUDA_ERROR_NOT_SUPPORTED, "pull_launch"))
            }
            PullMode::FailNext => {
                s.pull_mode = Some(PullMode::Run);
                return Err(BackendError::new(
                    CUDA_ERROR_LAUNCH_FAILED,
                    "cuLaunchKernel",
                ));
            }
            PullMode::Fault => {
                s.faulted = true;
                s.pull_launches.push(*args);
                return Ok(());
            }
            PullMode::Run => {}
        }
        assert!(
            args.dst % 16 == 0 && args.chunk_bytes % 16 == 0,
            "misaligned pull"
        );
        let done = Arc::new(AtomicBool::new(false));
        s.pulls.entry(stream).or_default().push(done.clone());
        s.pull_launches.push(*args);
        drop(s);
        let (state, args) = (self.state.clone(), *args);
        std::thread::spawn(move || {
            // Marks the kernel finished even if a worker panics, so no wait on it hangs.
            struct Finished(Arc<AtomicBool>);
            impl Drop for Finished {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _finished = Finished(done);
            let next = AtomicU64::new(0);
            let workers = args.ctas.clamp(1, 4);
            std::thread::scope(|scope| {
                for _ in 0..workers {
                    scope.spawn(|| pull_worker(&state, &args, &next));
                }
            });
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_enforced_and_returned_on_free() {
        let fake = FakeBackend::new(1000);
        let a = fake.mem_alloc(0, 600).unwrap();
        assert!(fake.mem_alloc(0, 600).unwrap_err().is_out_of_memory());
        fake.mem_free(0, a).unwrap();
        assert!(fake.mem_alloc(0, 600).is_ok());
    }

    #[test]
    fn events_stay_pending_until_completed() {
        let fake = FakeBackend::new(0);
        let ev = fake.event_create(0).unwrap();
        fake.event_record(ev, 7).unwrap();
        assert!(!fake.event_query(ev).unwrap());
        fake.complete_stream(8);
        assert!(!fake.event_query(ev).unwrap());
        fake.complete_stream(7);
        assert!(fake.event_query(ev).unwrap());
    }

    #[test]
    fn copies_move_bytes_between_device_and_host() {
        let fake = FakeBackend::new(1 << 20);
        let dev = fake.mem_alloc(0, 64).unwrap();
        let host = fake.host_alloc(64).unwrap();
        fake.write(dev + 8, &[1, 2, 3]);
        fake.memcpy_async(host, dev, 64, 0).unwrap();
        assert_eq!(fake.read(host + 8, 3), vec![1, 2, 3]);
    }
}

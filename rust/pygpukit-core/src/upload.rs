//! Host-to-device uploads of pageable memory, staged through pinned slots by
//! several threads at once.
//!
//! Why several threads, and why this shape: one core copies pageable memory at
//! ~11 GB/s while a PCIe 5 link moves ~55, so the staging copy bounds an upload
//! unless most cores copy. On an H200 host a prototype in which each of 8
//! threads copied a whole 4 MiB chunk into its own pinned slot and enqueued that
//! chunk's DMA itself, with no barrier between threads, reached 48.7 GB/s (88%
//! of pinned). Splitting every chunk across all threads behind a latch (32 GB/s)
//! or staging batches of chunks behind a barrier (27-30 GB/s) both idle either
//! the copy engine or the cores at each barrier.
//!
//! So each chunk flows through [`Uploads::work`], the one worker loop, run by
//! the submitting thread and by pool threads ([`crate::transfer::copy_threads`]):
//! 1. under the lock: claim the next chunk of the highest-priority job (ties:
//!    oldest first) and a free staging slot;
//! 2. without the lock: wait for the slot's event, copy the chunk into the slot,
//!    `memcpy_async` it on the H2D stream, record the slot's event;
//! 3. under the lock: count the chunk enqueued and give the slot back. Whoever
//!    counts a job's last chunk records the job's completion event on the H2D
//!    stream: every DMA of the job was enqueued on that one stream before it, so
//!    the event covers them all.
//!
//! Invariant: a slot is rewritten only after the event recorded after its last
//! DMA has completed (the claimer waits for it before copying).
//!
//! Copies shorter than two chunks run on the submitting thread alone (waking
//! pool threads would cost more than it saves), in smaller chunks so that the
//! host copy of one overlaps the DMA of the previous one.
//!
//! Longer copies, when the backend has the upload kernel and a pull stream is
//! configured, take the ring instead of staging slots (`pull_ring.rs`): the same
//! threads and claim loop, but a chunk is copied into a small cached ring that a
//! kernel on the pull stream reads, instead of a slot that the copy engine reads.
//! Chunk sequence numbers are handed out per job, in launch order: one pulled job
//! is claimed at a time (the others wait for it, and lend it their priority),
//! and its kernel is launched when its first chunk is claimed. A kernel waits for
//! every chunk of its range, so a pulled job that fails still releases its
//! remaining chunks, uncopied (on a failed device, each release fails within a
//! check interval instead of waiting for the kernel).

use crate::backend::{BackendError, BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use crate::pull_ring::{PullRing, PULL_CHUNK, PULL_CTAS, PULL_SLOTS};
use crate::transfer::{copy_threads, HostMemory, Ticket, TransferRequest, TransferState};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The chunk of a large upload: 4 MiB, each copied whole by one thread. The prototype's
/// number (48.7 GB/s on an H200 host); long enough that a chunk's two driver calls and two
/// short critical sections (~10 us) are a few percent of its ~90 us of DMA.
pub const UPLOAD_CHUNK: u64 = 4 << 20;

/// Threads that copy a large upload, its submitter included (fewer where the process has
/// fewer copy threads, which is at most one per core). The host copy, not the link, is the
/// limit: each uploaded byte is read from the source, written to staging and read again by the
/// DMA. 1 GiB from random pageable data on two H200 hosts (16 cores, pinned 54-55 GB/s), median
/// GB/s: 8 threads 44 / -, 12 threads 49 / 40, 16 threads 49 / 44. Smaller chunks (0.25-2 MiB)
/// and cached stores instead of streaming ones were slower on both.
pub const UPLOAD_WORKERS: usize = 16;

/// Staging slots per copying thread: one being filled while the previous one's DMA runs (as in
/// the prototype: 16 slots for 8 threads; 32 slots, 128 MiB of pinned memory, for 16).
pub const SLOTS_PER_WORKER: usize = 2;

/// A copy shorter than two chunks, done by its submitter alone, goes in chunks of 1/4 of the
/// configured size (1 MiB of 4 MiB): short enough to overlap the host copy with the DMA of the
/// previous chunk, long enough that the two driver calls per chunk (~5-10 us) stay noise.
const INLINE_PARTS: u64 = 4;

/// Why a pulled job was staged instead.
enum Refused {
    /// Pinned memory, device memory or an event ran short: stage this job, try the next.
    ShortOf,
    /// The launch (or ordering it) failed: stage from now on.
    Launch,
}

/// A pinned buffer of the configured chunk size and the event recorded after its last DMA.
struct Slot {
    ptr: u64,
    event: Event,
    /// The event was recorded and may not have completed yet.
    armed: bool,
}

/// How a job's chunks reach the device.
enum Route {
    /// Through a staging slot and `memcpy_async` on the H2D stream.
    Staged,
    /// Through the ring, read by the upload kernel; `launch` is set once it is enqueued.
    Pulled { launch: Option<Launch> },
}

#[derive(Clone)]
struct Launch {
    first_seq: u64,
    /// Recorded on the pull stream after the kernel.
    event: Event,
    /// Why `event` could not be recorded after the launch: the device is failing, and the
    /// kernel's progress cannot be watched, so waits for its slots fail at once.
    unwatched: Option<BackendError>,
}

struct Job {
    request: TransferRequest,
    chunk: u64,
    route: Route,
    /// Bytes handed out to threads, from the start.
    claimed: u64,
    /// Chunks claimed and not yet counted.
    in_progress: u32,
    error: Option<BackendError>,
}

impl Job {
    fn launched(&self) -> bool {
        matches!(self.route, Route::Pulled { launch: Some(_) })
    }

    fn waits_for_launch(&self) -> bool {
        matches!(self.route, Route::Pulled { launch: None })
    }

    /// Chunks are left to hand out. A launched kernel waits for all of its chunks, so a failed
    /// pulled job keeps handing them out (they are released uncopied).
    fn claimable(&self) -> bool {
        self.claimed < self.request.nbytes && (self.error.is_none() || self.launched())
    }

    fn finished(&self) -> bool {
        self.in_progress == 0 && !self.claimable()
    }
}

/// How a claimed chunk travels.
enum ClaimKind {
    Staged {
        /// `None`: the thread creates a new slot (the engine has fewer than its maximum).
        slot: Option<Slot>,
        /// The slot was created for this claim (its bytes join the reserved count).
        created: bool,
        /// The slot's state is unknown after a failed wait or record: it is never reused.
        lost: bool,
    },
    Pulled {
        ring: Arc<PullRing>,
        seq: u64,
        /// The job's launch: its completion event tells a failed kernel from a slow one.
        launch: Launch,
        /// False for a failed job: the chunk is only released to the kernel.
        copy: bool,
    },
}

/// One chunk handed to a thread.
struct Claim {
    ticket: Ticket,
    host: u64,
    device: u64,
    len: u64,
    kind: ClaimKind,
}

/// A job's outcome, kept until its ticket is released.
struct Done {
    /// The first error of its chunks.
    error: Option<BackendError>,
    /// Completes with the whole copy (none for an empty copy, or a failed record).
    event: Option<Event>,
    /// Where its copies ran (the H2D stream, or the pull stream), for a failed job's wait for
    /// what it enqueued; none when the device failed and there is nothing to wait for.
    stream: Option<Stream>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<Ticket, Job>,
    /// Finished jobs.
    done: HashMap<Ticket, Done>,
    /// Idle slots, the longest idle first (its DMA is the most likely to have completed).
    free: VecDeque<Slot>,
    /// Slots that exist or are being created.
    slots: usize,
    /// Pool threads inside `work`.
    helpers: usize,
    events: EventPool,
    reserved: u64,
    /// Created with the first pulled job.
    ring: Option<Arc<PullRing>>,
    /// The first sequence number of the next launch.
    next_seq: u64,
    /// The launched job whose chunks are being handed out (one at a time, in sequence order).
    pulling: Option<Ticket>,
    /// The kernel could not be launched, or one failed: stage from now on.
    pull_off: bool,
    /// Upload kernels launched.
    launches: u64,
}

/// See the module documentation.
pub struct Uploads {
    device: i32,
    stream: Stream,
    /// Where upload kernels run (none: every copy is staged).
    pull_stream: Option<Stream>,
    chunk: u64,
    max_slots: usize,
    /// Pool threads a large copy asks for (its submitter is one more worker).
    max_helpers: usize,
    backend: Arc<dyn DeviceBackend>,
    host: Arc<dyn HostMemory>,
    state: Mutex<State>,
    /// Signalled when a chunk is counted (a slot comes free, a job may finish).
    changed: Condvar,
}

impl Uploads {
    /// Uploads on `stream` in chunks of `chunk` bytes (production: [`UPLOAD_CHUNK`]); a copy
    /// of two chunks or more is spread over up to `workers` threads (production:
    /// [`UPLOAD_WORKERS`]), and pulled through the ring by a kernel on `pull_stream` when
    /// there is one and the backend can launch it, else staged through
    /// `workers * SLOTS_PER_WORKER` pinned slots.
    pub fn new(
        device: i32,
        backend: Arc<dyn DeviceBackend>,
        host: Arc<dyn HostMemory>,
        stream: Stream,
        pull_stream: Option<Stream>,
        chunk: u64,
        workers: usize,
    ) -> Self {
        let workers = workers.max(1);
        Self {
            device,
            stream,
            pull_stream,
            chunk: chunk.max(1),
            max_slots: workers * SLOTS_PER_WORKER,
            max_helpers: workers - 1,
            backend,
            host,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent; a panic elsewhere must not
        // make uploads unusable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_changed<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a copy under `ticket` (unique per engine) and, for a copy of two chunks or more,
    /// wakes pool threads to work on it. The host and device ranges must stay valid until the
    /// ticket is complete; nothing is copied until someone calls [`Uploads::finish`] (or
    /// pool threads pick it up).
    pub fn submit(self: &Arc<Self>, ticket: Ticket, request: TransferRequest) {
        let mut st = self.lock();
        if request.nbytes == 0 {
            let done = Done {
                error: None,
                event: None,
                stream: None,
            };
            st.done.insert(ticket, done);
            return;
        }
        let spread = request.nbytes >= 2 * self.chunk;
        // The kernel copies 16-byte vectors.
        let pulled =
            spread && self.pull_stream.is_some() && !st.pull_off && request.device % 16 == 0;
        let (chunk, route) = if pulled {
            (PULL_CHUNK, Route::Pulled { launch: None })
        } else if spread {
            (self.chunk, Route::Staged)
        } else {
            ((self.chunk / INLINE_PARTS).max(1), Route::Staged)
        };
        st.jobs.insert(
            ticket,
            Job {
                request,
                chunk,
                route,
                claimed: 0,
                in_progress: 0,
                error: None,
            },
        );
        if !spread {
            return;
        }
        let pool = copy_threads();
        let wanted = self.max_helpers.min(pool.helpers());
        while st.helpers < wanted {
            let me = self.clone();
            if !pool.run(Box::new(move || me.work(None))) {
                break;
            }
            st.helpers += 1;
        }
    }

    /// Works on the copies (highest priority first) until every chunk of `ticket` is enqueued;
    /// then its result: the first backend error of its chunks, which also forgets the ticket.
    /// A failed copy returns only after the chunks already enqueued have landed: the caller
    /// may free the destination on the error, and a late DMA would write into its next owner.
    pub fn finish(&self, ticket: Ticket) -> BackendResult<()> {
        self.work(Some(ticket));
        let mut st = self.lock();
        if st.done.get(&ticket).is_none_or(|d| d.error.is_none()) {
            return Ok(());
        }
        let done = st.done.remove(&ticket).expect("checked above");
        // Every copy of the job was enqueued on its stream before this event (a kernel's
        // completion event was recorded after it).
        let event = match (done.event, done.stream) {
            (Some(ev), _) => Ok(ev),
            (None, Some(stream)) => st.events.record(&*self.backend, self.device, stream),
            (None, None) => return Err(done.error.expect("checked above")),
        };
        if let Ok(ev) = event {
            drop(st);
            let waited = self.backend.event_synchronize(ev);
            st = self.lock();
            if waited.is_ok() {
                st.events.give(ev);
            }
        }
        Err(done.error.expect("checked above"))
    }

    /// The worker loop (see the module documentation). With `until`, the submitter's call:
    /// returns once that job has finished. Without, a pool thread's: returns when no chunk is
    /// left to claim.
    fn work(&self, until: Option<Ticket>) {
        if until.is_none() {
            // A pool thread's first driver call names the device: the CUDA backend binds that
            // device's primary context for it (the one the upload stream belongs to), which the
            // calls that follow, naming only streams and events, need. The pool's threads serve
            // every device's engine, so this runs per task, not once per thread. Its answer
            // does not matter here.
            let _ = self.backend.mem_get_info(self.device);
        }
        let mut st = self.lock();
        loop {
            let (guard, claim) = self.claim(st, until);
            st = guard;
            let Some(mut claim) = claim else { break };
            drop(st);
            let result = self.stage(&mut claim);
            st = self.lock();
            self.count(&mut st, claim, result);
        }
        match until {
            // Decided under the same lock as "nothing to claim": a later submit sees the
            // thread gone and wakes another.
            None => st.helpers -= 1,
            // Other threads may still be staging this job's last chunks.
            Some(t) => {
                while st.jobs.contains_key(&t) {
                    st = self.wait_changed(st);
                }
            }
        }
    }

    /// The job to claim from next: the highest priority (ties: oldest first) among jobs with
    /// chunks to hand out. A pulled job waiting for its launch stands for the pulled job being
    /// claimed, if any, which must be handed out first (its kernel runs first).
    fn next_job(st: &State) -> Option<Ticket> {
        st.jobs
            .iter()
            .filter(|(_, j)| j.claimable())
            .map(|(&t, j)| {
                let target = match st.pulling {
                    Some(p) if j.waits_for_launch() => p,
                    _ => t,
                };
                ((j.request.priority, std::cmp::Reverse(t)), target)
            })
            .max_by_key(|&(key, _)| key)
            .map(|(_, target)| target)
    }

    /// Step 1: the next chunk, and a slot for it (staged) or its sequence number (pulled),
    /// waiting for a slot to come free if needed.
    fn claim<'a>(
        &self,
        mut st: MutexGuard<'a, State>,
        until: Option<Ticket>,
    ) -> (MutexGuard<'a, State>, Option<Claim>) {
        loop {
            if let Some(t) = until {
                if !st.jobs.get(&t).is_some_and(Job::claimable) {
                    return (st, None);
                }
            }
            let Some(ticket) = Self::next_job(&st) else {
                return (st, None);
            };
            if st.jobs[&ticket].waits_for_launch() {
                self.launch_or_stage(&mut st, ticket);
            }
            let kind = match st.jobs[&ticket].route {
                Route::Staged => {
                    let (slot, created) = match st.free.pop_front() {
                        Some(s) => (Some(s), false),
                        None if st.slots < self.max_slots => {
                            st.slots += 1;
                            (None, true)
                        }
                        None => {
                            st = self.wait_changed(st);
                            continue;
                        }
                    };
                    ClaimKind::Staged {
                        slot,
                        created,
                        lost: false,
                    }
                }
                Route::Pulled { ref launch } => {
                    let launch = launch.clone().expect("launched above");
                    let job = &st.jobs[&ticket];
                    ClaimKind::Pulled {
                        ring: st.ring.clone().expect("created by the launch"),
                        seq: launch.first_seq + job.claimed / job.chunk,
                        launch,
                        copy: job.error.is_none(),
                    }
                }
            };
            let job = st.jobs.get_mut(&ticket).expect("chosen above");
            let offset = job.claimed;
            let len = job.chunk.min(job.request.nbytes - offset);
            job.claimed += len;
            job.in_progress += 1;
            let claim = Claim {
                ticket,
                host: job.request.host + offset,
                device: job.request.device + offset,
                len,
                kind,
            };
            if st.pulling == Some(ticket) && !st.jobs[&ticket].claimable() {
                // Its range is handed out: the next pulled job's range follows it.
                st.pulling = None;
            }
            return (st, Some(claim));
        }
    }

    /// A pulled job's first claim: launches its kernel after the ring's previous launches, or
    /// turns the job back to staging: this one only if pinned memory or an event ran short,
    /// every later one too if the kernel cannot be launched on this device.
    fn launch_or_stage(&self, st: &mut State, ticket: Ticket) {
        if !st.pull_off {
            match self.launch(st, ticket) {
                Ok(()) => return,
                Err(Refused::ShortOf) => {}
                // Most likely no kernel for this device (CUDA_ERROR_NOT_SUPPORTED); staging
                // still works, and reports any real device failure itself.
                Err(Refused::Launch) => {
                    st.pull_off = true;
                    if st.launches == 0 {
                        if let Some(ring) = st.ring.take().and_then(Arc::into_inner) {
                            st.reserved -= ring.reserved();
                            ring.destroy(&*self.backend, self.device);
                        }
                    }
                }
            }
        }
        let job = st.jobs.get_mut(&ticket).expect("chosen by the caller");
        job.route = Route::Staged;
        job.chunk = self.chunk;
    }

    fn launch(&self, st: &mut State, ticket: Ticket) -> Result<(), Refused> {
        let backend = &*self.backend;
        let pull_stream = self.pull_stream.expect("pulled jobs need a pull stream");
        if st.ring.is_none() {
            let ring = PullRing::create(backend, &*self.host, self.device, PULL_CHUNK, PULL_SLOTS)
                .map_err(|_| Refused::ShortOf)?;
            st.reserved += ring.reserved();
            st.ring = Some(Arc::new(ring));
        }
        // Taken first: once the kernel runs, the job must have an event to watch it by.
        let done = st
            .events
            .take(backend, self.device)
            .map_err(|_| Refused::ShortOf)?;
        // The pull stream starts after the H2D stream, which the submitter ordered after the
        // destination's earlier users.
        let ordered = st
            .events
            .record(backend, self.device, self.stream)
            .and_then(|after| {
                let waited = backend.stream_wait_event(pull_stream, after);
                st.events.give(after);
                waited
            });
        let ring = st.ring.clone().expect("created above");
        let request = st.jobs[&ticket].request;
        let args = ring.args(request.device, st.next_seq, request.nbytes, PULL_CTAS);
        let launched = ordered.and_then(|()| backend.pull_launch(self.device, pull_stream, &args));
        if launched.is_err() {
            st.events.give(done);
            return Err(Refused::Launch);
        }
        // From here on the kernel waits for every chunk of the range.
        st.next_seq += ring.chunks(request.nbytes);
        st.pulling = Some(ticket);
        st.launches += 1;
        let unwatched = backend.event_record(done, pull_stream).err();
        let job = st.jobs.get_mut(&ticket).expect("chosen by the caller");
        if let Some(e) = &unwatched {
            job.error.get_or_insert(e.clone());
        }
        job.route = Route::Pulled {
            launch: Some(Launch {
                first_seq: args.first_seq,
                event: done,
                unwatched,
            }),
        };
        Ok(())
    }

    /// Step 2, without the lock: the slot (or ring chunk) is this thread's until it is counted.
    fn stage(&self, c: &mut Claim) -> BackendResult<()> {
        match &mut c.kind {
            ClaimKind::Staged { slot, lost, .. } => {
                self.stage_slot(slot, lost, c.host, c.device, c.len)
            }
            ClaimKind::Pulled {
                ring,
                seq,
                launch,
                copy,
            } => {
                let finished = || match &launch.unwatched {
                    None => self.backend.event_query(launch.event),
                    Some(e) => Err(e.clone()),
                };
                let src = copy.then_some(c.host);
                ring.fill(&*self.host, *seq, src, c.len, finished)
            }
        }
    }

    fn stage_slot(
        &self,
        slot: &mut Option<Slot>,
        lost: &mut bool,
        host: u64,
        device: u64,
        len: u64,
    ) -> BackendResult<()> {
        if slot.is_none() {
            let ptr = self.backend.host_alloc(self.chunk)?;
            let event = match self.backend.event_create(self.device) {
                Ok(ev) => ev,
                Err(e) => {
                    // Nothing has read the buffer yet.
                    let _ = self.backend.host_free(ptr);
                    return Err(e);
                }
            };
            *slot = Some(Slot {
                ptr,
                event,
                armed: false,
            });
        }
        let slot = slot.as_mut().expect("created above");
        if slot.armed {
            if let Err(e) = self.backend.event_synchronize(slot.event) {
                *lost = true;
                return Err(e);
            }
            slot.armed = false;
        }
        self.host.copy(slot.ptr, host, len);
        // A failed enqueue read nothing: the slot stays idle and reusable.
        self.backend
            .memcpy_async(device, slot.ptr, len, self.stream)?;
        if let Err(e) = self.backend.event_record(slot.event, self.stream) {
            // The DMA may read the slot with no event to tell when it is done.
            *lost = true;
            return Err(e);
        }
        slot.armed = true;
        Ok(())
    }

    /// Step 3: the slot goes back, the chunk is counted, and the job finishes with its last one.
    fn count(&self, st: &mut State, c: Claim, result: BackendResult<()>) {
        match c.kind {
            ClaimKind::Staged {
                slot,
                created,
                lost,
            } => match slot {
                Some(slot) => {
                    if created {
                        st.reserved += self.chunk;
                    }
                    if lost {
                        // Kept pinned (and counted) but never reused: a DMA may still read it.
                        st.slots -= 1;
                    } else {
                        st.free.push_back(slot);
                    }
                }
                None => st.slots -= 1, // its creation failed
            },
            ClaimKind::Pulled { .. } => {
                if result.is_err() {
                    // The kernel failed, or could not be watched: later uploads are staged. The
                    // rest of this one is still released to the kernel, uncopied, in case it is
                    // alive (on a failed device each release fails within a check interval).
                    st.pull_off = true;
                }
            }
        }
        let job = st.jobs.get_mut(&c.ticket).expect("a claimed job stays");
        job.in_progress -= 1;
        if let Err(e) = result {
            job.error.get_or_insert(e);
        }
        if job.finished() {
            let job = st.jobs.remove(&c.ticket).expect("present above");
            let done = match job.route {
                Route::Pulled {
                    launch: Some(launch),
                } => match launch.unwatched {
                    None => Done {
                        error: job.error,
                        event: Some(launch.event),
                        stream: self.pull_stream,
                    },
                    Some(_) => {
                        // Never recorded; the device failed, nothing to wait for.
                        st.events.give(launch.event);
                        Done {
                            error: job.error,
                            event: None,
                            stream: None,
                        }
                    }
                },
                _ => {
                    // Recorded under the lock so that whoever sees the job done finds the
                    // event. Every DMA of the job was enqueued on the stream before it.
                    let (error, event) = match job.error {
                        Some(e) => (Some(e), None),
                        None => match st.events.record(&*self.backend, self.device, self.stream) {
                            Ok(ev) => (None, Some(ev)),
                            Err(e) => (Some(e), None),
                        },
                    };
                    Done {
                        error,
                        event,
                        stream: Some(self.stream),
                    }
                }
            };
            st.done.insert(c.ticket, done);
        }
        self.changed.notify_all();
    }

    /// Where `ticket` stands; `None` for an unknown, released or failed ticket.
    pub fn state(&self, ticket: Ticket) -> Option<TransferState> {
        let st = self.lock();
        if let Some(d) = st.done.get(&ticket).filter(|d| d.error.is_none()) {
            return Some(TransferState::Complete(d.event));
        }
        let job = st.jobs.get(&ticket)?;
        Some(if job.claimable() {
            TransferState::Queued
        } else {
            TransferState::InFlight
        })
    }

    /// The event that completes with the whole copy of a finished ticket.
    pub fn completion_event(&self, ticket: Ticket) -> Option<Event> {
        match self.lock().done.get(&ticket) {
            Some(d) if d.error.is_none() => d.event,
            _ => None,
        }
    }

    /// Finishes `ticket`, waits on the host for its copy, then forgets it.
    pub fn wait(&self, ticket: Ticket) -> BackendResult<()> {
        self.finish(ticket)?;
        if let Some(ev) = self.completion_event(ticket) {
            self.backend.event_synchronize(ev)?;
        }
        self.release(ticket);
        Ok(())
    }

    /// Forgets a ticket (its event returns to the engine's pool).
    pub fn release(&self, ticket: Ticket) {
        let mut st = self.lock();
        if let Some(Done {
            error: None,
            event: Some(ev),
            ..
        }) = st.done.remove(&ticket)
        {
            st.events.give(ev);
        }
    }

    /// Pinned staging bytes held (slots and the ring).
    pub fn staging_reserved(&self) -> u64 {
        self.lock().reserved
    }

    /// Uploads copied by the upload kernel so far (the rest were staged).
    pub fn kernel_launches(&self) -> u64 {
        self.lock().launches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::{pattern, FakeBackend, PullMode};
    use crate::transfer::Direction;
    use std::collections::HashSet;
    use std::time::Duration;

    const CHUNK: u64 = 64 << 10;
    const STREAM: Stream = 11;

    fn upload(host: u64, device: u64, nbytes: u64, priority: i32) -> TransferRequest {
        TransferRequest {
            direction: Direction::HostToDevice,
            host,
            device,
            nbytes,
            priority,
        }
    }

    fn engine(fake: &Arc<FakeBackend>, host: Arc<dyn HostMemory>, workers: usize) -> Arc<Uploads> {
        Arc::new(Uploads::new(
            0,
            fake.clone(),
            host,
            STREAM,
            None,
            CHUNK,
            workers,
        ))
    }

    /// Host copies as the engine makes them: checks that no staging slot is rewritten while a
    /// DMA reading it may still run, counts how often each host byte is staged, and makes the
    /// first copy wait (up to 10 s) for a copy on another thread, so a spread upload provably
    /// runs on two threads at once.
    struct Recorder {
        fake: Arc<FakeBackend>,
        host: (u64, u64),
        seen: Mutex<Vec<u8>>,
        threads: Mutex<HashSet<std::thread::ThreadId>>,
        joined: Condvar,
    }

    impl HostMemory for Recorder {
        fn copy(&self, dst: u64, src: u64, nbytes: u64) {
            assert!(
                !self.fake.reads_pending(dst, nbytes),
                "staging {dst:#x} rewritten while a DMA may read it"
            );
            let (base, n) = self.host;
            assert!(
                src >= base && src + nbytes <= base + n,
                "outside the host range"
            );
            for b in &mut self.seen.lock().unwrap()[(src - base) as usize..][..nbytes as usize] {
                *b += 1;
            }
            let mut threads = self.threads.lock().unwrap();
            threads.insert(std::thread::current().id());
            self.joined.notify_all();
            let _ = self
                .joined
                .wait_timeout_while(threads, Duration::from_secs(10), |t| t.len() < 2);
            self.fake.copy(dst, src, nbytes);
        }

        fn load_flag(&self, addr: u64) -> u32 {
            self.fake.load_flag(addr)
        }

        fn store_flag(&self, addr: u64, value: u32) {
            self.fake.store_flag(addr, value)
        }
    }

    #[test]
    fn uploads_land_intact_for_every_size_and_host_alignment() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let uploads = engine(&fake, fake.clone(), 4);
        let sizes = [
            0,
            1,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK,
            37 * CHUNK + 4097,
        ];
        for (i, n) in sizes.into_iter().enumerate() {
            for skew in [0, 3] {
                let src = fake.host_alloc(n + skew).unwrap() + skew;
                let dev = fake.mem_alloc(0, n.max(1)).unwrap();
                let data = pattern(n as usize, i as u8 + 1);
                fake.write(src, &data);
                let t = 2 * i as u64 + skew;
                let before = fake.copies().len();
                uploads.submit(t, upload(src, dev, n, 0));
                uploads.finish(t).unwrap();
                assert_eq!(fake.read(dev, n as usize), data, "{n} bytes, skew {skew}");
                let Some(ev) = uploads.completion_event(t) else {
                    assert_eq!(n, 0, "only an empty copy has no event");
                    continue;
                };
                // The event was recorded after every DMA of the copy, on the one stream.
                let copies = fake.copies();
                let mine: Vec<usize> = (before..copies.len())
                    .filter(|&k| copies[k].0 >= dev && copies[k].0 < dev + n)
                    .collect();
                assert_eq!(mine.len() as u64, n.div_ceil(uploads_chunk(n)));
                assert!(mine
                    .iter()
                    .all(|&k| k < fake.copies_before(ev) && copies[k].3 == STREAM));
                fake.stream_wait_event(5, ev).unwrap();
                uploads.wait(t).unwrap();
                assert_eq!(uploads.state(t), None);
            }
        }
        assert!(
            uploads.staging_reserved() <= 8 * CHUNK,
            "at most 2 slots per worker"
        );
    }

    fn uploads_chunk(n: u64) -> u64 {
        if n >= 2 * CHUNK {
            CHUNK
        } else {
            CHUNK / INLINE_PARTS
        }
    }

    #[test]
    fn slots_are_rewritten_only_after_their_dma_and_each_byte_is_staged_once() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let n = 41 * CHUNK + 4097; // many more chunks than slots, a short last one
        let src = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 5);
        fake.write(src, &data);
        let rec = Arc::new(Recorder {
            fake: fake.clone(),
            host: (src, n),
            seen: Mutex::new(vec![0; n as usize]),
            threads: Mutex::default(),
            joined: Condvar::new(),
        });
        let uploads = engine(&fake, rec.clone(), 3);
        uploads.submit(1, upload(src, dev, n, 0));
        uploads.wait(1).unwrap();
        assert_eq!(fake.read(dev, n as usize), data);
        assert!(
            rec.seen.lock().unwrap().iter().all(|&c| c == 1),
            "a byte staged other than once"
        );
        if copy_threads().helpers() > 0 {
            assert!(
                rec.threads.lock().unwrap().len() >= 2,
                "one thread did every chunk"
            );
        }
        let mut offsets: Vec<u64> = fake.copies().iter().map(|c| c.0 - dev).collect();
        offsets.sort_unstable();
        let expected: Vec<u64> = (0..n.div_ceil(CHUNK)).map(|i| i * CHUNK).collect();
        assert_eq!(offsets, expected, "each chunk enqueued exactly once");
        assert!(
            uploads.staging_reserved() <= 6 * CHUNK,
            "at most six slots, reused"
        );
    }

    /// Blocks the first host copy until the test opens the gate.
    struct Gate {
        fake: Arc<FakeBackend>,
        entered: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl HostMemory for Gate {
        fn copy(&self, dst: u64, src: u64, nbytes: u64) {
            if let Some(tx) = self.entered.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            let open = self.open.lock().unwrap();
            drop(self.opened.wait_while(open, |o| !*o).unwrap());
            self.fake.copy(dst, src, nbytes);
        }

        fn load_flag(&self, addr: u64) -> u32 {
            self.fake.load_flag(addr)
        }

        fn store_flag(&self, addr: u64, value: u32) {
            self.fake.store_flag(addr, value)
        }
    }

    #[test]
    fn a_higher_priority_upload_from_another_thread_is_claimed_before_the_bulk() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let src = fake.host_alloc(12 * CHUNK).unwrap();
        let dev = fake.mem_alloc(0, 12 * CHUNK).unwrap();
        let data = pattern(12 * CHUNK as usize, 7);
        fake.write(src, &data);
        let (tx, entered) = std::sync::mpsc::channel();
        let gate = Arc::new(Gate {
            fake: fake.clone(),
            entered: Mutex::new(Some(tx)),
            open: Mutex::new(false),
            opened: Condvar::new(),
        });
        // One worker: the bulk's submitter is the only thread that copies.
        let uploads = engine(&fake, gate.clone(), 1);
        let bulk = {
            let uploads = uploads.clone();
            std::thread::spawn(move || {
                uploads.submit(1, upload(src, dev, 8 * CHUNK, 0));
                uploads.wait(1)
            })
        };
        entered.recv().unwrap(); // the bulk's first chunk is being staged
        let off = 8 * CHUNK;
        uploads.submit(2, upload(src + off, dev + off, 4 * CHUNK, 5));
        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        // The bulk's submitter claims every chunk, the urgent ones first.
        bulk.join().unwrap().unwrap();
        uploads.wait(2).unwrap();
        let order: Vec<u64> = fake.copies().iter().map(|c| (c.0 - dev) / CHUNK).collect();
        assert_eq!(order, vec![0, 8, 9, 10, 11, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(fake.read(dev, 12 * CHUNK as usize), data);
    }

    #[test]
    fn a_failed_chunk_surfaces_once_and_the_engine_stays_usable() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let uploads = engine(&fake, fake.clone(), 4);
        let n = 10 * CHUNK + 5;
        let src = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 3);
        fake.write(src, &data);
        for k in [0, 3, 10] {
            fake.fail_copy_after(k);
            let before = fake.copies().len();
            uploads.submit(k, upload(src, dev, n, 0));
            let err = uploads.finish(k).unwrap_err();
            assert_eq!(err.call, "cuMemcpyAsync");
            assert!(
                !fake.copies_pending(STREAM),
                "chunk {k} failed: the error came back while enqueued chunks could still land"
            );
            assert_eq!(uploads.state(k), None, "a failed ticket is forgotten");
            let mut offsets: Vec<u64> = fake.copies()[before..].iter().map(|c| c.0).collect();
            let issued = offsets.len();
            offsets.dedup();
            assert_eq!(offsets.len(), issued, "a chunk enqueued twice");
            assert!(issued <= 10, "chunk {k} failed, yet all 11 went");
        }
        uploads.submit(99, upload(src, dev, n, 0));
        uploads.wait(99).unwrap();
        assert_eq!(fake.read(dev, n as usize), data);
        assert!(
            uploads.staging_reserved() <= 8 * CHUNK,
            "no slot leaked by the failures"
        );
    }

    const PULL_STREAM: Stream = 21;

    fn pulling_engine(fake: &Arc<FakeBackend>, workers: usize) -> Arc<Uploads> {
        let uploads = Uploads::new(
            0,
            fake.clone(),
            fake.clone(),
            STREAM,
            Some(PULL_STREAM),
            CHUNK,
            workers,
        );
        Arc::new(uploads)
    }

    /// Bytes with no period (a slot rewritten before the kernel read it shows up).
    fn noise(n: u64, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn upload_data(fake: &FakeBackend, n: u64, seed: u64) -> (u64, u64, Vec<u8>) {
        let src = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = noise(n, seed);
        fake.write(src, &data);
        (src, dev, data)
    }

    #[test]
    fn large_uploads_are_pulled_through_the_ring_in_sequence_order() {
        let fake = Arc::new(FakeBackend::new(1 << 31));
        let uploads = pulling_engine(&fake, 4);
        let ring_bytes = PULL_CHUNK * PULL_SLOTS as u64;
        // One chunk, a short last chunk, and more chunks than the ring has slots (two laps).
        let sizes = [
            2 * CHUNK,
            9 * PULL_CHUNK + 4097,
            ring_bytes + 3 * PULL_CHUNK + 16,
        ];
        let mut next_seq = 0;
        for (i, n) in sizes.into_iter().enumerate() {
            let (src, dev, data) = upload_data(&fake, n + 3, i as u64);
            // A host range at an odd address: the kernel needs only the device side aligned.
            let t = i as u64 + 1;
            uploads.submit(t, upload(src + 3, dev, n, 0));
            uploads.finish(t).unwrap();
            let ev = uploads
                .completion_event(t)
                .expect("a pulled copy has an event");
            uploads.wait(t).unwrap();
            assert!(fake.event_query(ev).unwrap(), "the event covers the kernel");
            assert_eq!(
                fake.read(dev, n as usize),
                data[3..3 + n as usize],
                "{n} bytes"
            );
            let launch = *fake.pull_launches().last().unwrap();
            assert_eq!((launch.dst, launch.nbytes), (dev, n));
            assert_eq!(launch.first_seq, next_seq, "sequence numbers run on");
            next_seq += n.div_ceil(PULL_CHUNK);
        }
        assert!(fake.copies().is_empty(), "nothing went through staging");
        assert_eq!(fake.pulls_running(), 0);
        let pulled_after_h2d = fake.waits().iter().filter(|w| w.0 == PULL_STREAM).count();
        assert_eq!(
            pulled_after_h2d,
            sizes.len(),
            "each launch waits for the H2D stream"
        );
        assert_eq!(
            uploads.staging_reserved(),
            ring_bytes + 2 * 64 * PULL_SLOTS as u64
        );
        assert_eq!(uploads.kernel_launches(), sizes.len() as u64);
    }

    #[test]
    fn small_or_misaligned_uploads_are_staged_beside_the_ring() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        fake.set_auto_complete(true);
        let uploads = pulling_engine(&fake, 4);
        let (src, dev, data) = upload_data(&fake, 4 * CHUNK + 8, 7);
        // Below two chunks: inline and staged. A device address off 16 bytes: staged.
        uploads.submit(1, upload(src, dev, CHUNK, 0));
        uploads.wait(1).unwrap();
        uploads.submit(2, upload(src + 8, dev + 8, 4 * CHUNK, 0));
        uploads.wait(2).unwrap();
        assert_eq!(fake.read(dev + 8, 4 * CHUNK as usize), data[8..]);
        assert!(fake.pull_launches().is_empty());
        assert_eq!(fake.copies().len(), INLINE_PARTS as usize + 4);
    }

    #[test]
    fn concurrent_pulled_uploads_all_land_with_contiguous_ranges() {
        let fake = Arc::new(FakeBackend::new(1 << 31));
        let uploads = pulling_engine(&fake, 4);
        let threads: Vec<_> = (0..3u64)
            .map(|k| {
                let (fake, uploads) = (fake.clone(), uploads.clone());
                std::thread::spawn(move || {
                    for r in 0..3u64 {
                        let n = (5 + 7 * k + r) * PULL_CHUNK / 2 + 32 * r;
                        let (src, dev, data) = upload_data(&fake, n, 10 * k + r);
                        let t = 100 * (k + 1) + r;
                        uploads.submit(t, upload(src, dev, n, k as i32));
                        uploads.wait(t).unwrap();
                        assert_eq!(fake.read(dev, n as usize), data, "thread {k} round {r}");
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut next = 0;
        for launch in fake.pull_launches() {
            assert_eq!(launch.first_seq, next, "launched out of sequence order");
            next += launch.nbytes.div_ceil(PULL_CHUNK);
        }
        assert_eq!(fake.pull_launches().len(), 9);
    }

    #[test]
    fn without_the_kernel_uploads_stage_and_stay_correct() {
        for mode in [PullMode::Unsupported, PullMode::FailNext] {
            let fake = Arc::new(FakeBackend::new(1 << 30));
            fake.set_pull_mode(mode);
            let uploads = pulling_engine(&fake, 4);
            for t in 1..=2 {
                let (src, dev, data) = upload_data(&fake, 9 * CHUNK + 1, t);
                uploads.submit(t, upload(src, dev, 9 * CHUNK + 1, 0));
                uploads.wait(t).unwrap();
                assert_eq!(fake.read(dev, data.len()), data, "{mode:?}");
            }
            assert!(fake.pull_launches().is_empty(), "{mode:?}");
            assert_eq!(
                fake.copies().len(),
                20,
                "{mode:?}: both staged in 10 chunks"
            );
        }
    }

    #[test]
    fn a_faulted_kernel_fails_the_upload_instead_of_hanging() {
        let fake = Arc::new(FakeBackend::new(1 << 31));
        fake.set_pull_mode(PullMode::Fault);
        let uploads = pulling_engine(&fake, 4);
        // More chunks than slots: filling must wait for the kernel, which never frees a slot.
        let n = (PULL_SLOTS as u64 + 4) * PULL_CHUNK;
        let (src, dev, _) = upload_data(&fake, n, 3);
        uploads.submit(1, upload(src, dev, n, 0));
        let err = uploads.finish(1).unwrap_err();
        assert_eq!(err.code, 719, "{err}");
        assert_eq!(uploads.state(1), None);
    }

    #[test]
    fn a_kernel_whose_event_cannot_be_recorded_fails_the_upload_instead_of_hanging() {
        let fake = Arc::new(FakeBackend::new(1 << 31));
        fake.set_pull_mode(PullMode::Fault);
        fake.fail_next_record_on(PULL_STREAM);
        let uploads = pulling_engine(&fake, 4);
        let n = (PULL_SLOTS as u64 + 4) * PULL_CHUNK;
        let (src, dev, _) = upload_data(&fake, n, 4);
        uploads.submit(1, upload(src, dev, n, 0));
        let err = uploads.finish(1).unwrap_err();
        assert_eq!(err.call, "cuEventRecord", "{err}");
        assert_eq!(uploads.state(1), None);
    }

    #[test]
    fn a_failed_launch_frees_the_unused_ring() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        fake.set_pull_mode(PullMode::FailNext);
        let uploads = pulling_engine(&fake, 1);
        let (src, dev, data) = upload_data(&fake, 9 * CHUNK, 5);
        uploads.submit(1, upload(src, dev, 9 * CHUNK, 0));
        uploads.wait(1).unwrap();
        assert_eq!(fake.read(dev, data.len()), data);
        assert!(
            uploads.staging_reserved() <= 2 * CHUNK,
            "the ring stays allocated after the kernel was turned off"
        );
    }
}

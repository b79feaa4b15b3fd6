//! Host-to-device uploads of pageable memory: staged through pinned slots by
//! several threads at once, and, for large uploads, partly DMA'd straight from
//! the source where it can be page-locked.
//!
//! Why several threads, and why this shape: one core copies pageable memory at
//! ~11 GB/s while a PCIe 5 link moves ~55, so the staging copy bounds an upload
//! unless most cores copy. On an H200 host a prototype in which each of 8
//! threads copied a whole 4 MiB chunk into its own pinned slot and enqueued that
//! chunk's DMA itself, with no barrier between threads, reached 48.7 GB/s (88%
//! of pinned). Splitting every chunk across all threads behind a latch (32 GB/s)
//! or staging batches of chunks behind a barrier (27-30 GB/s, reverted in
//! aceb7f9) both idle either the copy engine or the cores at each barrier.
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
//! The registered path. Staging moves each byte through host memory three times
//! (read from the source, written to a slot, read again by the DMA), and that
//! memory traffic bounds it at 77-90% of a pinned copy depending on the host. A
//! byte of a page-locked ("registered") source is read once, by the DMA. So in
//! an upload of at least [`RegisterSizes::min_job`] whose caller keeps the source
//! alive (a [`SourceOwner`]), one worker at a time is the registrar: in step 1 it
//! takes a page-aligned piece off the END of the job's range, registers it
//! (`host_register`, without the lock) and enqueues its DMA straight from the
//! source on the same H2D stream, then records the job's piece event; the other
//! workers stage chunks from the FRONT. The two meet in the middle, so the split
//! follows their relative speed; a piece is at most half of what is left, so the
//! registrar does not end up alone with a big piece. The partial pages at both
//! ends are always staged. A refused registration (the memory is registered
//! already, by someone else or by a concurrent upload of the same array, or the
//! driver will not lock it) gives the piece back to the stagers and ends
//! registration for that job: no byte is lost or sent twice.
//!
//! A registered piece's life: [`Uploads::finish`] waits on the host for the
//! piece event (recorded after the job's last piece DMA): the caller may reuse
//! the source once `finish` returns, as after staging. It then hands the pieces
//! and the job's owner to the unregistration task on a copy thread, off the
//! submitter's path (unregistering costs about as much as registering). The
//! owner is dropped (the source released) only once its last piece is
//! unregistered. Until then a piece is "pending": a later upload of the same
//! memory (the same pages stay mapped while the owner lives) adopts a pending
//! piece that ends where its registrar would cut, instead of registering it
//! again, and stages while a piece it needs is being unregistered. The task
//! unregisters the lowest pieces first, since a repeated upload of the same array
//! wants the highest first. [`Uploads::drain`] unregisters all that is pending
//! (at shutdown). If the wait in `finish` fails, whether a DMA still reads the
//! pieces is unknown: they stay registered and their owner is never dropped, as a
//! lost staging slot stays pinned.

use crate::backend::{BackendError, BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use crate::transfer::{
    copy_threads, HostMemory, SourceOwner, Ticket, TransferRequest, TransferState,
};
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

/// How an upload is split between the registrar and the stagers (see the module
/// documentation). Registration happens only in uploads spread over several threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterSizes {
    /// Uploads shorter than this are only staged.
    pub min_job: u64,
    /// The largest piece registered at once.
    pub max_piece: u64,
    /// A piece is at most half of the unclaimed rest of its job; once that half is below this,
    /// the stagers finish the job.
    pub min_piece: u64,
}

/// The production sizes. Measured on an H200 host with 1 GiB of random pageable uint8 (pinned
/// copy 55.2 GB/s): registering all of it cost 36 ms the first time and 18.7 ms the next, its
/// DMA 19.5 ms (55 GB/s), unregistering it 17 ms. One thread registering 64 MiB pieces in
/// order, each piece's DMA enqueued right after its registration, moved the GiB in 23.9 ms
/// (45 GB/s, 81%); with 16 MiB pieces it took 29 ms (37 GB/s), the per-call cost weighing
/// more. 4 to 16 threads registering at once were no faster (28-33 ms): the driver serializes
/// registration, hence one registrar. Under 64 MiB, the first piece's registration (1-2 ms)
/// would be about as long as staging the whole upload.
pub const REGISTER_SIZES: RegisterSizes = RegisterSizes {
    min_job: 64 << 20,
    max_piece: 64 << 20,
    min_piece: 16 << 20,
};

/// A pinned buffer of the configured chunk size and the event recorded after its last DMA.
struct Slot {
    ptr: u64,
    event: Event,
    /// The event was recorded and may not have completed yet.
    armed: bool,
}

/// A host address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    ptr: u64,
    len: u64,
}

impl Range {
    fn end(&self) -> u64 {
        self.ptr + self.len
    }

    fn overlaps(&self, other: &Range) -> bool {
        self.ptr < other.end() && other.ptr < self.end()
    }
}

struct Job {
    request: TransferRequest,
    chunk: u64,
    /// Stagers claim `[front, back)` from the front; the registrar takes pieces off `back`
    /// (offsets into the request; `request.host + back` is page-aligned in a registering job).
    front: u64,
    back: u64,
    /// `[start, end)`: the bytes after the last whole page of a registering job, staged once
    /// the front reaches `back`.
    tail: Option<(u64, u64)>,
    /// The registrar may take further pieces of this job.
    register: bool,
    /// Pieces registered (or adopted) for this job, in the order they were enqueued.
    pieces: Vec<Range>,
    /// Recorded after each piece's DMA, so it completes once every piece was read.
    piece_event: Option<Event>,
    /// Keeps the source alive; only registering jobs hold one.
    owner: Option<SourceOwner>,
    /// Chunks and pieces claimed and not yet counted.
    in_progress: u32,
    error: Option<BackendError>,
}

impl Job {
    fn claimable(&self) -> bool {
        self.error.is_none() && (self.front < self.back || self.tail.is_some())
    }

    fn finished(&self) -> bool {
        self.in_progress == 0 && !self.claimable()
    }
}

/// What a finished job leaves for [`Uploads::finish`].
#[derive(Default)]
struct Held {
    pieces: Vec<Range>,
    piece_event: Option<Event>,
    owner: Option<SourceOwner>,
}

/// A registered piece whose DMA has completed and whose upload has returned: it waits for the
/// unregistration task, or for a later upload of the same memory to adopt it.
struct Pending {
    range: Range,
    /// The source's owner, shared by the pieces of its upload: dropped with the last one.
    owner: Arc<SourceOwner>,
}

/// One chunk handed to a thread to stage.
struct StageClaim {
    ticket: Ticket,
    host: u64,
    device: u64,
    len: u64,
    /// `None`: the thread creates a new slot (the engine has fewer than its maximum).
    slot: Option<Slot>,
    /// The slot was created for this claim (its bytes join the reserved count).
    created: bool,
    /// The slot's state is unknown after a failed wait or record: it is never reused.
    lost: bool,
}

/// One piece handed to the registrar.
struct PieceClaim {
    ticket: Ticket,
    range: Range,
    device: u64,
    event: Event,
    /// Adopted from an earlier upload of the same memory (registered already): that upload's
    /// hold on the piece, to drop outside the lock since it may release that upload's source.
    adopted: Option<Arc<SourceOwner>>,
}

enum Claim {
    Stage(StageClaim),
    Piece(PieceClaim),
}

/// How a piece went.
enum PieceOutcome {
    /// Registered (or adopted), its DMA enqueued and the piece event recorded after it.
    Enqueued,
    /// `host_register` refused it: nothing was registered or enqueued.
    Refused,
    /// Registered, but its DMA or the event after it failed: only a wait on the whole stream
    /// tells when the piece is no longer read.
    Failed(BackendError),
}

/// What [`Uploads::finish`] returns.
pub struct Finished {
    /// The first backend error of the copy's chunks.
    pub result: BackendResult<()>,
    /// The source's owner, back in the caller's care; `None` when the engine keeps it (part of
    /// the source is still page-locked) or was given none.
    pub owner: Option<SourceOwner>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<Ticket, Job>,
    /// Finished jobs: the completion event (none for an empty copy), or the first error.
    done: HashMap<Ticket, BackendResult<Option<Event>>>,
    /// What finished jobs (and jobs that never register) leave for `finish`.
    held: HashMap<Ticket, Held>,
    /// Idle slots, the longest idle first (its DMA is the most likely to have completed).
    free: VecDeque<Slot>,
    /// Slots that exist or are being created.
    slots: usize,
    /// Pool threads inside `work`.
    helpers: usize,
    events: EventPool,
    reserved: u64,
    /// A worker is registering a piece (one at a time: the driver serializes registration).
    registrar: bool,
    /// In the order their uploads returned, each upload's pieces in enqueue order (highest
    /// address first); the unregistration takes the last first.
    pending: Vec<Pending>,
    /// Pieces being unregistered now: not to be registered again before that is done.
    unregistering: Vec<Range>,
    /// An unregistration task is queued or running.
    unregistration_task: bool,
    /// Bytes DMA'd straight from registered sources.
    registered_bytes: u64,
}

/// See the module documentation.
pub struct Uploads {
    device: i32,
    stream: Stream,
    chunk: u64,
    max_slots: usize,
    /// Pool threads a large copy asks for (its submitter is one more worker).
    max_helpers: usize,
    backend: Arc<dyn DeviceBackend>,
    host: Arc<dyn HostMemory>,
    /// The registered path's sizes and the backend's page size; `None`: every byte is staged.
    register: Option<(RegisterSizes, u64)>,
    state: Mutex<State>,
    /// Signalled when a chunk or piece is counted (a slot comes free, a job may finish) and
    /// when a piece is unregistered.
    changed: Condvar,
}

impl Uploads {
    /// Uploads on `stream` in chunks of `chunk` bytes (production: [`UPLOAD_CHUNK`]); a copy
    /// of two chunks or more is spread over up to `workers` threads (production:
    /// [`UPLOAD_WORKERS`]), staged through `workers * SLOTS_PER_WORKER` pinned slots. With
    /// `register` (production: [`REGISTER_SIZES`]), where the backend can page-lock host
    /// memory, large uploads given a [`SourceOwner`] DMA part of their source straight.
    pub fn new(
        device: i32,
        backend: Arc<dyn DeviceBackend>,
        host: Arc<dyn HostMemory>,
        stream: Stream,
        chunk: u64,
        workers: usize,
        register: Option<RegisterSizes>,
    ) -> Self {
        let workers = workers.max(1);
        // A backend that cannot register (or cannot say) stages everything.
        let register = register.and_then(|sizes| match backend.host_register_granularity(device) {
            Ok(Some(page)) if page > 0 => Some((sizes, page)),
            _ => None,
        });
        Self {
            device,
            stream,
            chunk: chunk.max(1),
            max_slots: workers * SLOTS_PER_WORKER,
            max_helpers: workers - 1,
            backend,
            host,
            register,
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
    /// ticket is complete, and the host range as long as `owner` lives; nothing is copied until
    /// someone calls [`Uploads::finish`] (or pool threads pick it up).
    pub fn submit(
        self: &Arc<Self>,
        ticket: Ticket,
        request: TransferRequest,
        owner: Option<SourceOwner>,
    ) {
        let n = request.nbytes;
        let spread = n >= 2 * self.chunk;
        let chunk = if spread {
            self.chunk
        } else {
            (self.chunk / INLINE_PARTS).max(1)
        };
        let mut job = Job {
            request,
            chunk,
            front: 0,
            back: n,
            tail: None,
            register: false,
            pieces: Vec::new(),
            piece_event: None,
            owner: None,
            in_progress: 0,
            error: None,
        };
        let mut st = self.lock();
        match (self.register, owner) {
            (Some((sizes, page)), Some(owner)) if spread && n >= sizes.min_job.max(2 * page) => {
                // Whole pages only: the bytes after the last page boundary are staged.
                let end = (request.host + n) / page * page - request.host;
                job.back = end;
                job.tail = (end < n).then_some((end, n));
                job.register = true;
                job.owner = Some(owner);
            }
            (_, owner) => {
                // Never read after `finish`: the owner goes back to the caller there.
                st.held.insert(
                    ticket,
                    Held {
                        owner,
                        ..Held::default()
                    },
                );
            }
        }
        if n == 0 {
            st.done.insert(ticket, Ok(None));
            return;
        }
        st.jobs.insert(ticket, job);
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

    /// Works on the copies (highest priority first) until every chunk of `ticket` is enqueued
    /// and every byte of its source has been read (staged, or the DMA of its registered pieces
    /// completed: the caller may reuse the source then); then its result, the first backend
    /// error of its chunks, which also forgets a failed ticket. A failed copy returns only
    /// after the chunks already enqueued have landed: the caller may free the destination on
    /// the error, and a late DMA would write into its next owner.
    pub fn finish(self: &Arc<Self>, ticket: Ticket) -> Finished {
        self.work(Some(ticket));
        let mut st = self.lock();
        let Held {
            pieces,
            piece_event,
            owner,
        } = st.held.remove(&ticket).unwrap_or_default();
        let error = match st.done.get(&ticket) {
            Some(Err(_)) => match st.done.remove(&ticket) {
                Some(Err(e)) => Some(e),
                _ => unreachable!("checked above"),
            },
            _ => None,
        };
        // Whether every DMA of the job that reads the source has completed.
        let mut read = true;
        if error.is_some() {
            read = false;
            // Every DMA of the job was enqueued on the one stream before this event.
            if let Ok(ev) = st.events.record(&*self.backend, self.device, self.stream) {
                drop(st);
                let waited = self.backend.event_synchronize(ev);
                st = self.lock();
                if waited.is_ok() {
                    st.events.give(ev);
                    read = true;
                }
            }
        } else if let (Some(ev), false) = (piece_event, pieces.is_empty()) {
            drop(st);
            read = self.backend.event_synchronize(ev).is_ok();
            st = self.lock();
        }
        if let Some(ev) = piece_event {
            // Never recorded (every piece refused), or its record has completed.
            if pieces.is_empty() || read {
                st.events.give(ev);
            }
        }
        let mut spawn = false;
        let owner = if pieces.is_empty() {
            owner
        } else if read {
            let owner = Arc::new(owner.expect("a registering job holds its source's owner"));
            // The clones keep it: dropping this handle here, under the lock, releases nothing.
            st.pending.extend(pieces.into_iter().map(|range| Pending {
                range,
                owner: owner.clone(),
            }));
            spawn = !std::mem::replace(&mut st.unregistration_task, true);
            None
        } else {
            // Whether a DMA still reads the pieces is unknown: they stay registered, and the
            // source stays alive for good.
            std::mem::forget(owner);
            None
        };
        drop(st);
        if spawn {
            let me = self.clone();
            if !copy_threads().run(Box::new(move || me.unregister_pending(true))) {
                // No copy thread (a forked child): here, on the submitter's time.
                self.unregister_pending(true);
            }
        }
        Finished {
            result: error.map_or(Ok(()), Err),
            owner,
        }
    }

    /// Unregisters pending pieces, the last first, until none is left; the task (`task`)
    /// then marks itself gone under the same lock, so that the next `finish` starts another.
    fn unregister_pending(&self, task: bool) {
        let mut st = self.lock();
        while let Some(Pending { range, owner }) = st.pending.pop() {
            st.unregistering.push(range);
            drop(st);
            if self.backend.host_unregister(self.device, range.ptr).is_ok() {
                // Outside the lock: the last piece's owner releases the source (C API: may
                // take the GIL).
                drop(owner);
            } else {
                // Possibly still registered: the source must stay mapped.
                std::mem::forget(owner);
            }
            st = self.lock();
            let i = st
                .unregistering
                .iter()
                .position(|r| *r == range)
                .expect("pushed above");
            st.unregistering.swap_remove(i);
            self.changed.notify_all();
        }
        if task {
            st.unregistration_task = false;
        }
    }

    /// Blocks until every piece of the uploads that have returned is unregistered and its
    /// owner dropped, unregistering on this thread what no copy thread has taken yet.
    pub fn drain(&self) {
        loop {
            self.unregister_pending(false);
            let mut st = self.lock();
            while !st.unregistering.is_empty() {
                st = self.wait_changed(st);
            }
            if st.pending.is_empty() {
                return;
            }
        }
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
            match claim {
                Some(Claim::Stage(mut c)) => {
                    drop(st);
                    let result = self.stage(&mut c);
                    st = self.lock();
                    self.count(&mut st, c, result);
                }
                Some(Claim::Piece(mut c)) => {
                    drop(st);
                    let outcome = self.enqueue_piece(&mut c);
                    st = self.lock();
                    self.count_piece(&mut st, c, outcome);
                }
                // Decided under the same lock as "nothing to claim": a later submit sees the
                // thread gone and wakes another.
                None if until.is_none() => {
                    st.helpers -= 1;
                    return;
                }
                None => {
                    let t = until.expect("checked above");
                    if !st.jobs.contains_key(&t) {
                        return;
                    }
                    // Other threads are still on the job's last chunks; a refused piece may
                    // also come back to be staged.
                    st = self.wait_changed(st);
                }
            }
        }
    }

    /// Step 1: the next chunk and a slot for it (waiting for a slot to come free if needed), or
    /// the registrar's next piece.
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
            let next = st
                .jobs
                .iter()
                .filter(|(_, j)| j.claimable())
                .max_by_key(|(&t, j)| (j.request.priority, std::cmp::Reverse(t)))
                .map(|(&t, _)| t);
            let Some(ticket) = next else {
                return (st, None);
            };
            if !st.registrar {
                if let Some(piece) = self.claim_piece(&mut st, ticket) {
                    return (st, Some(Claim::Piece(piece)));
                }
            }
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
            let job = st.jobs.get_mut(&ticket).expect("chosen above");
            let (offset, len) = if job.front < job.back {
                let offset = job.front;
                let len = job.chunk.min(job.back - offset);
                job.front += len;
                (offset, len)
            } else {
                let (start, end) = job.tail.take().expect("a claimable job has bytes left");
                (start, end - start)
            };
            job.in_progress += 1;
            let claim = StageClaim {
                ticket,
                host: job.request.host + offset,
                device: job.request.device + offset,
                len,
                slot,
                created,
                lost: false,
            };
            return (st, Some(Claim::Stage(claim)));
        }
    }

    /// The registrar's next piece of `ticket`, when it should take one (see the module
    /// documentation); makes the caller the registrar.
    fn claim_piece(&self, st: &mut State, ticket: Ticket) -> Option<PieceClaim> {
        let (sizes, page) = self.register?;
        let State {
            jobs,
            events,
            pending,
            unregistering,
            registrar,
            ..
        } = st;
        let job = jobs.get_mut(&ticket)?;
        if !job.register {
            return None;
        }
        let event = match job.piece_event {
            Some(ev) => ev,
            None => match events.take(&*self.backend, self.device) {
                Ok(ev) => *job.piece_event.insert(ev),
                Err(_) => {
                    job.register = false;
                    return None;
                }
            },
        };
        let host = job.request.host;
        // Pieces start on a page boundary at or after the stagers' front.
        let lo = (host + job.front).next_multiple_of(page);
        let hi = host + job.back;
        // An earlier upload's piece of this same memory, still registered, that ends where this
        // cut would: taken over as it is (its owner keeps these pages mapped to the same memory,
        // which this job's source then is).
        let adopt = pending
            .iter()
            .position(|p| p.range.end() == hi && p.range.ptr >= lo);
        let (range, adopted) = match adopt {
            Some(i) => {
                let p = pending.remove(i);
                (p.range, Some(p.owner))
            }
            None => {
                // Half of what is left: the stagers finish their half about when this piece
                // has been registered and sent.
                let len = sizes.max_piece.min(hi.saturating_sub(lo) / 2 / page * page);
                if len < sizes.min_piece {
                    job.register = false;
                    return None;
                }
                let range = Range { ptr: hi - len, len };
                let busy = pending
                    .iter()
                    .map(|p| &p.range)
                    .chain(unregistering.iter())
                    .any(|r| r.overlaps(&range));
                if busy {
                    // Still registered by an earlier upload and about to be unregistered: stage
                    // meanwhile, cut again at the next claim.
                    return None;
                }
                (range, None)
            }
        };
        job.back = range.ptr - host;
        job.in_progress += 1;
        *registrar = true;
        Some(PieceClaim {
            ticket,
            range,
            device: job.request.device + (range.ptr - host),
            event,
            adopted,
        })
    }

    /// Step 2, without the lock: the slot is this thread's until it is counted.
    fn stage(&self, c: &mut StageClaim) -> BackendResult<()> {
        if c.slot.is_none() {
            let ptr = self.backend.host_alloc(self.chunk)?;
            let event = match self.backend.event_create(self.device) {
                Ok(ev) => ev,
                Err(e) => {
                    // Nothing has read the buffer yet.
                    let _ = self.backend.host_free(ptr);
                    return Err(e);
                }
            };
            c.slot = Some(Slot {
                ptr,
                event,
                armed: false,
            });
        }
        let slot = c.slot.as_mut().expect("created above");
        if slot.armed {
            if let Err(e) = self.backend.event_synchronize(slot.event) {
                c.lost = true;
                return Err(e);
            }
            slot.armed = false;
        }
        self.host.copy(slot.ptr, c.host, c.len);
        // A failed enqueue read nothing: the slot stays idle and reusable.
        self.backend
            .memcpy_async(c.device, slot.ptr, c.len, self.stream)?;
        if let Err(e) = self.backend.event_record(slot.event, self.stream) {
            // The DMA may read the slot with no event to tell when it is done.
            c.lost = true;
            return Err(e);
        }
        slot.armed = true;
        Ok(())
    }

    /// The registrar's step 2, without the lock: register the piece (unless adopted), enqueue
    /// its DMA straight from the source, record the piece event after it.
    fn enqueue_piece(&self, c: &mut PieceClaim) -> PieceOutcome {
        // The earlier upload's hold on an adopted piece ends here, outside the lock.
        let adopted = c.adopted.take().is_some();
        if !adopted
            && self
                .backend
                .host_register(self.device, c.range.ptr, c.range.len)
                .is_err()
        {
            return PieceOutcome::Refused;
        }
        let enqueued = self
            .backend
            .memcpy_async(c.device, c.range.ptr, c.range.len, self.stream)
            .and_then(|()| self.backend.event_record(c.event, self.stream));
        match enqueued {
            Ok(()) => PieceOutcome::Enqueued,
            Err(e) => PieceOutcome::Failed(e),
        }
    }

    /// Step 3: the slot goes back, the chunk is counted, and the job finishes with its last one.
    fn count(&self, st: &mut State, c: StageClaim, result: BackendResult<()>) {
        match c.slot {
            Some(slot) => {
                if c.created {
                    st.reserved += self.chunk;
                }
                if c.lost {
                    // Kept pinned (and counted) but never reused: a DMA may still read it.
                    st.slots -= 1;
                } else {
                    st.free.push_back(slot);
                }
            }
            None => st.slots -= 1, // its creation failed
        }
        let job = st.jobs.get_mut(&c.ticket).expect("a claimed job stays");
        job.in_progress -= 1;
        if let Err(e) = result {
            job.error.get_or_insert(e);
        }
        self.conclude(st, c.ticket);
    }

    /// The registrar's step 3: the role is free again and the piece counted.
    fn count_piece(&self, st: &mut State, c: PieceClaim, outcome: PieceOutcome) {
        st.registrar = false;
        let job = st.jobs.get_mut(&c.ticket).expect("a claimed job stays");
        job.in_progress -= 1;
        match outcome {
            PieceOutcome::Enqueued => {
                job.pieces.push(c.range);
                st.registered_bytes += c.range.len;
            }
            PieceOutcome::Refused => {
                // Back to the stagers (only the registrar moves `back`, so the piece ends
                // where `back` is), and no more registering: this memory is registered
                // elsewhere or cannot be.
                job.back += c.range.len;
                job.register = false;
            }
            PieceOutcome::Failed(e) => {
                job.pieces.push(c.range);
                job.error.get_or_insert(e);
            }
        }
        self.conclude(st, c.ticket);
    }

    /// Finishes `ticket` if that was its last chunk or piece, and wakes the waiting threads.
    fn conclude(&self, st: &mut State, ticket: Ticket) {
        if st.jobs.get(&ticket).is_some_and(Job::finished) {
            let job = st.jobs.remove(&ticket).expect("present above");
            // Recorded under the lock so that whoever sees the job done finds the event.
            let outcome = match job.error {
                Some(e) => Err(e),
                None => st
                    .events
                    .record(&*self.backend, self.device, self.stream)
                    .map(Some),
            };
            st.done.insert(ticket, outcome);
            if job.owner.is_some() {
                let held = Held {
                    pieces: job.pieces,
                    piece_event: job.piece_event,
                    owner: job.owner,
                };
                st.held.insert(ticket, held);
            }
        }
        self.changed.notify_all();
    }

    /// Where `ticket` stands; `None` for an unknown, released or failed ticket.
    pub fn state(&self, ticket: Ticket) -> Option<TransferState> {
        let st = self.lock();
        if let Some(Ok(ev)) = st.done.get(&ticket) {
            return Some(TransferState::Complete(*ev));
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
            Some(Ok(ev)) => *ev,
            _ => None,
        }
    }

    /// Finishes `ticket`, waits on the host for its copy, then forgets it.
    pub fn wait(self: &Arc<Self>, ticket: Ticket) -> BackendResult<()> {
        self.finish(ticket).result?;
        if let Some(ev) = self.completion_event(ticket) {
            self.backend.event_synchronize(ev)?;
        }
        self.release(ticket);
        Ok(())
    }

    /// Forgets a ticket (its event returns to the engine's pool).
    pub fn release(&self, ticket: Ticket) {
        let mut st = self.lock();
        if let Some(Ok(Some(ev))) = st.done.remove(&ticket) {
            st.events.give(ev);
        }
    }

    /// Pinned staging bytes held.
    pub fn staging_reserved(&self) -> u64 {
        self.lock().reserved
    }

    /// Bytes DMA'd straight from registered sources so far.
    pub fn registered_bytes(&self) -> u64 {
        self.lock().registered_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::{pattern, FakeBackend};
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
            CHUNK,
            workers,
            None,
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
                uploads.submit(t, upload(src, dev, n, 0), None);
                uploads.finish(t).result.unwrap();
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
        uploads.submit(1, upload(src, dev, n, 0), None);
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
                uploads.submit(1, upload(src, dev, 8 * CHUNK, 0), None);
                uploads.wait(1)
            })
        };
        entered.recv().unwrap(); // the bulk's first chunk is being staged
        let off = 8 * CHUNK;
        uploads.submit(2, upload(src + off, dev + off, 4 * CHUNK, 5), None);
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
            uploads.submit(k, upload(src, dev, n, 0), None);
            let err = uploads.finish(k).result.unwrap_err();
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
        uploads.submit(99, upload(src, dev, n, 0), None);
        uploads.wait(99).unwrap();
        assert_eq!(fake.read(dev, n as usize), data);
        assert!(
            uploads.staging_reserved() <= 8 * CHUNK,
            "no slot leaked by the failures"
        );
    }

    // ---- the registered path ----

    use crate::fake_backend::FAKE_PAGE;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Test sizes: registration from 8 chunks, pieces of 1 to 4 chunks.
    const SIZES: RegisterSizes = RegisterSizes {
        min_job: 8 * CHUNK,
        max_piece: 4 * CHUNK,
        min_piece: CHUNK,
    };

    fn registering(
        fake: &Arc<FakeBackend>,
        host: Arc<dyn HostMemory>,
        workers: usize,
        stream: Stream,
    ) -> Arc<Uploads> {
        Arc::new(Uploads::new(
            0,
            fake.clone(),
            host,
            stream,
            CHUNK,
            workers,
            Some(SIZES),
        ))
    }

    /// Counts how often each source byte is staged; checks no slot is rewritten under a DMA.
    struct Staged {
        fake: Arc<FakeBackend>,
        host: (u64, u64),
        seen: Mutex<Vec<u8>>,
    }

    impl Staged {
        fn new(fake: &Arc<FakeBackend>, src: u64, n: u64) -> Arc<Self> {
            Arc::new(Self {
                fake: fake.clone(),
                host: (src, n),
                seen: Mutex::new(vec![0; n as usize]),
            })
        }
    }

    impl HostMemory for Staged {
        fn copy(&self, dst: u64, src: u64, nbytes: u64) {
            assert!(!self.fake.reads_pending(dst, nbytes), "slot rewritten");
            let (base, n) = self.host;
            if src >= base && src + nbytes <= base + n {
                for b in &mut self.seen.lock().unwrap()[(src - base) as usize..][..nbytes as usize]
                {
                    *b += 1;
                }
            }
            self.fake.copy(dst, src, nbytes);
        }
    }

    /// A source owner that counts its releases and, at its release, checks that none of the
    /// source is registered any more (the memory may be unmapped right after).
    struct Watch {
        released: AtomicUsize,
        released_while_registered: AtomicUsize,
        /// When it was released, on a clock shared by every watch (0: not yet).
        order: AtomicUsize,
    }

    static RELEASES: AtomicUsize = AtomicUsize::new(0);

    fn owner(fake: &Arc<FakeBackend>, src: u64, n: u64) -> (SourceOwner, Arc<Watch>) {
        let watch = Arc::new(Watch {
            released: AtomicUsize::new(0),
            released_while_registered: AtomicUsize::new(0),
            order: AtomicUsize::new(0),
        });
        let (f, w) = (fake.clone(), watch.clone());
        let owner = SourceOwner::new(move || {
            let still = f
                .registered_ranges()
                .iter()
                .any(|&(p, len)| p < src + n && src < p + len);
            w.released_while_registered
                .fetch_add(usize::from(still), Ordering::SeqCst);
            w.released.fetch_add(1, Ordering::SeqCst);
            w.order.store(
                RELEASES.fetch_add(1, Ordering::SeqCst) + 1,
                Ordering::SeqCst,
            );
        });
        (owner, watch)
    }

    /// Submits, finishes and checks the copy landed; returns the finish's owner, if given back.
    fn upload_owned(
        uploads: &Arc<Uploads>,
        ticket: Ticket,
        req: TransferRequest,
        owner: SourceOwner,
    ) -> Option<SourceOwner> {
        uploads.submit(ticket, req, Some(owner));
        let done = uploads.finish(ticket);
        done.result.unwrap();
        uploads.wait(ticket).unwrap();
        done.owner
    }

    /// Every byte arrives, staged once or read once from a registered piece (never both, never
    /// neither); pieces are whole pages inside the source; everything is unregistered after
    /// `drain`, never while a copy may read it, and the owner is released once, after that.
    fn check_split(n: u64, skew: u64, workers: usize) {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let base = fake.host_alloc(n + skew).unwrap();
        let src = base + skew;
        let dev = fake.mem_alloc(0, n.max(1)).unwrap();
        let data = pattern(n as usize, (n % 251) as u8 + 1);
        fake.write(src, &data);
        let staged = Staged::new(&fake, src, n);
        let uploads = registering(&fake, staged.clone(), workers, STREAM);
        let (keep, watch) = owner(&fake, src, n);
        uploads.submit(1, upload(src, dev, n, 0), Some(keep));
        let done = uploads.finish(1);
        done.result.unwrap();
        let back = done.owner;
        // Unregister at once, before anything but `finish` waited on the stream: any piece
        // whose DMA `finish` did not wait for is flagged by the fake.
        uploads.drain();
        assert_eq!(fake.violations(), Vec::<String>::new());
        uploads.wait(1).unwrap();
        assert_eq!(fake.read(dev, n as usize), data, "{n} bytes, skew {skew}");
        let pieces = fake.registered_copies();
        let mut seen = staged.seen.lock().unwrap().clone();
        for &(p, len) in &pieces {
            assert!(
                p % FAKE_PAGE == 0 && len % FAKE_PAGE == 0,
                "a piece of partial pages"
            );
            assert!(p >= src && p + len <= src + n, "a piece outside the source");
            for b in &mut seen[(p - src) as usize..][..len as usize] {
                *b += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "a byte sent other than once");
        let sent: u64 = pieces.iter().map(|p| p.1).sum();
        assert_eq!(uploads.registered_bytes(), sent);
        if n >= SIZES.min_job {
            assert!(sent >= SIZES.min_piece, "{n} bytes: nothing registered");
            assert!(
                back.is_none(),
                "the engine gave back an owner it still needs"
            );
        } else {
            assert_eq!(sent, 0, "{n} bytes: registered below min_job");
            assert!(back.is_some(), "a staged-only upload keeps no owner");
        }
        drop(back);
        uploads.drain();
        assert!(fake.registered_ranges().is_empty(), "left registered");
        assert_eq!(fake.unregistered().len(), pieces.len());
        assert_eq!(fake.violations(), Vec::<String>::new());
        assert_eq!(watch.released.load(Ordering::SeqCst), 1);
        assert_eq!(watch.released_while_registered.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn sizes_around_the_thresholds_split_into_pieces_and_chunks_that_cover_every_byte_once() {
        let m = SIZES.min_job;
        for n in [
            m - 1,
            m,
            m + 1,
            m + FAKE_PAGE - 1,
            m + 2 * CHUNK + 17,
            41 * CHUNK + 4097,
        ] {
            for skew in [0, 1, FAKE_PAGE - 1] {
                check_split(n, skew, 4);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn any_size_skew_and_thread_count_keeps_the_split_exact(
            n in (6 * CHUNK)..(48 * CHUNK),
            skew in 0..(2 * FAKE_PAGE),
            workers in 1usize..5,
        ) {
            check_split(n, skew, workers);
        }
    }

    #[test]
    fn a_refused_registration_sends_the_piece_through_staging_and_stops_registering() {
        for refused in 0..3 {
            let fake = Arc::new(FakeBackend::new(1 << 30));
            let n = 40 * CHUNK + 123;
            let src = fake.host_alloc(n + 5).unwrap() + 5;
            let dev = fake.mem_alloc(0, n).unwrap();
            let data = pattern(n as usize, 9);
            fake.write(src, &data);
            let staged = Staged::new(&fake, src, n);
            let uploads = registering(&fake, staged.clone(), 3, STREAM);
            fake.fail_register_after(refused);
            let (keep, watch) = owner(&fake, src, n);
            drop(upload_owned(&uploads, 1, upload(src, dev, n, 0), keep));
            assert_eq!(fake.read(dev, n as usize), data);
            assert_eq!(
                fake.register_calls(),
                refused + 1,
                "registered after a refusal"
            );
            assert_eq!(fake.registered_copies().len() as u64, refused);
            let staged_bytes: u64 = staged.seen.lock().unwrap().iter().map(|&c| c as u64).sum();
            let sent: u64 = fake.registered_copies().iter().map(|p| p.1).sum();
            assert_eq!(staged_bytes + sent, n, "bytes lost or sent twice");
            uploads.drain();
            assert!(fake.registered_ranges().is_empty());
            assert_eq!(fake.violations(), Vec::<String>::new());
            assert_eq!(watch.released.load(Ordering::SeqCst), 1);
        }
    }

    #[test]
    fn registration_needs_an_owner_the_knob_and_backend_support() {
        let n = 20 * CHUNK;
        for case in 0..3 {
            let fake = Arc::new(FakeBackend::new(1 << 30));
            let src = fake.host_alloc(n).unwrap();
            let dev = fake.mem_alloc(0, n).unwrap();
            let data = pattern(n as usize, 4);
            fake.write(src, &data);
            let (keep, watch) = owner(&fake, src, n);
            let uploads = match case {
                0 => {
                    let uploads = registering(&fake, fake.clone(), 2, STREAM);
                    uploads.submit(1, upload(src, dev, n, 0), None);
                    uploads.wait(1).unwrap();
                    drop(keep);
                    uploads
                }
                1 => {
                    let uploads = engine(&fake, fake.clone(), 2); // the knob off
                    assert!(upload_owned(&uploads, 1, upload(src, dev, n, 0), keep).is_some());
                    uploads
                }
                _ => {
                    fake.set_register_granularity(None);
                    let uploads = registering(&fake, fake.clone(), 2, STREAM);
                    assert!(upload_owned(&uploads, 1, upload(src, dev, n, 0), keep).is_some());
                    uploads
                }
            };
            assert_eq!(fake.read(dev, n as usize), data);
            assert_eq!(fake.register_calls(), 0, "case {case} registered");
            assert_eq!(uploads.registered_bytes(), 0);
            assert_eq!(watch.released.load(Ordering::SeqCst), 1, "case {case}");
        }
    }

    #[test]
    fn a_source_registered_by_a_concurrent_upload_is_staged_by_the_second() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let n = 24 * CHUNK;
        let src = fake.host_alloc(n).unwrap();
        let (dev_a, dev_b) = (fake.mem_alloc(0, n).unwrap(), fake.mem_alloc(0, n).unwrap());
        let data = pattern(n as usize, 21);
        fake.write(src, &data);
        // Engine A (its submitter the only worker) registers its pieces, then blocks in its
        // first staged chunk: the pieces stay registered and in use.
        let (tx, entered) = std::sync::mpsc::channel();
        let gate = Arc::new(Gate {
            fake: fake.clone(),
            entered: Mutex::new(Some(tx)),
            open: Mutex::new(false),
            opened: Condvar::new(),
        });
        let a = registering(&fake, gate.clone(), 1, STREAM);
        let (keep_a, watch_a) = owner(&fake, src, n);
        let first = {
            let a = a.clone();
            std::thread::spawn(move || upload_owned(&a, 1, upload(src, dev_a, n, 0), keep_a))
        };
        entered.recv().unwrap();
        assert!(
            !fake.registered_ranges().is_empty(),
            "A registered its first pieces"
        );
        // Engine B, same source (another device's engine, or the same array uploaded twice at
        // once): its registration is refused, so it stages everything.
        let staged = Staged::new(&fake, src, n);
        let b = registering(&fake, staged.clone(), 2, STREAM + 1);
        let (keep_b, watch_b) = owner(&fake, src, n);
        assert!(upload_owned(&b, 1, upload(src, dev_b, n, 0), keep_b).is_some());
        assert_eq!(fake.read(dev_b, n as usize), data);
        assert_eq!(b.registered_bytes(), 0);
        assert!(staged.seen.lock().unwrap().iter().all(|&c| c == 1));
        *gate.open.lock().unwrap() = true;
        gate.opened.notify_all();
        drop(first.join().unwrap());
        assert_eq!(fake.read(dev_a, n as usize), data);
        assert!(a.registered_bytes() > 0);
        a.drain();
        assert!(fake.registered_ranges().is_empty());
        assert_eq!(fake.violations(), Vec::<String>::new());
        assert_eq!(watch_a.released.load(Ordering::SeqCst), 1);
        assert_eq!(watch_b.released.load(Ordering::SeqCst), 1);
        assert_eq!(watch_a.released_while_registered.load(Ordering::SeqCst), 0);
    }

    /// Opens the fake's unregistration gate when dropped, so a failing test never leaves a
    /// shared copy thread blocked.
    struct Unhold(Arc<FakeBackend>);

    impl Drop for Unhold {
        fn drop(&mut self) {
            self.0.hold_unregistrations(false);
        }
    }

    #[test]
    fn a_repeated_upload_adopts_the_pieces_still_registered_and_the_first_owner_outlives_them() {
        if copy_threads().helpers() == 0 {
            return; // the unregistration would run, and block, on the submitter
        }
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let n = 32 * CHUNK + 77;
        let src = fake.host_alloc(n + 3).unwrap() + 3;
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 33);
        fake.write(src, &data);
        let uploads = registering(&fake, fake.clone(), 1, STREAM);
        let _unhold = Unhold(fake.clone());
        fake.hold_unregistrations(true);
        let (keep_a, watch_a) = owner(&fake, src, n);
        assert!(upload_owned(&uploads, 1, upload(src, dev, n, 0), keep_a).is_none());
        let first: Vec<(u64, u64)> = fake.registered_copies();
        assert!(
            first.len() >= 2,
            "too few pieces to test adoption: {first:x?}"
        );
        let calls = fake.register_calls();
        // The same array again while A's pieces wait to be unregistered (the lowest may be
        // in the middle of it): B sends the highest straight away, without registering it.
        let dev_b = fake.mem_alloc(0, n).unwrap();
        let (keep_b, watch_b) = owner(&fake, src, n);
        assert!(upload_owned(&uploads, 2, upload(src, dev_b, n, 0), keep_b).is_none());
        assert_eq!(fake.read(dev_b, n as usize), data);
        let second = &fake.registered_copies()[first.len()..];
        assert_eq!(
            second.first(),
            first.first(),
            "the highest piece was not adopted"
        );
        let adopted = second.iter().filter(|p| first.contains(p)).count() as u64;
        assert!(adopted >= 1);
        assert_eq!(
            fake.register_calls() - calls,
            second.len() as u64 - adopted,
            "an adopted piece was registered again"
        );
        assert_eq!(watch_b.released.load(Ordering::SeqCst), 0);
        fake.hold_unregistrations(false);
        uploads.drain();
        assert!(fake.registered_ranges().is_empty());
        assert_eq!(fake.violations(), Vec::<String>::new());
        for w in [&watch_a, &watch_b] {
            assert_eq!(w.released.load(Ordering::SeqCst), 1);
        }
        // Both owners keep the same memory: whichever goes last must find none of it
        // registered (the other may go while pieces it handed over are still registered).
        let last = [&watch_a, &watch_b]
            .into_iter()
            .max_by_key(|w| w.order.load(Ordering::SeqCst))
            .unwrap();
        assert_eq!(last.released_while_registered.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_failed_piece_dma_surfaces_and_its_piece_is_still_unregistered() {
        let fake = Arc::new(FakeBackend::new(1 << 30));
        let n = 30 * CHUNK;
        let src = fake.host_alloc(n).unwrap();
        let dev = fake.mem_alloc(0, n).unwrap();
        let data = pattern(n as usize, 12);
        fake.write(src, &data);
        let uploads = registering(&fake, fake.clone(), 1, STREAM);
        // One worker: its first claim is the first piece, so the first copy is that piece's DMA.
        fake.fail_copy_after(0);
        let (keep, watch) = owner(&fake, src, n);
        uploads.submit(1, upload(src, dev, n, 0), Some(keep));
        let done = uploads.finish(1);
        assert_eq!(done.result.unwrap_err().call, "cuMemcpyAsync");
        assert!(
            done.owner.is_none(),
            "its piece is registered: the engine keeps the owner"
        );
        assert!(
            !fake.copies_pending(STREAM),
            "returned before the enqueued copies landed"
        );
        uploads.drain();
        assert!(fake.registered_ranges().is_empty());
        assert_eq!(fake.violations(), Vec::<String>::new());
        assert_eq!(watch.released.load(Ordering::SeqCst), 1);
        // The engine still works, and registers again.
        let (keep, _watch) = owner(&fake, src, n);
        drop(upload_owned(&uploads, 2, upload(src, dev, n, 0), keep));
        assert_eq!(fake.read(dev, n as usize), data);
        assert!(uploads.registered_bytes() > 0);
        uploads.drain();
    }
}

//! The device backend: the only way the core reaches memory, events and streams.
//!
//! Mirrors `pgk_device_backend` in `native/include/pygpukit/rust_capi.h`. The C++
//! core implements it over the CUDA driver; [`crate::host_backend::HostBackend`]
//! implements it over host memory for the CPU backend, and
//! [`crate::fake_backend::FakeBackend`] implements it for tests.
//!
//! Every method may be called from any thread; none may synchronize the device
//! except [`DeviceBackend::event_synchronize`].

use std::fmt;

/// A stream handle (`CUstream` as an integer; 0 is the legacy default stream).
pub type Stream = u64;
/// An event handle (`CUevent` as an integer).
pub type Event = u64;
/// A device address (`CUdeviceptr`), or a host address for host memory.
pub type DevPtr = u64;

/// `CUDA_ERROR_OUT_OF_MEMORY`: the only backend failure the pool recovers from
/// (by releasing cached memory and retrying).
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;
/// `CUDA_ERROR_NOT_READY`: what `event_query` returns for a pending event.
pub const CUDA_ERROR_NOT_READY: i32 = 600;
/// `CUDA_ERROR_NOT_SUPPORTED`: what [`DeviceBackend::pull_launch`] returns on a backend that
/// cannot launch the upload kernel (the engine then stages through the copy engine).
pub const CUDA_ERROR_NOT_SUPPORTED: i32 = 801;

/// A failed backend call: the `CUresult` and which call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError {
    pub code: i32,
    pub call: &'static str,
}

impl BackendError {
    pub fn new(code: i32, call: &'static str) -> Self {
        Self { code, call }
    }

    /// True when the device (or host) had no memory left for the request.
    pub fn is_out_of_memory(&self) -> bool {
        self.code == CUDA_ERROR_OUT_OF_MEMORY
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed with CUresult {}", self.call, self.code)
    }
}

pub type BackendResult<T> = Result<T, BackendError>;

/// One launch of the upload kernel (mirrors `pgk_pull_args`): it copies `nbytes` to `dst`,
/// chunk by chunk, out of a ring of pinned slots that host threads fill (see `pull_ring.rs`).
///
/// Chunk `i` of the launch has the ring-wide sequence number `seq = first_seq + i`; it sits in
/// slot `seq % slots` during lap `seq / slots`. The kernel waits until the slot's `ready` flag
/// reaches `lap + 1` (wrapping u32 comparison), copies `min(chunk_bytes, nbytes - i *
/// chunk_bytes)` bytes, then writes `lap + 1` to the slot's `freed` flag, after its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullArgs {
    /// Destination of the first byte; 16-byte aligned.
    pub dst: DevPtr,
    /// `slots * chunk_bytes` bytes of pinned host memory.
    pub ring: u64,
    /// Pinned: one u32 per slot, [`PULL_FLAG_STRIDE`] bytes apart (host writes, device reads).
    pub ready: u64,
    /// Pinned: as `ready`, device writes and host reads.
    pub freed: u64,
    /// One u32 of device memory the launch zeroes (in stream order) before the kernel runs.
    pub counter: DevPtr,
    pub first_seq: u64,
    pub nbytes: u64,
    /// A multiple of 16.
    pub chunk_bytes: u64,
    pub slots: u32,
    /// Thread blocks; each copies whole chunks, taking the next one in sequence order.
    pub ctas: u32,
}

/// Bytes between two flags of [`PullArgs::ready`] (and `freed`): one cache line each, so the
/// device's polls and the host's writes of different slots never share a line.
pub const PULL_FLAG_STRIDE: u64 = 64;

/// What the pool needs from a device. See the module documentation.
pub trait DeviceBackend: Send + Sync {
    fn mem_alloc(&self, device: i32, nbytes: u64) -> BackendResult<DevPtr>;
    fn mem_free(&self, device: i32, ptr: DevPtr) -> BackendResult<()>;
    /// `(free_bytes, total_bytes)` of the device.
    fn mem_get_info(&self, device: i32) -> BackendResult<(u64, u64)>;
    /// Page-locked host memory, addressable by `memcpy_async`.
    fn host_alloc(&self, nbytes: u64) -> BackendResult<u64>;
    fn host_free(&self, ptr: u64) -> BackendResult<()>;
    fn event_create(&self, device: i32) -> BackendResult<Event>;
    fn event_destroy(&self, event: Event) -> BackendResult<()>;
    fn event_record(&self, event: Event, stream: Stream) -> BackendResult<()>;
    /// `Ok(true)` when every piece of work before the event's record has completed.
    fn event_query(&self, event: Event) -> BackendResult<bool>;
    /// Blocks the calling thread until the event completes.
    fn event_synchronize(&self, event: Event) -> BackendResult<()>;
    /// Work enqueued on `stream` after this call waits for `event` (no host blocking).
    fn stream_wait_event(&self, stream: Stream, event: Event) -> BackendResult<()>;
    /// Copies `nbytes` from `src` to `dst` in stream order (unified addressing).
    fn memcpy_async(&self, dst: u64, src: u64, nbytes: u64, stream: Stream) -> BackendResult<()>;
    /// True while `stream` is being captured into a CUDA graph.
    fn stream_is_capturing(&self, stream: Stream) -> BackendResult<bool>;

    /// Enqueues the upload kernel on `stream` of `device` (see [`PullArgs`]). Backends that cannot run it
    /// return [`CUDA_ERROR_NOT_SUPPORTED`], and uploads stage through `memcpy_async` instead.
    fn pull_launch(&self, device: i32, stream: Stream, args: &PullArgs) -> BackendResult<()> {
        let _ = (device, stream, args);
        Err(BackendError::new(CUDA_ERROR_NOT_SUPPORTED, "pull_launch"))
    }
}

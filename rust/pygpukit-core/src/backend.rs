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
}

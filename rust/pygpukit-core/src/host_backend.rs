//! Host memory as a "device": what the CPU backend allocates through, so that
//! limits, stats and snapshots behave exactly as on a GPU.
//!
//! Memory comes from `std::alloc` (256-byte aligned, like `cuMemAlloc`). There
//! is no asynchronous work on the host, so events are always complete, streams
//! never wait and copies happen at once.

use crate::backend::CUDA_ERROR_OUT_OF_MEMORY;
use crate::backend::{BackendError, BackendResult, DevPtr, DeviceBackend, Event, Stream};
use std::alloc::{alloc, dealloc, Layout};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Alignment of every host block, as `cuMemAlloc` guarantees for device memory.
const ALIGN: usize = 256;
const CUDA_ERROR_INVALID_VALUE: i32 = 1;

/// See the module documentation.
#[derive(Default)]
pub struct HostBackend {
    sizes: Mutex<HashMap<u64, usize>>,
    next_event: AtomicU64,
}

impl HostBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn allocate(&self, nbytes: u64, call: &'static str) -> BackendResult<u64> {
        let size = usize::try_from(nbytes.max(1))
            .map_err(|_| BackendError::new(CUDA_ERROR_OUT_OF_MEMORY, call))?;
        let layout = Layout::from_size_align(size, ALIGN)
            .map_err(|_| BackendError::new(CUDA_ERROR_OUT_OF_MEMORY, call))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        if ptr.is_null() {
            return Err(BackendError::new(CUDA_ERROR_OUT_OF_MEMORY, call));
        }
        self.sizes
            .lock()
            .expect("host backend poisoned")
            .insert(ptr as u64, size);
        Ok(ptr as u64)
    }

    fn release(&self, ptr: u64, call: &'static str) -> BackendResult<()> {
        let size = self
            .sizes
            .lock()
            .expect("host backend poisoned")
            .remove(&ptr);
        let size = size.ok_or(BackendError::new(CUDA_ERROR_INVALID_VALUE, call))?;
        // SAFETY: ptr came from `allocate` with this size and alignment and is freed once.
        unsafe {
            dealloc(
                ptr as *mut u8,
                Layout::from_size_align_unchecked(size, ALIGN),
            )
        };
        Ok(())
    }
}

/// `(available, total)` host memory from /proc/meminfo; a huge total where unknown.
fn host_memory_info() -> (u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => {
            let total = field(&text, "MemTotal:").unwrap_or(u64::MAX / 2);
            (field(&text, "MemAvailable:").unwrap_or(total), total)
        }
        Err(_) => (u64::MAX / 2, u64::MAX / 2),
    }
}

impl DeviceBackend for HostBackend {
    fn mem_alloc(&self, _device: i32, nbytes: u64) -> BackendResult<DevPtr> {
        self.allocate(nbytes, "malloc")
    }

    fn mem_free(&self, _device: i32, ptr: DevPtr) -> BackendResult<()> {
        self.release(ptr, "free")
    }

    fn mem_get_info(&self, _device: i32) -> BackendResult<(u64, u64)> {
        Ok(host_memory_info())
    }

    fn host_alloc(&self, nbytes: u64) -> BackendResult<u64> {
        self.allocate(nbytes, "malloc")
    }

    fn host_free(&self, ptr: u64) -> BackendResult<()> {
        self.release(ptr, "free")
    }

    fn event_create(&self, _device: i32) -> BackendResult<Event> {
        Ok(self.next_event.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn event_destroy(&self, _event: Event) -> BackendResult<()> {
        Ok(())
    }

    fn event_record(&self, _event: Event, _stream: Stream) -> BackendResult<()> {
        Ok(())
    }

    fn event_query(&self, _event: Event) -> BackendResult<bool> {
        Ok(true)
    }

    fn event_synchronize(&self, _event: Event) -> BackendResult<()> {
        Ok(())
    }

    fn stream_wait_event(&self, _stream: Stream, _event: Event) -> BackendResult<()> {
        Ok(())
    }

    fn memcpy_async(&self, dst: u64, src: u64, nbytes: u64, _stream: Stream) -> BackendResult<()> {
        // SAFETY: the pool only copies between live blocks it owns, each at least nbytes long.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, nbytes as usize) };
        Ok(())
    }

    fn stream_is_capturing(&self, _stream: Stream) -> BackendResult<bool> {
        Ok(false)
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        let sizes = std::mem::take(&mut *self.sizes.lock().expect("host backend poisoned"));
        for (ptr, size) in sizes {
            // SAFETY: every entry is a live allocation made by `allocate`.
            unsafe {
                dealloc(
                    ptr as *mut u8,
                    Layout::from_size_align_unchecked(size, ALIGN),
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_aligned_writable_and_copyable() {
        let host = HostBackend::new();
        let a = host.mem_alloc(-1, 1000).unwrap();
        let b = host.host_alloc(1000).unwrap();
        assert_eq!(a % ALIGN as u64, 0);
        unsafe { std::ptr::write_bytes(a as *mut u8, 7, 1000) };
        host.memcpy_async(b, a, 1000, 0).unwrap();
        assert_eq!(unsafe { *(b as *const u8).add(999) }, 7);
        host.mem_free(-1, a).unwrap();
        host.host_free(b).unwrap();
        assert!(host.mem_free(-1, a).is_err());
    }

    #[test]
    fn reports_host_memory() {
        let (free, total) = HostBackend::new().mem_get_info(-1).unwrap();
        assert!(total > 0 && free <= total);
    }
}

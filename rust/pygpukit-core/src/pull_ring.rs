//! The ring of pinned slots that the upload kernel pulls from: large pageable uploads go
//! source → ring (host threads, cached stores) → device (a kernel reading the ring over PCIe).
//!
//! Why a kernel and a small ring instead of the copy engine and large staging buffers: the
//! staged path moves every byte through host DRAM three times (read the source, write staging,
//! the DMA reads staging), and on an H200 host that, not the link, capped a 1 GiB upload at
//! 73-85% of the pinned rate depending on the instance. A 16 MiB ring stays in the host's
//! last-level cache, so the only DRAM traffic is the source read. The copy engine could read a
//! cached ring too, but at ring-sized chunks (256 KiB, ~5 us of link time) its per-chunk driver
//! calls dominate (1 MiB cached chunks: 29 GB/s). A kernel needs no call per chunk: it waits on
//! a per-slot flag the host writes, copies, and writes a flag back. On an H200 host a 1 GiB
//! upload through this ring runs at 91% of the pinned copy-engine rate (the rate a kernel reads
//! pinned memory at), copy-engine staging at 82%; docs/benchmarks.md has the measurements.
//!
//! The protocol is in [`PullArgs`]: chunk sequence numbers run on across launches, so a slot's
//! flags never need resetting and the next upload's threads can fill slots while the previous
//! kernel still drains the ring. Launches therefore happen in sequence order, one upload's range
//! at a time (`upload.rs` keeps that order).

use crate::backend::{
    BackendError, BackendResult, DevPtr, DeviceBackend, PullArgs, PULL_FLAG_STRIDE,
};
use crate::transfer::HostMemory;
use std::time::{Duration, Instant};

/// A ring slot: long enough that a slot's two flag round trips over PCIe (~2 us) overlap the
/// other slots' copies, short enough that 64 of them fit a last-level cache with room to spare.
/// 64-512 KiB chunks measured the same; 1 MiB chunks with 16 slots were about 10% slower.
pub const PULL_CHUNK: u64 = 256 << 10;

/// Slots in the ring: 16 MiB in all (8 MiB: 49.3 GB/s, 32 MiB: 50.4, the same as 16).
pub const PULL_SLOTS: u32 = 64;

/// Thread blocks of the upload kernel: 8 read pinned memory at 50.1 GB/s, 16 at 50.7, 32 at
/// 51.3; 16 leaves almost every SM to the kernels that run beside an upload.
pub const PULL_CTAS: u32 = 16;

/// How long a thread waiting for a slot spins before it starts sleeping between looks, and how
/// often a sleeping thread asks whether the kernel that should free the slot failed.
const SPIN_FOR: Duration = Duration::from_micros(200);
const CHECK_EVERY: Duration = Duration::from_millis(1);
const NAP: Duration = Duration::from_micros(20);

/// A slot and its lap for a sequence number, and the flag value that marks the lap done.
fn position(seq: u64, slots: u32) -> (u64, u32) {
    (seq % slots as u64, (seq / slots as u64) as u32)
}

/// The `ready` and `freed` flags of `slots` slots.
fn flag_bytes(slots: u32) -> u64 {
    2 * slots as u64 * PULL_FLAG_STRIDE
}

/// `a >= b` for flags that wrap around u32.
fn reached(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// See the module documentation.
pub struct PullRing {
    ring: u64,
    /// `ready` flags, then `freed` flags, in one pinned allocation.
    flags: u64,
    counter: DevPtr,
    chunk: u64,
    slots: u32,
}

impl PullRing {
    /// Allocates the ring (`slots` chunks of `chunk` bytes, pinned), its flags (pinned, zeroed)
    /// and the kernel's chunk counter (device).
    pub fn create(
        backend: &dyn DeviceBackend,
        host: &dyn HostMemory,
        device: i32,
        chunk: u64,
        slots: u32,
    ) -> BackendResult<Self> {
        let ring = backend.host_alloc(chunk * slots as u64)?;
        let flags = match backend.host_alloc(flag_bytes(slots)) {
            Ok(f) => f,
            Err(e) => {
                let _ = backend.host_free(ring);
                return Err(e);
            }
        };
        let counter = match backend.mem_alloc(device, 256) {
            Ok(c) => c,
            Err(e) => {
                let _ = backend.host_free(flags);
                let _ = backend.host_free(ring);
                return Err(e);
            }
        };
        for i in 0..2 * slots as u64 {
            host.store_flag(flags + i * PULL_FLAG_STRIDE, 0);
        }
        Ok(Self {
            ring,
            flags,
            counter,
            chunk,
            slots,
        })
    }

    /// Pinned bytes the ring holds.
    pub fn reserved(&self) -> u64 {
        self.chunk * self.slots as u64 + flag_bytes(self.slots)
    }

    pub fn chunk(&self) -> u64 {
        self.chunk
    }

    fn ready(&self, slot: u64) -> u64 {
        self.flags + slot * PULL_FLAG_STRIDE
    }

    fn freed(&self, slot: u64) -> u64 {
        self.flags + (self.slots as u64 + slot) * PULL_FLAG_STRIDE
    }

    /// Chunks an upload of `nbytes` takes: the sequence numbers `first_seq..first_seq + n`.
    pub fn chunks(&self, nbytes: u64) -> u64 {
        nbytes.div_ceil(self.chunk)
    }

    /// The launch of an upload of `nbytes` to `dst` whose chunks start at `first_seq`. The
    /// caller hands out sequence ranges in launch order, without gaps: a kernel waits for every
    /// chunk of its range, and a slot's next lap for the one before it.
    pub fn args(&self, dst: DevPtr, first_seq: u64, nbytes: u64, ctas: u32) -> PullArgs {
        PullArgs {
            dst,
            ring: self.ring,
            ready: self.ready(0),
            freed: self.freed(0),
            counter: self.counter,
            first_seq,
            nbytes,
            chunk_bytes: self.chunk,
            slots: self.slots,
            ctas,
        }
    }

    /// Chunk `seq`: waits until the kernel has read the slot's previous lap, copies `len` bytes
    /// from `src` into the slot (none when `src` is `None`: the chunk is only released, for a
    /// failed upload whose kernel must still finish), then marks it ready.
    ///
    /// `finished` is asked every [`CHECK_EVERY`] of waiting whether the kernel of this chunk's
    /// upload has completed. An error (the device failed: the slot will never be freed) ends
    /// the wait with that error; so does `true` with the slot still not freed, which only a
    /// broken protocol can cause, since that kernel runs after every earlier one.
    pub fn fill(
        &self,
        host: &dyn HostMemory,
        seq: u64,
        src: Option<u64>,
        len: u64,
        mut finished: impl FnMut() -> BackendResult<bool>,
    ) -> BackendResult<()> {
        let (slot, lap) = position(seq, self.slots);
        let freed = self.freed(slot);
        if !reached(host.load_flag(freed), lap) {
            let start = Instant::now();
            let mut checked = start;
            loop {
                if reached(host.load_flag(freed), lap) {
                    break;
                }
                let now = Instant::now();
                if now - checked >= CHECK_EVERY {
                    checked = now;
                    if finished()? && !reached(host.load_flag(freed), lap) {
                        return Err(stalled());
                    }
                }
                if now - start < SPIN_FOR {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(NAP);
                }
            }
        }
        if let Some(src) = src {
            host.copy_cached(self.ring + slot * self.chunk, src, len);
        }
        host.store_flag(self.ready(slot), lap.wrapping_add(1));
        Ok(())
    }

    /// Frees the ring's memory. Only when no kernel can still read it.
    pub fn destroy(self, backend: &dyn DeviceBackend, device: i32) {
        let _ = backend.mem_free(device, self.counter);
        let _ = backend.host_free(self.flags);
        let _ = backend.host_free(self.ring);
    }
}

/// The error a fill reports when the kernel that should free its slot has finished without
/// doing so (a broken protocol, not a device fault).
fn stalled() -> BackendError {
    BackendError::new(
        crate::backend::CUDA_ERROR_NOT_READY,
        "upload kernel (slot never freed)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_wrapping_flags() {
        assert_eq!(position(0, 64), (0, 0));
        assert_eq!(position(65, 64), (1, 1));
        assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5));
        // Across the u32 wrap: lap 2^32 - 1 is done when the flag reads 0 (= lap + 1).
        assert!(reached(0, u32::MAX));
        assert!(!reached(u32::MAX, 0));
    }
}

//! Pinned host memory for staging copies and spilled blocks, cached by size
//! class with event-guarded reuse.
//!
//! Invariant: a buffer given back with a guard stream is handed out again (or
//! returned to the backend by [`PinnedPool::trim`]) only after the event
//! recorded at release has completed, i.e. after every copy enqueued on that
//! stream before the release has finished reading or writing it.

use crate::backend::{BackendResult, DeviceBackend, Event, Stream};
use crate::events::EventPool;
use std::collections::{BTreeMap, HashMap};

/// Smallest pinned buffer: page-locking has a per-call cost, so tiny buffers are rounded up.
const MIN_PINNED: u64 = 64 << 10;

/// A pinned host buffer of `size >= ` the requested bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinnedBuf {
    pub ptr: u64,
    pub size: u64,
}

struct Cached {
    ptr: u64,
    guard: Option<Event>,
}

/// See the module documentation.
pub struct PinnedPool {
    device: i32,
    events: EventPool,
    cached: BTreeMap<u64, Vec<Cached>>,
    live: HashMap<u64, u64>,
    reserved: u64,
}

fn size_class(nbytes: u64) -> u64 {
    nbytes.max(MIN_PINNED).next_power_of_two()
}

impl PinnedPool {
    /// A pool whose guard events belong to `device`.
    pub fn new(device: i32) -> Self {
        Self {
            device,
            events: EventPool::default(),
            cached: BTreeMap::new(),
            live: HashMap::new(),
            reserved: 0,
        }
    }

    /// Pinned bytes held, handed out or cached.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// A buffer of at least `nbytes`: a cached one whose guard has completed, else a new one.
    pub fn acquire(
        &mut self,
        backend: &dyn DeviceBackend,
        nbytes: u64,
    ) -> BackendResult<PinnedBuf> {
        let class = size_class(nbytes);
        if let Some(list) = self.cached.get_mut(&class) {
            let mut ready = None;
            for (i, c) in list.iter().enumerate() {
                match c.guard {
                    None => ready = Some(i),
                    Some(ev) if backend.event_query(ev)? => ready = Some(i),
                    Some(_) => continue,
                }
                break;
            }
            if let Some(i) = ready {
                let c = list.swap_remove(i);
                if let Some(ev) = c.guard {
                    self.events.give(ev);
                }
                self.live.insert(c.ptr, class);
                return Ok(PinnedBuf {
                    ptr: c.ptr,
                    size: class,
                });
            }
        }
        let ptr = backend.host_alloc(class)?;
        self.reserved += class;
        self.live.insert(ptr, class);
        Ok(PinnedBuf { ptr, size: class })
    }

    /// Gives a buffer back. With `guard`, it is reused only after the work
    /// enqueued on that stream so far has completed.
    pub fn release(
        &mut self,
        backend: &dyn DeviceBackend,
        buf: PinnedBuf,
        guard: Option<Stream>,
    ) -> BackendResult<()> {
        let class = self
            .live
            .remove(&buf.ptr)
            .expect("pinned buffer released twice or never acquired");
        let guard = match guard {
            Some(stream) => match self.events.record(backend, self.device, stream) {
                Ok(ev) => Some(ev),
                Err(e) => {
                    // Without a guard event the buffer cannot be proven idle: keep it out of reuse.
                    self.live.insert(buf.ptr, class);
                    return Err(e);
                }
            },
            None => None,
        };
        self.cached.entry(class).or_default().push(Cached {
            ptr: buf.ptr,
            guard,
        });
        Ok(())
    }

    /// Returns every cached buffer whose guard has completed to the backend.
    /// With `wait`, waits for pending guards first so that everything cached goes.
    pub fn trim(&mut self, backend: &dyn DeviceBackend, wait: bool) -> BackendResult<u64> {
        let mut freed = 0;
        for (class, list) in self.cached.iter_mut() {
            let mut keep = Vec::new();
            for c in list.drain(..) {
                let idle = match c.guard {
                    None => true,
                    Some(ev) if wait => backend.event_synchronize(ev).is_ok(),
                    Some(ev) => backend.event_query(ev).unwrap_or(false),
                };
                if !idle {
                    keep.push(c);
                    continue;
                }
                if let Some(ev) = c.guard {
                    self.events.give(ev);
                }
                backend.host_free(c.ptr)?;
                self.reserved -= class;
                freed += class;
            }
            *list = keep;
        }
        self.cached.retain(|_, l| !l.is_empty());
        if self.cached.is_empty() {
            self.events.destroy_all(backend);
        }
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    #[test]
    fn buffer_is_reused_only_after_its_guard_completes() {
        let fake = FakeBackend::new(0);
        let mut pool = PinnedPool::new(0);
        let a = pool.acquire(&fake, 1000).unwrap();
        pool.release(&fake, a, Some(5)).unwrap();
        let b = pool.acquire(&fake, 1000).unwrap();
        assert_ne!(a.ptr, b.ptr, "guard still pending: a new buffer is needed");
        fake.complete_stream(5);
        let c = pool.acquire(&fake, 1000).unwrap();
        assert_eq!(c.ptr, a.ptr);
    }

    #[test]
    fn trim_returns_idle_buffers_and_waits_when_asked() {
        let fake = FakeBackend::new(0);
        let mut pool = PinnedPool::new(0);
        let a = pool.acquire(&fake, 1).unwrap();
        let b = pool.acquire(&fake, 1).unwrap();
        pool.release(&fake, a, None).unwrap();
        pool.release(&fake, b, Some(1)).unwrap();
        assert_eq!(pool.trim(&fake, false).unwrap(), MIN_PINNED);
        assert_eq!(fake.host_used(), MIN_PINNED);
        assert_eq!(pool.trim(&fake, true).unwrap(), MIN_PINNED);
        assert_eq!((fake.host_used(), pool.reserved()), (0, 0));
    }
}

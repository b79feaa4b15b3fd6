//! A free list of backend events, so fences and guards do not create and
//! destroy a driver event each time.

use crate::backend::{BackendResult, DeviceBackend, Event};

/// Events of one device, idle and ready to record.
#[derive(Default)]
pub struct EventPool {
    idle: Vec<Event>,
}

impl EventPool {
    /// An idle event, created through the backend when none is cached.
    pub fn take(&mut self, backend: &dyn DeviceBackend, device: i32) -> BackendResult<Event> {
        match self.idle.pop() {
            Some(ev) => Ok(ev),
            None => backend.event_create(device),
        }
    }

    /// Gives back an event whose last record has completed (or was never waited on).
    pub fn give(&mut self, event: Event) {
        self.idle.push(event);
    }

    /// Destroys every idle event.
    pub fn destroy_all(&mut self, backend: &dyn DeviceBackend) {
        for ev in self.idle.drain(..) {
            // A failed destroy leaks one driver event; nothing else depends on it.
            let _ = backend.event_destroy(ev);
        }
    }

    /// Takes an event and records it on `stream`.
    pub fn record(
        &mut self,
        backend: &dyn DeviceBackend,
        device: i32,
        stream: u64,
    ) -> BackendResult<Event> {
        let ev = self.take(backend, device)?;
        if let Err(e) = backend.event_record(ev, stream) {
            self.give(ev);
            return Err(e);
        }
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;

    #[test]
    fn reuses_given_back_events() {
        let fake = FakeBackend::new(0);
        let mut pool = EventPool::default();
        let a = pool.record(&fake, 0, 1).unwrap();
        pool.give(a);
        assert_eq!(pool.take(&fake, 0).unwrap(), a);
        assert_eq!(fake.live_events(), 1);
        pool.give(a);
        pool.destroy_all(&fake);
        assert_eq!(fake.live_events(), 0);
    }
}

//! The process-wide registry: one pool per device plus the host pool (device
//! -1, the CPU backend), the dispatch controller, and settings that apply to
//! pools created later (the global limit, partition quotas and names).
//!
//! Block and graph-region ids carry their pool in their high bits
//! (`pool::ID_BITS`), so `free`/`touch` find the pool without a lookup table.

use crate::backend::{BackendError, DeviceBackend, Stream};
use crate::dispatch::DispatchController;
use crate::host_backend::HostBackend;
use crate::limits::{current_partition, LimitSpec, PartitionId};
use crate::pool::{
    AllocError, AllocOptions, BlockRef, DevicePool, GraphPoolId, PartitionQos, PoolError, ID_BITS,
};
use crate::transfer::{ProcessMemory, TransferEngine, TransferRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The CPU backend's device number.
pub const HOST_DEVICE: i32 = -1;
const HOST_PREFIX: u64 = 1;

/// Errors of registry calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeError {
    NoBackend(i32),
    AlreadyRegistered,
    Pool(PoolError),
    TransferNotConfigured(i32),
    TransferAlreadyConfigured(i32),
    UnknownTransfer(u64),
}

impl From<PoolError> for RuntimeError {
    fn from(e: PoolError) -> Self {
        RuntimeError::Pool(e)
    }
}

impl From<BackendError> for RuntimeError {
    fn from(e: BackendError) -> Self {
        RuntimeError::Pool(PoolError::Backend(e))
    }
}

#[derive(Default)]
struct Settings {
    limit: Option<LimitSpec>,
    partition_limits: HashMap<PartitionId, Option<u64>>,
    partition_names: HashMap<PartitionId, String>,
    next_partition: PartitionId,
    partition_qos: HashMap<PartitionId, PartitionQos>,
    qos_capacity: Option<u64>,
    /// The memory each live scheduler (by owner id) gives its partitions; their sum is the
    /// pools' QoS capacity.
    governors: HashMap<u64, u64>,
    /// Deleted partitions, refused by every pool (present and future).
    retired: Vec<PartitionId>,
}

/// The registered device backend and one pool per device.
struct Devices {
    backend: Arc<dyn DeviceBackend>,
    pools: Vec<Mutex<DevicePool>>,
}

/// See the module documentation.
pub struct Runtime {
    host: Mutex<DevicePool>,
    devices: OnceLock<Devices>,
    dispatch: DispatchController,
    settings: Mutex<Settings>,
    /// Engines are shared out of the map: each has its own locks, and upload threads keep a
    /// reference while they work.
    transfers: Mutex<HashMap<i32, Arc<TransferEngine>>>,
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

fn lock(pool: &Mutex<DevicePool>) -> MutexGuard<'_, DevicePool> {
    // A panic inside the pool is a bug; the pool's state is still consistent
    // between calls, so keep serving rather than poisoning the process.
    pool.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    pub fn new() -> Self {
        Self {
            host: Mutex::new(DevicePool::new(
                HOST_DEVICE,
                Arc::new(HostBackend::new()),
                HOST_PREFIX,
            )),
            devices: OnceLock::new(),
            dispatch: DispatchController::new(),
            transfers: Mutex::new(HashMap::new()),
            settings: Mutex::new(Settings {
                next_partition: 1,
                ..Settings::default()
            }),
        }
    }

    fn transfers(&self) -> MutexGuard<'_, HashMap<i32, Arc<TransferEngine>>> {
        self.transfers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn transfer_engine(&self, device: i32) -> Option<Arc<TransferEngine>> {
        self.transfers().get(&device).cloned()
    }

    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the device backend for devices `[0, count)`. Once per process.
    pub fn register_backend(
        &self,
        backend: Arc<dyn DeviceBackend>,
        count: i32,
    ) -> Result<(), RuntimeError> {
        let pools = (0..count.max(0))
            .map(|d| Mutex::new(DevicePool::new(d, backend.clone(), d as u64 + 2)))
            .collect();
        self.devices
            .set(Devices { backend, pools })
            .map_err(|_| RuntimeError::AlreadyRegistered)?;
        let settings = self.settings();
        for pool in self.device_pools() {
            let mut p = lock(pool);
            apply_settings(&mut p, &settings)?;
        }
        Ok(())
    }

    fn device_pools(&self) -> &[Mutex<DevicePool>] {
        self.devices.get().map_or(&[], |d| d.pools.as_slice())
    }

    /// Devices with a registered backend (0 before registration).
    pub fn device_count(&self) -> i32 {
        self.device_pools().len() as i32
    }

    /// The backend of `device` (the host backend for [`HOST_DEVICE`]).
    pub fn backend(&self, device: i32) -> Result<Arc<dyn DeviceBackend>, RuntimeError> {
        if device == HOST_DEVICE {
            return Ok(lock(&self.host).backend().clone());
        }
        match self.devices.get() {
            Some(d) if device >= 0 && (device as usize) < d.pools.len() => Ok(d.backend.clone()),
            _ => Err(RuntimeError::NoBackend(device)),
        }
    }

    /// The pool of `device`.
    pub fn pool(&self, device: i32) -> Result<MutexGuard<'_, DevicePool>, RuntimeError> {
        if device == HOST_DEVICE {
            return Ok(lock(&self.host));
        }
        let pools = self.device_pools();
        usize::try_from(device)
            .ok()
            .and_then(|d| pools.get(d))
            .map(lock)
            .ok_or(RuntimeError::NoBackend(device))
    }

    /// Every pool that exists: the host pool first, then devices.
    pub fn devices(&self) -> Vec<i32> {
        std::iter::once(HOST_DEVICE)
            .chain(0..self.device_count())
            .collect()
    }

    fn pool_of_id(&self, id: u64) -> Result<MutexGuard<'_, DevicePool>, RuntimeError> {
        let prefix = id >> ID_BITS;
        let unknown = RuntimeError::Pool(PoolError::UnknownBlock(id));
        match prefix {
            HOST_PREFIX => Ok(lock(&self.host)),
            0 => Err(unknown),
            p => self
                .device_pools()
                .get((p - 2) as usize)
                .map(lock)
                .ok_or(unknown),
        }
    }

    /// A block on `device`, charged to the calling thread's current partition.
    pub fn alloc(
        &self,
        device: i32,
        nbytes: u64,
        stream: Stream,
        options: AllocOptions,
    ) -> Result<BlockRef, RuntimeError> {
        self.alloc_in(device, nbytes, stream, options, current_partition())
    }

    /// A block on `device`, charged to `partition`.
    pub fn alloc_in(
        &self,
        device: i32,
        nbytes: u64,
        stream: Stream,
        options: AllocOptions,
        partition: PartitionId,
    ) -> Result<BlockRef, RuntimeError> {
        let mut pool = self.pool(device)?;
        pool.alloc(nbytes, stream, options, partition)
            .map_err(|e: AllocError| RuntimeError::Pool(PoolError::Alloc(e)))
    }

    pub fn free(&self, id: u64, stream: Stream) -> Result<(), RuntimeError> {
        Ok(self.pool_of_id(id)?.free(id, stream)?)
    }

    pub fn touch(&self, id: u64, stream: Stream) -> Result<BlockRef, RuntimeError> {
        Ok(self.pool_of_id(id)?.touch(id, stream)?)
    }

    /// Touches block `id` and keeps it in place (never spilled) until as many
    /// [`Runtime::release_in_place`] calls: for a host view of its memory.
    pub fn hold_in_place(&self, id: u64, stream: Stream) -> Result<BlockRef, RuntimeError> {
        Ok(self.pool_of_id(id)?.hold_in_place(id, stream)?)
    }

    /// Ends one [`Runtime::hold_in_place`] of block `id`.
    pub fn release_in_place(&self, id: u64) -> Result<(), RuntimeError> {
        self.pool_of_id(id)?.release_in_place(id);
        Ok(())
    }

    /// Touches blocks of one pool together (see [`DevicePool::touch_all`]).
    pub fn touch_all(&self, ids: &[u64], stream: Stream) -> Result<Vec<BlockRef>, RuntimeError> {
        let Some(&first) = ids.first() else {
            return Ok(Vec::new());
        };
        if let Some(&other) = ids.iter().find(|&&id| id >> ID_BITS != first >> ID_BITS) {
            return Err(RuntimeError::Pool(PoolError::UnknownBlock(other)));
        }
        Ok(self.pool_of_id(first)?.touch_all(ids, stream)?)
    }

    pub fn graph_begin(&self, device: i32, stream: Stream) -> Result<GraphPoolId, RuntimeError> {
        Ok(self.pool(device)?.graph_begin(stream)?)
    }

    pub fn graph_end(&self, graph: GraphPoolId) -> Result<(), RuntimeError> {
        let mut pool = self
            .pool_of_id(graph)
            .map_err(|_| PoolError::UnknownGraphPool(graph))?;
        Ok(pool.graph_end(graph)?)
    }

    pub fn graph_release(&self, graph: GraphPoolId) -> Result<(), RuntimeError> {
        let mut pool = self
            .pool_of_id(graph)
            .map_err(|_| PoolError::UnknownGraphPool(graph))?;
        Ok(pool.graph_release(graph)?)
    }

    /// Sets the global limit of one device, or (with `None`) of every pool,
    /// present and future.
    pub fn set_limit(
        &self,
        spec: Option<LimitSpec>,
        device: Option<i32>,
    ) -> Result<(), RuntimeError> {
        match device {
            Some(d) => {
                let mut pool = self.pool(d)?;
                let limit = resolve(&pool, spec)?;
                Ok(pool.set_limit(limit)?)
            }
            None => {
                self.settings().limit = spec;
                for d in self.devices() {
                    let mut pool = self.pool(d)?;
                    let limit = resolve(&pool, spec)?;
                    pool.set_limit(limit)?;
                }
                Ok(())
            }
        }
    }

    /// A new partition named `name`, with an optional quota in bytes on every device.
    pub fn create_partition(
        &self,
        name: &str,
        limit: Option<u64>,
    ) -> Result<PartitionId, RuntimeError> {
        let id = {
            let mut s = self.settings();
            let id = s.next_partition;
            s.next_partition += 1;
            s.partition_names.insert(id, name.to_string());
            id
        };
        self.set_partition_limit(id, limit)?;
        Ok(id)
    }

    pub fn set_partition_limit(
        &self,
        partition: PartitionId,
        limit: Option<u64>,
    ) -> Result<(), RuntimeError> {
        self.settings().partition_limits.insert(partition, limit);
        for d in self.devices() {
            self.pool(d)?.set_partition_limit(partition, limit);
        }
        Ok(())
    }

    /// Sets (or forgets) a partition's QoS on every pool: reservations and reclaim order.
    pub fn set_partition_qos(
        &self,
        partition: PartitionId,
        qos: Option<PartitionQos>,
    ) -> Result<(), RuntimeError> {
        match qos {
            Some(q) => self.settings().partition_qos.insert(partition, q),
            None => self.settings().partition_qos.remove(&partition),
        };
        for d in self.devices() {
            self.pool(d)?.set_partition_qos(partition, qos);
        }
        Ok(())
    }

    /// The bytes partitions' reservations are held back within, on every pool.
    pub fn set_qos_capacity(&self, capacity: Option<u64>) -> Result<(), RuntimeError> {
        self.settings().qos_capacity = capacity;
        for d in self.devices() {
            self.pool(d)?.set_qos_capacity(capacity);
        }
        Ok(())
    }

    /// Records that scheduler `owner` gives its partitions `memory` bytes (`None`: it
    /// governs nothing any more, e.g. shut down). The pools' QoS capacity is the sum over
    /// the schedulers that govern partitions, so a second scheduler adds its budget for its
    /// own partitions instead of replacing the first one's; with none it is `None`.
    pub fn set_governor(&self, owner: u64, memory: Option<u64>) -> Result<(), RuntimeError> {
        let capacity = {
            let mut s = self.settings();
            match memory {
                Some(m) => s.governors.insert(owner, m),
                None => s.governors.remove(&owner),
            };
            (!s.governors.is_empty())
                .then(|| s.governors.values().fold(0u64, |a, &m| a.saturating_add(m)))
        };
        self.set_qos_capacity(capacity)
    }

    /// Retires a deleted partition on every pool, present and future: its quota and QoS are
    /// lifted and allocations charged to it refused (`AllocErrorKind::PartitionRetired`).
    pub fn retire_partition(&self, partition: PartitionId) -> Result<(), RuntimeError> {
        {
            let mut s = self.settings();
            s.partition_limits.remove(&partition);
            s.partition_qos.remove(&partition);
            s.retired.push(partition);
        }
        for d in self.devices() {
            self.pool(d)?.retire_partition(partition);
        }
        Ok(())
    }

    pub fn partition_name(&self, partition: PartitionId) -> Option<String> {
        self.settings().partition_names.get(&partition).cloned()
    }

    /// Releases cached memory of one device, or of every pool.
    pub fn empty_cache(&self, device: Option<i32>) -> Result<u64, RuntimeError> {
        let devices = device.map_or_else(|| self.devices(), |d| vec![d]);
        let mut released = 0;
        for d in devices {
            released += self.pool(d)?.empty_cache()?;
        }
        Ok(released)
    }

    pub fn dispatch(&self) -> &DispatchController {
        &self.dispatch
    }

    /// Before a launch on `stream` of `device`: a ticket for [`Runtime::dispatch_end`].
    pub fn dispatch_begin(&self, device: i32, stream: Stream) -> Result<u64, RuntimeError> {
        if let Some(ticket) = self.dispatch.begin_untracked() {
            return Ok(ticket);
        }
        let backend = self.backend(device)?;
        Ok(self.dispatch.begin(&*backend, device, stream)?)
    }

    /// Right after the launch of `ticket` was enqueued (`ok` false if it failed).
    pub fn dispatch_end(&self, ticket: u64, ok: bool) -> Result<(), RuntimeError> {
        if self.dispatch.end_untracked(ticket, ok) {
            return Ok(());
        }
        let Some(device) = self.dispatch.ticket_device(ticket) else {
            return Ok(());
        };
        let backend = self.backend(device)?;
        Ok(self.dispatch.end(&*backend, ticket, ok)?)
    }

    /// Sets up the transfer engine of `device` (once): copy streams, staging
    /// chunk size and chunks in flight.
    pub fn transfer_configure(
        &self,
        device: i32,
        h2d_stream: Stream,
        d2h_stream: Stream,
        pull_stream: Option<Stream>,
        chunk: u64,
        slots: usize,
    ) -> Result<(), RuntimeError> {
        let backend = self.backend(device)?;
        let mut engines = self.transfers();
        if engines.contains_key(&device) {
            return Err(RuntimeError::TransferAlreadyConfigured(device));
        }
        let host = Arc::new(ProcessMemory);
        let engine = TransferEngine::new(
            device,
            backend,
            host,
            h2d_stream,
            d2h_stream,
            pull_stream,
            chunk,
            slots,
        );
        engines.insert(device, Arc::new(engine));
        Ok(())
    }

    /// Submits a copy of pageable host memory on `device`'s transfer engine
    /// and drives it until every chunk is enqueued (host-to-device) or has
    /// landed in host memory (device-to-host); see [`TransferEngine::submit`].
    /// Returns a ticket naming its device in the high bits.
    ///
    /// # Safety
    /// `request.host` must be valid host memory of `request.nbytes` bytes (read
    /// for host-to-device, written for device-to-host) until the ticket completes.
    pub unsafe fn transfer_submit(
        &self,
        device: i32,
        request: TransferRequest,
    ) -> Result<u64, RuntimeError> {
        let engine = self
            .transfer_engine(device)
            .ok_or(RuntimeError::TransferNotConfigured(device))?;
        // SAFETY: forwarded from the caller.
        let local = unsafe { engine.submit(request) }?;
        Ok(((device + 2) as u64) << ID_BITS | local)
    }

    /// The device a transfer ticket names in its high bits (see `transfer_submit`).
    fn transfer_device(ticket: u64) -> i32 {
        (ticket >> ID_BITS) as i32 - 2
    }

    fn with_transfer<T>(
        &self,
        ticket: u64,
        f: impl FnOnce(&TransferEngine, u64) -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let device = Self::transfer_device(ticket);
        let local = ticket & ((1 << ID_BITS) - 1);
        let engine = self
            .transfer_engine(device)
            .ok_or(RuntimeError::UnknownTransfer(ticket))?;
        if engine.state(local).is_none() {
            return Err(RuntimeError::UnknownTransfer(ticket));
        }
        f(&engine, local)
    }

    /// Makes work enqueued on `stream` from now on wait for the copy of `ticket`.
    pub fn transfer_stream_wait(&self, ticket: u64, stream: Stream) -> Result<(), RuntimeError> {
        let device = Self::transfer_device(ticket);
        self.with_transfer(ticket, |engine, local| {
            if let Some(ev) = engine.completion_event(local) {
                self.backend(device)?.stream_wait_event(stream, ev)?;
            }
            Ok(())
        })
    }

    /// Waits on the host for the copy of `ticket`, then forgets the ticket.
    pub fn transfer_wait(&self, ticket: u64) -> Result<(), RuntimeError> {
        self.with_transfer(ticket, |engine, local| Ok(engine.wait(local)?))
    }

    /// Pinned staging bytes held by `device`'s transfer engine (0 before it is configured).
    pub fn transfer_staging_reserved(&self, device: i32) -> u64 {
        self.transfer_engine(device)
            .map_or(0, |e| e.staging_reserved())
    }

    /// Uploads `device`'s transfer engine has copied with the upload kernel (0 before it is
    /// configured).
    pub fn transfer_kernel_uploads(&self, device: i32) -> u64 {
        self.transfer_engine(device)
            .map_or(0, |e| e.upload_kernel_launches())
    }

    /// Forgets a ticket that will not be waited on.
    pub fn transfer_release(&self, ticket: u64) -> Result<(), RuntimeError> {
        self.with_transfer(ticket, |engine, local| {
            engine.release(local);
            Ok(())
        })
    }
}

fn resolve(pool: &DevicePool, spec: Option<LimitSpec>) -> Result<Option<u64>, BackendError> {
    match spec {
        None => Ok(None),
        Some(LimitSpec::Bytes(b)) => Ok(Some(b)),
        Some(s) => {
            let (_, total) = pool.backend().mem_get_info(pool.device())?;
            Ok(Some(s.resolve(total)))
        }
    }
}

fn apply_settings(pool: &mut DevicePool, settings: &Settings) -> Result<(), BackendError> {
    let limit = resolve(pool, settings.limit)?;
    pool.set_limit(limit)?;
    for (&p, &l) in &settings.partition_limits {
        pool.set_partition_limit(p, l);
    }
    for (&p, &q) in &settings.partition_qos {
        pool.set_partition_qos(p, Some(q));
    }
    pool.set_qos_capacity(settings.qos_capacity);
    for &p in &settings.retired {
        pool.retire_partition(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_backend::FakeBackend;
    use crate::pool::AllocErrorKind;
    use crate::transfer::Direction;

    #[test]
    fn host_pool_works_before_any_backend_and_ids_find_their_pool() {
        let rt = Runtime::new();
        assert_eq!(
            rt.alloc(0, 10, 0, AllocOptions::default()).unwrap_err(),
            RuntimeError::NoBackend(0)
        );
        let h = rt
            .alloc(HOST_DEVICE, 100, 0, AllocOptions::default())
            .unwrap();
        let fake = Arc::new(FakeBackend::new(1 << 30));
        rt.set_limit(Some(LimitSpec::Fraction(0.5)), None).unwrap();
        rt.register_backend(fake.clone(), 2).unwrap();
        assert_eq!(
            rt.register_backend(fake.clone(), 2).unwrap_err(),
            RuntimeError::AlreadyRegistered
        );
        assert_eq!(
            rt.pool(1).unwrap().limit(),
            Some(1 << 29),
            "limit set before registration applies"
        );
        let d = rt.alloc(1, 100, 0, AllocOptions::default()).unwrap();
        rt.touch(d.id, 0).unwrap();
        rt.free(d.id, 0).unwrap();
        rt.free(h.id, 0).unwrap();
        assert!(rt.free(h.id, 0).is_err());
        assert_eq!(rt.pool(1).unwrap().stats().free_count, 1);
        assert_eq!(
            rt.empty_cache(None).unwrap(),
            4 << 20,
            "one small segment on the host, one on device 1"
        );
    }

    #[test]
    fn host_transfers_copy_pageable_memory_through_staging() {
        let rt = Runtime::new();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let dev = rt
            .alloc(HOST_DEVICE, data.len() as u64, 0, AllocOptions::default())
            .unwrap();
        let request = |direction, host: u64| TransferRequest {
            direction,
            host,
            device: dev.ptr,
            nbytes: data.len() as u64,
            priority: 0,
        };
        let h2d = request(Direction::HostToDevice, data.as_ptr() as u64);
        // SAFETY: `data` outlives the ticket, which is waited for below.
        let unconfigured = unsafe { rt.transfer_submit(HOST_DEVICE, h2d) };
        assert_eq!(
            unconfigured,
            Err(RuntimeError::TransferNotConfigured(HOST_DEVICE))
        );
        rt.transfer_configure(HOST_DEVICE, 1, 2, None, 64 << 10, 2)
            .unwrap();
        // SAFETY: as above.
        let t = unsafe { rt.transfer_submit(HOST_DEVICE, h2d) }.unwrap();
        rt.transfer_stream_wait(t, 3).unwrap();
        rt.transfer_wait(t).unwrap();
        assert_eq!(rt.transfer_wait(t), Err(RuntimeError::UnknownTransfer(t)));
        let mut back = vec![0u8; data.len()];
        let d2h = request(Direction::DeviceToHost, back.as_mut_ptr() as u64);
        // SAFETY: `back` outlives the ticket, which is complete when submit returns.
        let t = unsafe { rt.transfer_submit(HOST_DEVICE, d2h) }.unwrap();
        assert_eq!(back, data);
        rt.transfer_release(t).unwrap();
        rt.free(dev.id, 0).unwrap();
    }

    #[test]
    fn partitions_are_named_and_charged_on_every_pool() {
        let rt = Runtime::new();
        let p = rt.create_partition("inference", Some(1 << 20)).unwrap();
        assert_eq!(rt.partition_name(p).as_deref(), Some("inference"));
        let a = rt
            .alloc_in(HOST_DEVICE, 1 << 20, 0, AllocOptions::default(), p)
            .unwrap();
        let err = rt
            .alloc_in(HOST_DEVICE, 1, 0, AllocOptions::default(), p)
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::Pool(PoolError::Alloc(AllocError { partition: Some(id), .. })) if id == p)
        );
        rt.free(a.id, 0).unwrap();
    }

    #[test]
    fn schedulers_add_their_budgets_and_leave_with_them() {
        let rt = Runtime::new();
        let capacity = |rt: &Runtime| rt.settings().qos_capacity;
        rt.set_governor(1, Some(256 << 20)).unwrap();
        rt.set_governor(2, Some(64 << 20)).unwrap();
        assert_eq!(
            capacity(&rt),
            Some(320 << 20),
            "a second scheduler adds, never replaces"
        );
        rt.set_governor(1, None).unwrap();
        assert_eq!(capacity(&rt), Some(64 << 20));
        rt.set_governor(2, None).unwrap();
        assert_eq!(capacity(&rt), None);
    }

    #[test]
    fn a_retired_partition_is_refused_on_pools_made_later_too() {
        let rt = Runtime::new();
        let p = rt.create_partition("gone", None).unwrap();
        let kept = rt
            .alloc_in(HOST_DEVICE, 4096, 0, AllocOptions::default(), p)
            .unwrap();
        rt.retire_partition(p).unwrap();
        let refused = |device| {
            matches!(
                rt.alloc_in(device, 64, 0, AllocOptions::default(), p),
                Err(RuntimeError::Pool(PoolError::Alloc(AllocError {
                    kind: AllocErrorKind::PartitionRetired,
                    ..
                })))
            )
        };
        assert!(refused(HOST_DEVICE));
        rt.register_backend(Arc::new(FakeBackend::new(1 << 30)), 1)
            .unwrap();
        assert!(
            refused(0),
            "a pool registered after the deletion refuses it too"
        );
        rt.free(kept.id, 0).unwrap();
    }
}

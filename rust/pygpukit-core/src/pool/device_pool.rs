//! The caching pool of one device: policy over the raw backend allocator.
//!
//! Allocation order for a block of `size` bytes on stream `s`:
//! 1. best fit among ranges freed on `s` (stream order makes them safe);
//! 2. best fit among cleared ranges (no pending work uses them);
//! 3. poll fences of other streams, which may clear more ranges, and retry 2;
//! 4. a new segment from the backend, if the global limit leaves room;
//! 5. release cached segments least recently used first, and retry;
//! 6. spill the least recently used evictable block, and retry;
//! 7. fail with `OutOfMemory` (the device) or `LimitExceeded` (a limit).
//!
//! Once the scheduler has told the pool partitions' QoS
//! ([`DevicePool::set_partition_qos`]), an allocation of such a *governed*
//! partition first checks at step 4 that the new segment leaves every other
//! governed partition's unused reservation free
//! (`scheduler::pressure::reservation_shortfall`), and steps 5-6 follow the
//! scheduler's reclaim plan instead of taking from anyone: the unowned cache,
//! then BestEffort partitions, then Burstable ones above their request, never a
//! Guaranteed partition within its request. What the plan cannot cover fails
//! the requester alone (`OutOfMemory` naming its partition). The scheduler's
//! capacity bounds its partitions only: allocations outside every governed
//! partition (the default partition, a `MemoryPool`'s) are held to the global
//! limit and their own quota, never to the scheduler's total; they only shrink
//! what the device can give the governed partitions, and they spill nobody's
//! evictable blocks but their own kind's.
//!
//! A retired partition (deleted from its scheduler) refuses new allocations
//! with [`AllocErrorKind::PartitionRetired`]; its live blocks stay valid.
//!
//! While `s` is captured into a CUDA graph (between `graph_begin` and
//! `graph_end`), steps 1-4 use only the graph's private region, and segments of
//! a region are never released before `graph_release`.
//!
//! Invariants: the pool's reserved bytes never exceed the global limit; a
//! partition's resident bytes never exceed its quota; a live block's range is
//! used by nobody else.

use super::arena::{Arena, GraphPoolId, Owner, RangeState};
use super::size_class::{kind_of, round_request, segment_size};
use super::stream_order::StreamOrder;
use super::FastMap;
use crate::backend::{BackendError, DevPtr, DeviceBackend, Stream};
use crate::events::EventPool;
use crate::evict::{Candidate, EvictionTracker};
use crate::limits::{PartitionId, PartitionTable, PartitionUsage};
use crate::pinned::{PinnedBuf, PinnedPool};
use crate::scheduler::pressure::{
    plan_reclaim, reservation_shortfall, PartitionMemory, ReclaimKind, Requester,
};
use crate::scheduler::QosClass;
use crate::stats::{BlockInfo, BlockState, PoolStats};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocErrorKind {
    /// The device had no memory left, even after releasing caches and spilling.
    OutOfMemory,
    /// The global limit or a partition quota refused the request.
    LimitExceeded,
    /// `AllocOptions::no_wait` and no cached range fits: the caller retries
    /// without the flag (where waiting is allowed). Not an out-of-memory.
    WouldBlock,
    /// The partition was deleted ([`DevicePool::retire_partition`]): it takes no
    /// new allocations. Not an out-of-memory: a caller still inside it is wrong.
    PartitionRetired,
    Backend(BackendError),
}

/// A failed allocation, with what the error message needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocError {
    pub kind: AllocErrorKind,
    pub requested: u64,
    /// Bytes in use where the refusal happened (the partition's live blocks, or the pool's
    /// reserved bytes), not counting the refused request.
    pub in_use: u64,
    pub limit: Option<u64>,
    /// The partition whose quota refused the request, if that is what happened.
    pub partition: Option<PartitionId>,
}

/// A partition's QoS as the scheduler admitted it: what reclaim and reservations need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionQos {
    pub class: QosClass,
    /// Bytes reserved for it alone (its memory request).
    pub request: u64,
    /// Within a class, lower priority is reclaimed from first.
    pub priority: i32,
}

/// Errors of calls that name a block or region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    UnknownBlock(u64),
    UnknownGraphPool(u64),
    NotCapturing(Stream),
    /// A spilled block was touched on a stream being captured.
    RestoreDuringCapture(u64),
    Alloc(AllocError),
    Backend(BackendError),
}

impl From<BackendError> for PoolError {
    fn from(e: BackendError) -> Self {
        PoolError::Backend(e)
    }
}

/// What a caller gets for a live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub id: u64,
    pub ptr: DevPtr,
    pub size: u64,
}

/// Allocation options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocOptions {
    /// May be spilled to pinned host memory under pressure; `touch` before use.
    pub evictable: bool,
    /// Only a cached range may be handed out (steps 1-3): no backend allocation,
    /// no release, no spill, nothing that waits on the host. On a miss the call
    /// fails with [`AllocErrorKind::WouldBlock`] and changes nothing. The C++ side
    /// tries this with the GIL held and releases the GIL only for the full call.
    pub no_wait: bool,
}

#[derive(Clone, Copy, Debug)]
enum Place {
    Device(DevPtr),
    /// Spilled: the host copy, and the stream the spill copy was enqueued on.
    Host(PinnedBuf, Stream),
}

#[derive(Clone, Copy, Debug)]
struct Allocation {
    size: u64,
    requested: u64,
    stream: Stream,
    last_stream: Stream,
    partition: PartitionId,
    evictable: bool,
    graph: Option<GraphPoolId>,
    place: Place,
    lru: u64,
    created: Instant,
}

struct GraphRegion {
    stream: Stream,
    /// Ranges of blocks from outside the graph freed during its capture.
    deferred_frees: Vec<DevPtr>,
}

/// See the module documentation.
pub struct DevicePool {
    device: i32,
    backend: Arc<dyn DeviceBackend>,
    /// High bits shared by every id this pool hands out, so ids name their pool.
    id_prefix: u64,
    next_id: u64,
    clock: u64,
    arena: Arena,
    order: StreamOrder,
    events: EventPool,
    pinned: PinnedPool,
    eviction: EvictionTracker,
    allocations: FastMap<u64, Allocation>,
    graphs: HashMap<GraphPoolId, GraphRegion>,
    capturing: FastMap<Stream, GraphPoolId>,
    limit: Option<u64>,
    partitions: PartitionTable,
    /// Partitions the scheduler admitted; empty: no reservations, plain steps 5-6.
    qos: HashMap<PartitionId, PartitionQos>,
    /// The scheduler's total memory, as set (`None`: reservations are not held back).
    qos_configured: Option<u64>,
    /// What the device could give the pool when last looked at: its free memory plus what
    /// the pool holds, less a margin. [`DevicePool::governed_capacity`] bounds reservations
    /// by it.
    qos_device: Option<u64>,
    stats: PoolStats,
    /// Blocks [`DevicePool::touch_all`] is making resident together: never spilled meanwhile.
    keep: Vec<u64>,
    /// Blocks with host views (`hold_in_place`), by number of holds: never spilled.
    held_in_place: FastMap<u64, u32>,
    /// Deleted partitions: their allocations are refused.
    retired: HashSet<PartitionId>,
}

/// Whose evictable blocks a spill may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victims {
    Anyone,
    Of(PartitionId),
    /// Partitions without QoS (outside the scheduler's governance).
    Ungoverned,
}

/// Bits of an id below the pool prefix.
pub const ID_BITS: u32 = 48;

impl DevicePool {
    /// A pool for `device` over `backend`; `id_prefix` (below 2^16) tags every id it hands out.
    pub fn new(device: i32, backend: Arc<dyn DeviceBackend>, id_prefix: u64) -> Self {
        Self {
            device,
            backend,
            id_prefix: id_prefix << ID_BITS,
            next_id: 0,
            clock: 0,
            arena: Arena::default(),
            order: StreamOrder::default(),
            events: EventPool::default(),
            pinned: PinnedPool::new(device),
            eviction: EvictionTracker::default(),
            allocations: FastMap::default(),
            graphs: HashMap::new(),
            capturing: FastMap::default(),
            limit: None,
            partitions: PartitionTable::default(),
            qos: HashMap::new(),
            qos_configured: None,
            qos_device: None,
            stats: PoolStats::default(),
            keep: Vec::new(),
            held_in_place: FastMap::default(),
            retired: HashSet::new(),
        }
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    pub fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.backend
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.id_prefix | self.next_id
    }

    /// Sets the global limit on reserved bytes, releasing cached memory to get under it.
    pub fn set_limit(&mut self, limit: Option<u64>) -> Result<(), BackendError> {
        self.limit = limit;
        if let Some(l) = limit {
            if self.stats.reserved_bytes > l {
                self.release_cached(Some(self.stats.reserved_bytes - l))?;
            }
        }
        Ok(())
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    pub fn set_partition_limit(&mut self, partition: PartitionId, limit: Option<u64>) {
        self.partitions.set_limit(partition, limit);
    }

    pub fn partition_usage(&self, partition: PartitionId) -> PartitionUsage {
        self.partitions.get(partition)
    }

    /// Sets (or with `None` forgets) the QoS of a partition; see the module documentation.
    pub fn set_partition_qos(&mut self, partition: PartitionId, qos: Option<PartitionQos>) {
        match qos {
            Some(q) => self.qos.insert(partition, q),
            None => self.qos.remove(&partition),
        };
    }

    /// Retires a deleted partition: its QoS and quota are lifted and its new allocations
    /// refused ([`AllocErrorKind::PartitionRetired`]); blocks it holds stay valid until freed.
    pub fn retire_partition(&mut self, partition: PartitionId) {
        self.qos.remove(&partition);
        self.partitions.set_limit(partition, None);
        self.retired.insert(partition);
    }

    /// Whether the scheduler governs `partition` (it has QoS): its allocations are held to
    /// reservations and the reclaim plan; everyone else's only to limits and quotas.
    fn governed(&self, partition: PartitionId) -> bool {
        self.qos.contains_key(&partition)
    }

    /// Bytes of live blocks charged to partitions the scheduler does not govern.
    fn ungoverned_allocated(&self) -> u64 {
        self.partitions
            .iter()
            .filter(|(id, _)| !self.governed(*id))
            .map(|(_, u)| u.allocated)
            .sum()
    }

    /// What the governed partitions share: the scheduler's capacity, at most what the device
    /// and the global limit leave beside the live blocks of ungoverned allocations.
    fn governed_capacity(&self) -> Option<u64> {
        let capacity = self.qos_configured?;
        let outside = self.ungoverned_allocated();
        let capacity = match self.qos_device {
            Some(device) => capacity.min(device.saturating_sub(outside)),
            None => capacity,
        };
        Some(
            self.limit
                .map_or(capacity, |l| capacity.min(l.saturating_sub(outside))),
        )
    }

    /// The bytes governed partitions' reservations share (`None`: reservations are not
    /// held back), at most what the device can still give the pool: its free memory plus
    /// what the pool holds, less a margin for memory taken outside the pool (modules,
    /// library workspaces) and the live blocks of ungoverned allocations. A capacity the
    /// device cannot back would let BestEffort fill the device before the reservation
    /// check ever refused it.
    pub fn set_qos_capacity(&mut self, capacity: Option<u64>) {
        self.qos_configured = capacity;
        self.refresh_qos_capacity();
    }

    /// Records what the device can give the pool (its free memory plus what the pool holds,
    /// less the margin), which bounds the configured capacity. Also called before every new segment while reservations are held
    /// back: memory taken outside the pool after they were made (a green context's own
    /// allocations, another library's cache, another process) would otherwise leave a
    /// reservation the device can no longer back, and a Guaranteed partition would meet
    /// OutOfMemoryError within its request once BestEffort had filled the rest.
    fn refresh_qos_capacity(&mut self) {
        self.qos_device = match (self.qos_configured, self.backend.mem_get_info(self.device)) {
            (Some(_), Ok((free, total))) => {
                let margin = (total / 50).min(256 << 20);
                Some((free + self.stats.reserved_bytes).saturating_sub(margin))
            }
            _ => None,
        };
    }

    /// Every partition with QoS or usage, as the reclaim plan sees it (the cache is
    /// shared, so it is all unowned). The requester was charged `size` before the
    /// pool looked for memory: that charge is the allocation being planned for,
    /// not usage yet.
    fn partition_memory(&self, requester: PartitionId, size: u64) -> Vec<PartitionMemory> {
        let mut ids: Vec<PartitionId> = self.qos.keys().copied().collect();
        ids.extend(self.partitions.all().into_iter().map(|(id, _)| id));
        ids.push(requester);
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| {
                let q = self.qos.get(&id);
                let evictable = self
                    .allocations
                    .values()
                    .filter(|a| {
                        a.partition == id
                            && a.evictable
                            && matches!(a.place, Place::Device(_))
                            && !self.capturing.contains_key(&a.last_stream)
                    })
                    .map(|a| a.size)
                    .sum();
                PartitionMemory {
                    id,
                    class: q.map_or(QosClass::BestEffort, |q| q.class),
                    request: q.map_or(0, |q| q.request),
                    allocated: self
                        .partitions
                        .get(id)
                        .allocated
                        .saturating_sub(if id == requester { size } else { 0 }),
                    cached: 0,
                    evictable,
                }
            })
            .collect()
    }

    /// Bytes a new segment of `seg` bytes for `size` bytes of the governed `partition`
    /// would take from other governed partitions' reservations; 0 without QoS.
    fn reservation_short(&self, partition: PartitionId, size: u64, seg: u64) -> u64 {
        if self.qos.is_empty() {
            return 0;
        }
        let Some(capacity) = self.governed_capacity() else {
            return 0;
        };
        let mut parts = self.partition_memory(partition, size);
        parts.retain(|p| self.governed(p.id));
        let me = parts.iter().find(|p| p.id == partition);
        if me.is_some_and(|p| p.allocated + size <= p.request) {
            // Within its request it is owed the memory: nobody else was allowed to
            // commit it. Over-commitment from cache tails (segments partly in use
            // cannot be released) must not turn into its OutOfMemoryError; a
            // device that is really full goes through the reclaim plan instead.
            return 0;
        }
        // The tail of the new segment becomes cache: committed too.
        let cached = self.stats.cached_bytes() + seg.saturating_sub(size);
        reservation_shortfall(capacity, cached, partition, size, &parts)
    }

    /// Bytes by which `partition`, already charged for a block it is about to take from the
    /// cache, leaves other partitions' unused reservations unbacked; 0 within its request or
    /// without QoS. The cache itself does not count as committed here (unlike for a new
    /// segment): the reclaim plan releases it for whoever is owed memory. Without this check
    /// a BestEffort partition that had filled its share could take the blocks a Guaranteed
    /// partition had just freed, and the Guaranteed partition's next allocation would find the
    /// device full. Cheap enough for the hot path: two passes over the partitions, no allocation.
    fn cache_hit_short(&self, partition: PartitionId) -> u64 {
        let request = |id: PartitionId| self.qos.get(&id).map_or(0, |q| q.request);
        if self.qos.is_empty() || self.partitions.get(partition).allocated <= request(partition) {
            return 0;
        }
        let Some(capacity) = self.governed_capacity() else {
            return 0;
        };
        // Governed partitions commit the larger of their request and their allocation
        // (ungoverned allocations are taken off the capacity instead).
        let committed: u64 = self
            .qos
            .iter()
            .map(|(id, q)| q.request.max(self.partitions.get(*id).allocated))
            .sum();
        committed.saturating_sub(capacity)
    }

    /// Carries out the reclaim plan for `needed` bytes for `partition`; returns the
    /// bytes actually freed (0 when the plan cannot cover the need: nobody else
    /// is made to give anything up for an allocation that would fail anyway).
    fn reclaim_for(
        &mut self,
        partition: PartitionId,
        size: u64,
        needed: u64,
        exclude: u64,
    ) -> Result<u64, BackendError> {
        self.reclaim(partition, size, needed, exclude, self.stats.cached_bytes())
    }

    /// [`Self::reclaim_for`] with `cache` bytes of the cache offered to the plan (0: spills
    /// only, for a shortfall that releasing cache cannot reduce).
    fn reclaim(
        &mut self,
        partition: PartitionId,
        size: u64,
        needed: u64,
        exclude: u64,
        cache: u64,
    ) -> Result<u64, BackendError> {
        let parts = self.partition_memory(partition, size);
        let me = parts
            .iter()
            .find(|p| p.id == partition)
            .copied()
            .expect("the requester is listed");
        let qos = &self.qos;
        let plan = plan_reclaim(
            needed,
            Requester::allocating(&me, size),
            cache,
            &parts,
            |id| qos.get(&id).map_or(0, |q| q.priority),
        );
        if plan.shortfall > 0 {
            return Ok(0);
        }
        let mut freed = 0;
        for step in plan.steps {
            match step.kind {
                ReclaimKind::ReleaseCached => freed += self.release_cached(Some(step.bytes))?,
                ReclaimKind::SpillEvictable => {
                    let victim = step.partition.expect("spills name a partition");
                    let mut spilled = 0;
                    while spilled < step.bytes {
                        let before = self.stats.spilled_bytes;
                        if !self.evict_one(Victims::Of(victim), Some(exclude))? {
                            break;
                        }
                        spilled += self.stats.spilled_bytes - before;
                    }
                    freed += spilled;
                }
            }
        }
        Ok(freed)
    }

    /// A block of at least `nbytes` usable on `stream` at once, charged to `partition`.
    pub fn alloc(
        &mut self,
        nbytes: u64,
        stream: Stream,
        options: AllocOptions,
        partition: PartitionId,
    ) -> Result<BlockRef, AllocError> {
        let size = round_request(nbytes);
        if !self.retired.is_empty() && self.retired.contains(&partition) {
            return Err(AllocError {
                kind: AllocErrorKind::PartitionRetired,
                requested: nbytes,
                in_use: self.partitions.get(partition).allocated,
                limit: None,
                partition: Some(partition),
            });
        }
        if options.no_wait && self.partitions.check(partition, size).is_err() {
            // The quota would have to spill: that waits.
            return Err(self.would_block(nbytes));
        }
        let id = self.new_id();
        self.charge_partition(partition, size, nbytes, None)?;
        let graph = self.capturing.get(&stream).copied();
        let (ptr, given) =
            match self.obtain(size, nbytes, stream, graph, id, options.no_wait, partition) {
                Ok(v) => v,
                Err(e) => {
                    self.partitions.release(partition, size);
                    return Err(e);
                }
            };
        // The partition was charged the rounded size; a kept tail is charged too.
        self.partitions.release(partition, size);
        self.partitions.charge(partition, given);
        let lru = self.tick();
        self.allocations.insert(
            id,
            Allocation {
                size: given,
                requested: nbytes,
                stream,
                last_stream: stream,
                partition,
                evictable: options.evictable && graph.is_none(),
                graph,
                place: Place::Device(ptr),
                lru,
                created: Instant::now(),
            },
        );
        self.stats.note_allocated(given, nbytes);
        self.stats.alloc_count += 1;
        self.stats.active_blocks += 1;
        Ok(BlockRef {
            id,
            ptr,
            size: given,
        })
    }

    /// Charges `size` to `partition`, spilling the partition's own evictable
    /// blocks (never `exclude`) while its quota refuses.
    fn charge_partition(
        &mut self,
        partition: PartitionId,
        size: u64,
        requested: u64,
        exclude: Option<u64>,
    ) -> Result<(), AllocError> {
        loop {
            match self.partitions.check(partition, size) {
                Ok(()) => {
                    self.partitions.charge(partition, size);
                    return Ok(());
                }
                Err(q) => {
                    let spilled = self
                        .evict_one(Victims::Of(partition), exclude)
                        .map_err(|e| self.backend_failure(e, requested))?;
                    if !spilled {
                        self.stats.oom_count += 1;
                        return Err(AllocError {
                            kind: AllocErrorKind::LimitExceeded,
                            requested,
                            in_use: q.in_use,
                            limit: Some(q.limit),
                            partition: Some(partition),
                        });
                    }
                }
            }
        }
    }

    /// The device (or the memory partitions share) cannot hold `requested` more
    /// bytes for `partition` without taking what the reclaim plan protects. The
    /// partition was already charged `charged` bytes for this request: not in use.
    fn qos_oom(&mut self, partition: PartitionId, requested: u64, charged: u64) -> AllocError {
        self.stats.oom_count += 1;
        AllocError {
            kind: AllocErrorKind::OutOfMemory,
            requested,
            in_use: self
                .partitions
                .get(partition)
                .allocated
                .saturating_sub(charged),
            // The partition's own quota, if it has one: the capacity partitions share is not a
            // limit the user set, and naming it made the message read as "under the limit".
            limit: self.partitions.get(partition).limit,
            partition: Some(partition),
        }
    }

    fn would_block(&self, requested: u64) -> AllocError {
        AllocError {
            kind: AllocErrorKind::WouldBlock,
            requested,
            in_use: self.stats.reserved_bytes,
            limit: self.limit,
            partition: None,
        }
    }

    fn backend_failure(&self, e: BackendError, requested: u64) -> AllocError {
        AllocError {
            kind: AllocErrorKind::Backend(e),
            requested,
            in_use: self.stats.reserved_bytes,
            limit: self.limit,
            partition: None,
        }
    }

    /// A range of at least `size` bytes for block `id`: `(ptr, size given)`. Steps 1-7
    /// of the module documentation.
    // The block being placed (id, size, requested, partition) plus where and how:
    // a struct for one private call would only rename the same eight values.
    #[allow(clippy::too_many_arguments)]
    fn obtain(
        &mut self,
        size: u64,
        requested: u64,
        stream: Stream,
        graph: Option<GraphPoolId>,
        id: u64,
        no_wait: bool,
        partition: PartitionId,
    ) -> Result<(DevPtr, u64), AllocError> {
        let kind = kind_of(size);
        let governed = self.governed(partition);
        // A partition under a quota is charged what it is given: no kept tail may push it
        // over the quota that admitted the request.
        let exact = self.partitions.get(partition).limit.is_some();
        loop {
            let cached = self
                .find_cached(size, stream, graph)
                .map_err(|e| self.backend_failure(e, requested))?;
            if let Some(ptr) = cached {
                let short = if graph.is_none() && governed {
                    self.cache_hit_short(partition)
                } else {
                    0
                };
                if short == 0 {
                    return Ok((ptr, self.take(ptr, size, id, exact)));
                }
                // Releasing cache cannot reduce this shortfall (the cache is not counted in
                // it): only spilling others' evictable blocks, where the plan allows, can.
                let freed = self
                    .reclaim(partition, size, short, id, 0)
                    .map_err(|e| self.backend_failure(e, requested))?;
                if freed > 0 {
                    continue;
                }
                return Err(self.qos_oom(partition, requested, size));
            }
            if no_wait {
                return Err(self.would_block(requested));
            }
            let room = self
                .limit
                .map_or(u64::MAX, |l| l.saturating_sub(self.stats.reserved_bytes));
            let seg = segment_size(size, room);
            let mut device_full = false;
            if governed {
                // The slow path (a new segment) only: one cuMemGetInfo next to a cuMemAlloc.
                self.refresh_qos_capacity();
            }
            let short = if governed {
                self.reservation_short(partition, size, seg)
            } else {
                0
            };
            if short > 0 {
                let freed = self
                    .reclaim_for(partition, size, short, id)
                    .map_err(|e| self.backend_failure(e, requested))?;
                if freed > 0 {
                    continue;
                }
                return Err(self.qos_oom(partition, requested, size));
            }
            if seg <= room {
                match self.backend.mem_alloc(self.device, seg) {
                    Ok(base) => {
                        let now = self.tick();
                        self.arena.add_segment(base, seg, kind, graph, now);
                        self.stats.note_reserved(seg);
                        return Ok((base, self.take(base, size, id, exact)));
                    }
                    Err(e) if e.is_out_of_memory() => device_full = true,
                    Err(e) => return Err(self.backend_failure(e, requested)),
                }
            }
            if governed {
                let freed = self
                    .reclaim_for(partition, size, seg, id)
                    .map_err(|e| self.backend_failure(e, requested))?;
                if freed > 0 {
                    continue;
                }
                return Err(self.qos_oom(partition, requested, size));
            }
            let released = self
                .release_cached(Some(seg))
                .map_err(|e| self.backend_failure(e, requested))?;
            if released > 0 {
                continue;
            }
            // Outside the scheduler's partitions only ungoverned blocks may be spilled: the
            // governed ones answer to the reclaim plan.
            let victims = if self.qos.is_empty() {
                Victims::Anyone
            } else {
                Victims::Ungoverned
            };
            if self
                .evict_one(victims, Some(id))
                .map_err(|e| self.backend_failure(e, requested))?
            {
                continue;
            }
            self.stats.oom_count += 1;
            return Err(AllocError {
                kind: if device_full {
                    AllocErrorKind::OutOfMemory
                } else {
                    AllocErrorKind::LimitExceeded
                },
                requested,
                in_use: self.stats.reserved_bytes,
                limit: self.limit,
                partition: None,
            });
        }
    }

    /// Takes `size` bytes of the free range at `ptr` for block `id` (exactly `size` when
    /// `exact`); returns the size given.
    fn take(&mut self, ptr: DevPtr, size: u64, id: u64, exact: bool) -> u64 {
        let now = self.tick();
        let (given, pending_tail) = self.arena.take(ptr, size, id, now, exact);
        if let Some((tail, stream, seq)) = pending_tail {
            self.order.note_free(stream, seq, tail);
        }
        given
    }

    /// Steps 1-3: a cached free range for `stream`, or `None`. A miss on the
    /// stream's own list clears what completed fences allow and fences the other
    /// streams' newer frees, so that they can clear by a later miss.
    fn find_cached(
        &mut self,
        size: u64,
        stream: Stream,
        graph: Option<GraphPoolId>,
    ) -> Result<Option<DevPtr>, BackendError> {
        let kind = kind_of(size);
        if let Some(p) = self
            .arena
            .best_fit(graph, kind, Owner::Stream(stream), size)
        {
            return Ok(Some(p));
        }
        if self.order.has_pending() {
            self.clear_completed()?;
            let capturing = &self.capturing;
            let skip = |s: Stream| s == stream || capturing.contains_key(&s);
            self.order
                .fence_others(skip, &*self.backend, self.device, &mut self.events)?;
        }
        Ok(self.arena.best_fit(graph, kind, Owner::Cleared, size))
    }

    fn clear_completed(&mut self) -> Result<(), BackendError> {
        for (stream, seq, ptr) in self.order.poll(&*self.backend, &mut self.events)? {
            self.arena.clear(ptr, stream, seq);
        }
        Ok(())
    }

    /// Returns idle segments to the backend, least recently used first, until
    /// `need` bytes are released (all of them with `None`). Segments with ranges
    /// freed on a stream wait on the host for that stream first. Returns the bytes released.
    pub fn release_cached(&mut self, need: Option<u64>) -> Result<u64, BackendError> {
        let mut released = 0;
        for base in self.arena.idle_segments() {
            if need.is_some_and(|n| released >= n) {
                break;
            }
            let owners = self.arena.pending_owners(base);
            if owners.iter().any(|s| self.capturing.contains_key(s)) {
                // Waiting on a capturing stream is not allowed; the segment stays cached.
                continue;
            }
            for stream in owners {
                for (s, seq, ptr) in
                    self.order
                        .wait_stream(stream, &*self.backend, self.device, &mut self.events)?
                {
                    self.arena.clear(ptr, s, seq);
                }
            }
            let size = self.arena.remove_segment(base);
            self.backend.mem_free(self.device, base)?;
            self.stats.note_unreserved(size);
            released += size;
        }
        Ok(released)
    }

    /// A pinned host buffer of at least `nbytes` from this pool's pinned cache
    /// (the one spills use), for host arrays the caller copies from or to.
    pub fn pinned_acquire(&mut self, nbytes: u64) -> Result<PinnedBuf, BackendError> {
        self.pinned.acquire(&*self.backend, nbytes)
    }

    /// Gives back a buffer from [`DevicePool::pinned_acquire`]; with `guard`,
    /// reused only after the work enqueued on that stream so far.
    pub fn pinned_release(
        &mut self,
        buf: PinnedBuf,
        guard: Option<Stream>,
    ) -> Result<(), BackendError> {
        self.pinned.release(&*self.backend, buf, guard)
    }

    /// Releases every cached segment and idle pinned buffer.
    pub fn empty_cache(&mut self) -> Result<u64, BackendError> {
        let released = self.release_cached(None)?;
        self.pinned.trim(&*self.backend, true)?;
        Ok(released)
    }

    /// Gives block `id` back; its last use was enqueued on `stream`.
    ///
    /// A block from outside the graph freed on a stream being captured was last
    /// used by the graph, which runs at each replay: its range is reused only
    /// after `graph_release` (no replay pending then).
    pub fn free(&mut self, id: u64, stream: Stream) -> Result<(), PoolError> {
        let a = self
            .allocations
            .remove(&id)
            .ok_or(PoolError::UnknownBlock(id))?;
        self.eviction.forget(id, &mut self.events);
        self.held_in_place.remove(&id);
        self.stats.free_count += 1;
        self.stats.active_blocks -= 1;
        match a.place {
            Place::Device(ptr) => {
                match self.capturing.get(&stream) {
                    Some(g) if a.graph != Some(*g) => {
                        let region = self
                            .graphs
                            .get_mut(g)
                            .expect("capturing graph has a region");
                        region.deferred_frees.push(ptr);
                    }
                    _ => self.release_range(ptr, stream),
                }
                self.partitions.release(a.partition, a.size);
                self.stats.note_released(a.size, a.requested);
            }
            Place::Host(buf, spill_stream) => {
                self.stats.spilled_bytes -= a.size;
                self.pinned
                    .release(&*self.backend, buf, Some(spill_stream))?;
            }
        }
        Ok(())
    }

    fn release_range(&mut self, ptr: DevPtr, stream: Stream) {
        let seq = self.order.next_seq(stream);
        let now = self.tick();
        let (start, owner, seq) = self.arena.release(ptr, Owner::Stream(stream), seq, now);
        if let Owner::Stream(s) = owner {
            self.order.note_free(s, seq, start);
        }
    }

    /// Before work on `stream` uses block `id`: restores it if spilled (its
    /// address may change) and marks it most recently used.
    pub fn touch(&mut self, id: u64, stream: Stream) -> Result<BlockRef, PoolError> {
        let lru = self.tick();
        let a = self
            .allocations
            .get_mut(&id)
            .ok_or(PoolError::UnknownBlock(id))?;
        a.lru = lru;
        a.last_stream = stream;
        let a = *a;
        match a.place {
            Place::Device(ptr) => Ok(BlockRef {
                id,
                ptr,
                size: a.size,
            }),
            // A restore copy captured into a graph would replay from a host buffer since reused.
            Place::Host(..) if self.capturing.contains_key(&stream) => {
                Err(PoolError::RestoreDuringCapture(id))
            }
            Place::Host(buf, spill_stream) => self.restore(id, a, buf, spill_stream, stream),
        }
    }

    /// [`DevicePool::touch`], and keeps the block where it is until as many
    /// [`DevicePool::release_in_place`] calls: a host view of its memory (a NumPy
    /// array over a host pool block) must never see it spilled and its range reused.
    pub fn hold_in_place(&mut self, id: u64, stream: Stream) -> Result<BlockRef, PoolError> {
        let b = self.touch(id, stream)?;
        *self.held_in_place.entry(id).or_insert(0) += 1;
        Ok(b)
    }

    /// Ends one [`DevicePool::hold_in_place`] of block `id` (a freed block: nothing to do).
    pub fn release_in_place(&mut self, id: u64) {
        if let Some(n) = self.held_in_place.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                self.held_in_place.remove(&id);
            }
        }
    }

    /// [`DevicePool::touch`] of every block of `ids`, for one piece of work that
    /// uses them all: restoring one never spills another of the set, so every
    /// address returned is current at once. Fails when they do not fit together.
    pub fn touch_all(&mut self, ids: &[u64], stream: Stream) -> Result<Vec<BlockRef>, PoolError> {
        self.keep = ids.to_vec();
        let touched = ids.iter().map(|&id| self.touch(id, stream)).collect();
        self.keep.clear();
        touched
    }

    fn restore(
        &mut self,
        id: u64,
        a: Allocation,
        buf: PinnedBuf,
        spill_stream: Stream,
        stream: Stream,
    ) -> Result<BlockRef, PoolError> {
        self.charge_partition(a.partition, a.size, a.size, Some(id))
            .map_err(PoolError::Alloc)?;
        let (ptr, given) = match self.obtain(a.size, a.size, stream, None, id, false, a.partition) {
            Ok(v) => v,
            Err(e) => {
                self.partitions.release(a.partition, a.size);
                return Err(PoolError::Alloc(e));
            }
        };
        self.partitions.release(a.partition, a.size);
        self.partitions.charge(a.partition, given);
        if spill_stream != stream {
            // The restore copy must not read the host buffer before the spill copy wrote it.
            let ev = self
                .events
                .record(&*self.backend, self.device, spill_stream)?;
            let waited = self.backend.stream_wait_event(stream, ev);
            self.events.give(ev);
            waited?;
        }
        self.backend.memcpy_async(ptr, buf.ptr, a.size, stream)?;
        self.pinned.release(&*self.backend, buf, Some(stream))?;
        let entry = self
            .allocations
            .get_mut(&id)
            .expect("restored block vanished");
        entry.place = Place::Device(ptr);
        entry.size = given;
        self.stats.spilled_bytes -= a.size;
        self.stats.note_allocated(given, a.requested);
        self.stats.restores += 1;
        Ok(BlockRef {
            id,
            ptr,
            size: given,
        })
    }

    /// Step 6: spills one evictable block of `victims` (never `exclude`, never one held
    /// in place). Returns whether one was spilled.
    fn evict_one(&mut self, victims: Victims, exclude: Option<u64>) -> Result<bool, BackendError> {
        let candidates: Vec<Candidate> = self
            .allocations
            .iter()
            .filter(|(id, a)| {
                a.evictable
                    && matches!(a.place, Place::Device(_))
                    && !self.capturing.contains_key(&a.last_stream)
                    && Some(**id) != exclude
                    && !self.keep.contains(id)
                    && !self.held_in_place.contains_key(id)
                    && match victims {
                        Victims::Anyone => true,
                        Victims::Of(p) => a.partition == p,
                        Victims::Ungoverned => !self.qos.contains_key(&a.partition),
                    }
            })
            .map(|(id, a)| Candidate {
                id: *id,
                lru: a.lru,
                last_stream: a.last_stream,
            })
            .collect();
        let Some(id) =
            self.eviction
                .pick(candidates, &*self.backend, self.device, &mut self.events)?
        else {
            return Ok(false);
        };
        let a = self.allocations[&id];
        let Place::Device(ptr) = a.place else {
            unreachable!("candidates are resident")
        };
        let buf = match self.pinned.acquire(&*self.backend, a.size) {
            Ok(buf) => buf,
            Err(e) if e.is_out_of_memory() => return Ok(false),
            Err(e) => return Err(e),
        };
        // Same stream as the last use, so the device range can be freed on it at once.
        self.backend
            .memcpy_async(buf.ptr, ptr, a.size, a.last_stream)?;
        self.release_range(ptr, a.last_stream);
        self.partitions.release(a.partition, a.size);
        self.stats.note_released(a.size, a.requested);
        self.stats.spilled_bytes += a.size;
        self.stats.evictions += 1;
        self.allocations
            .get_mut(&id)
            .expect("victim vanished")
            .place = Place::Host(buf, a.last_stream);
        Ok(true)
    }

    /// Starts a graph-private region for allocations on `stream`, which must be
    /// capturing (call after `cuStreamBeginCapture`).
    pub fn graph_begin(&mut self, stream: Stream) -> Result<GraphPoolId, PoolError> {
        if !self.backend.stream_is_capturing(stream)? {
            return Err(PoolError::NotCapturing(stream));
        }
        let id = self.new_id();
        self.graphs.insert(
            id,
            GraphRegion {
                stream,
                deferred_frees: Vec::new(),
            },
        );
        self.capturing.insert(stream, id);
        Ok(id)
    }

    /// Ends routing allocations into the region; its blocks stay private.
    pub fn graph_end(&mut self, graph: GraphPoolId) -> Result<(), PoolError> {
        let region = self
            .graphs
            .get(&graph)
            .ok_or(PoolError::UnknownGraphPool(graph))?;
        if self.capturing.get(&region.stream) == Some(&graph) {
            self.capturing.remove(&region.stream);
        }
        Ok(())
    }

    /// The graph is gone and no replay of it is pending: its free ranges join
    /// the general pool; its live blocks do when they are freed.
    pub fn graph_release(&mut self, graph: GraphPoolId) -> Result<(), PoolError> {
        self.graph_end(graph)?;
        let region = self
            .graphs
            .remove(&graph)
            .expect("graph_end checked the region");
        self.arena.ungraph(graph);
        for ptr in region.deferred_frees {
            self.release_range(ptr, region.stream);
        }
        for a in self.allocations.values_mut() {
            if a.graph == Some(graph) {
                a.graph = None;
            }
        }
        Ok(())
    }

    /// Counters, with the pinned cache and the limit filled in.
    pub fn stats(&self) -> PoolStats {
        let mut s = self.stats.clone();
        s.pinned_reserved_bytes = self.pinned.reserved();
        s.limit_bytes = self.limit;
        s
    }

    /// Flat counters including partitions.
    pub fn flat_stats(&self) -> Vec<(String, u64)> {
        self.stats().flatten(&self.partitions.all())
    }

    /// Every live block and every free range.
    pub fn snapshot(&self) -> Vec<BlockInfo> {
        let now = Instant::now();
        let mut out: Vec<BlockInfo> = self
            .allocations
            .iter()
            .map(|(id, a)| {
                let (ptr, state) = match a.place {
                    Place::Device(p) => (p, BlockState::Allocated),
                    Place::Host(buf, _) => (buf.ptr, BlockState::Evicted),
                };
                BlockInfo {
                    id: *id,
                    ptr,
                    size: a.size,
                    requested: a.requested,
                    stream: a.stream,
                    state,
                    partition: a.partition,
                    evictable: a.evictable,
                    graph_pool: a.graph,
                    age_s: now.duration_since(a.created).as_secs_f64(),
                }
            })
            .collect();
        let graph_of: HashMap<u64, Option<GraphPoolId>> =
            self.arena.segments().map(|(b, s)| (b, s.graph)).collect();
        for (ptr, r) in self.arena.ranges() {
            if let RangeState::Free { owner, since, .. } = r.state {
                out.push(BlockInfo {
                    id: 0,
                    ptr,
                    size: r.size,
                    requested: 0,
                    stream: match owner {
                        Owner::Stream(s) => s,
                        Owner::Cleared => 0,
                    },
                    state: BlockState::Free,
                    partition: 0,
                    evictable: false,
                    graph_pool: graph_of[&r.segment],
                    age_s: now.duration_since(since).as_secs_f64(),
                });
            }
        }
        out.sort_by_key(|b| (b.state != BlockState::Allocated, b.ptr));
        out
    }

    /// Segments as `(base, size, live ranges)`, for tests and debugging.
    pub fn segments(&self) -> Vec<(u64, u64, u32)> {
        self.arena
            .segments()
            .map(|(b, s)| (b, s.size, s.used_ranges))
            .collect()
    }

    /// Clears every free range whose stream's work has completed, waiting on the host.
    pub fn synchronize_frees(&mut self, streams: &[Stream]) -> Result<(), BackendError> {
        for &stream in streams {
            for (s, seq, ptr) in
                self.order
                    .wait_stream(stream, &*self.backend, self.device, &mut self.events)?
            {
                self.arena.clear(ptr, s, seq);
            }
        }
        Ok(())
    }
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        // Best effort at teardown: memory still in live blocks stays with the backend.
        let _ = self.empty_cache();
        self.events.destroy_all(&*self.backend);
    }
}

//! Which memory to take back, and from whom, when the device runs short.
//!
//! A pure planning function over usage numbers: the memory pool gathers the
//! numbers, calls [`plan_reclaim`] and carries the steps out (release cached
//! blocks, spill evictable buffers to pinned host memory). Keeping the policy
//! here lets it be tested exhaustively without a device.
//!
//! Order: the pool's unowned cache and the requester's own cache; then
//! BestEffort partitions (cached blocks, then evictable buffers); then Burstable
//! partitions, only what they hold above their request (cached blocks first,
//! then evictable buffers); last, cached blocks a Guaranteed partition keeps
//! above its request. Nothing a Guaranteed partition holds within its request,
//! and nothing live it holds at all, is ever taken; nor is anything a Burstable
//! partition holds within its request. What the plan cannot cover is the
//! requester's shortfall: the pool raises `OutOfMemoryError` to the requester
//! and to no one else.

use super::qos::QosClass;
use super::PartitionId;

/// One partition's memory as the pool sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionMemory {
    pub id: PartitionId,
    pub class: QosClass,
    /// Bytes reserved for it (its memory request).
    pub request: u64,
    /// Bytes of its live blocks resident on the device (evictable ones included).
    pub allocated: u64,
    /// Bytes of free blocks cached on its behalf (0 when the pool shares its cache).
    pub cached: u64,
    /// Bytes of its live blocks that may be spilled to the host now (no pending work).
    pub evictable: u64,
}

impl PartitionMemory {
    /// What the partition counts as using: live and cached bytes.
    pub fn usage(&self) -> u64 {
        self.allocated + self.cached
    }
}

/// What a reclaim step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReclaimKind {
    /// Give cached free blocks back to the device (harmless: nothing live moves).
    ReleaseCached,
    /// Spill live evictable buffers to pinned host memory (restored on next use).
    SpillEvictable,
}

/// One step of a plan; `partition` is `None` for the pool's unowned cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimStep {
    pub partition: Option<PartitionId>,
    pub kind: ReclaimKind,
    pub bytes: u64,
}

/// Steps in the order to carry them out, and what they leave uncovered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReclaimPlan {
    pub steps: Vec<ReclaimStep>,
    pub reclaimed: u64,
    /// Bytes still missing after every step; non-zero means the requester gets
    /// `OutOfMemoryError`.
    pub shortfall: u64,
}

/// Who asks for memory, and how much of its own request it is still within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requester {
    pub id: PartitionId,
    pub class: QosClass,
    /// True when the allocation keeps the requester within its memory request:
    /// it is then owed the memory and may reclaim from Burstable excess too.
    pub within_request: bool,
    /// How far the requester's usage (cached blocks included) will stand above
    /// its request: the most of its own cache whose release relieves the device's
    /// commitments (cache within its request is reserved for it anyway).
    pub own_excess: u64,
}

impl Requester {
    /// The requester of an allocation of `bytes` more by partition `p`.
    pub fn allocating(p: &PartitionMemory, bytes: u64) -> Self {
        Requester {
            id: p.id,
            class: p.class,
            within_request: p.allocated + bytes <= p.request,
            own_excess: (p.usage() + bytes).saturating_sub(p.request),
        }
    }
}

/// Bytes to reclaim before partition `requester` may hold `bytes` more without
/// eating into any other partition's reservation; 0 when it fits now.
///
/// The device is committed to the unowned cache plus, per partition, the larger
/// of its request and its usage; this must stay within `capacity` (the device's
/// memory or the global limit). Keeping it there on every allocation is what
/// holds reservations back: a partition below its request can always grow to
/// it, because nobody else was ever allowed to take that memory.
pub fn reservation_shortfall(
    capacity: u64,
    unowned_cache: u64,
    requester: PartitionId,
    bytes: u64,
    partitions: &[PartitionMemory],
) -> u64 {
    let committed: u64 = partitions
        .iter()
        .map(|p| {
            let extra = if p.id == requester { bytes } else { 0 };
            p.request.max(p.usage() + extra)
        })
        .sum::<u64>()
        + unowned_cache;
    committed.saturating_sub(capacity)
}

/// Plans how to free `needed` bytes for `requester`.
///
/// A requester within its request may take from every BestEffort partition, from
/// Burstable partitions above their requests and from Guaranteed partitions'
/// cache above their requests. A Burstable requester bursting
/// above its request may take only from BestEffort partitions; a BestEffort
/// requester only from the unowned cache and its own cached blocks (which every
/// requester gives up first). Within a class, lower priority (then larger
/// excess) goes first.
pub fn plan_reclaim(
    needed: u64,
    requester: Requester,
    unowned_cache: u64,
    partitions: &[PartitionMemory],
    priority_of: impl Fn(PartitionId) -> i32,
) -> ReclaimPlan {
    let mut plan = ReclaimPlan {
        shortfall: needed,
        ..ReclaimPlan::default()
    };
    plan.take(None, ReclaimKind::ReleaseCached, unowned_cache);

    let may_take_from = |victim: &PartitionMemory| -> bool {
        if victim.id == requester.id {
            return false;
        }
        match (requester.within_request, requester.class, victim.class) {
            (true, _, _) => true,
            (false, QosClass::BestEffort, _) => false,
            (false, _, victim_class) => victim_class == QosClass::BestEffort,
        }
    };
    // The requester's own cached blocks are fair game whatever its class.
    if let Some(me) = partitions.iter().find(|p| p.id == requester.id) {
        plan.take(
            Some(me.id),
            ReclaimKind::ReleaseCached,
            me.cached.min(requester.own_excess),
        );
    }

    for class in [
        QosClass::BestEffort,
        QosClass::Burstable,
        QosClass::Guaranteed,
    ] {
        let mut victims: Vec<&PartitionMemory> = partitions
            .iter()
            .filter(|p| p.class == class && may_take_from(p))
            .collect();
        victims.sort_by_key(|p| (priority_of(p.id), std::cmp::Reverse(excess(p)), p.id));
        for kind in [ReclaimKind::ReleaseCached, ReclaimKind::SpillEvictable] {
            for v in &victims {
                let already: u64 = plan
                    .steps
                    .iter()
                    .filter(|s| s.partition == Some(v.id))
                    .map(|s| s.bytes)
                    .sum();
                let room = excess(v).saturating_sub(already);
                let available = match kind {
                    ReclaimKind::ReleaseCached => v.cached,
                    // A Guaranteed partition's live buffers are never spilled.
                    ReclaimKind::SpillEvictable if class == QosClass::Guaranteed => 0,
                    ReclaimKind::SpillEvictable => v.evictable.min(v.allocated),
                };
                plan.take(Some(v.id), kind, available.min(room));
            }
        }
    }
    plan
}

/// How much of a partition may be reclaimed at all: everything for BestEffort,
/// usage above request for the others (for Guaranteed, only its cache).
fn excess(p: &PartitionMemory) -> u64 {
    match p.class {
        QosClass::Guaranteed => p.usage().saturating_sub(p.request).min(p.cached),
        QosClass::Burstable => p.usage().saturating_sub(p.request),
        QosClass::BestEffort => p.usage(),
    }
}

impl ReclaimPlan {
    fn take(&mut self, partition: Option<PartitionId>, kind: ReclaimKind, available: u64) {
        let bytes = available.min(self.shortfall);
        if bytes > 0 {
            self.steps.push(ReclaimStep {
                partition,
                kind,
                bytes,
            });
            self.reclaimed += bytes;
            self.shortfall -= bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn part(
        id: PartitionId,
        class: QosClass,
        request: u64,
        allocated: u64,
        cached: u64,
        evictable: u64,
    ) -> PartitionMemory {
        PartitionMemory {
            id,
            class,
            request,
            allocated,
            cached,
            evictable,
        }
    }

    const G: Requester = Requester {
        id: 1,
        class: QosClass::Guaranteed,
        within_request: true,
        own_excess: 10,
    };

    #[test]
    fn best_effort_goes_first_then_burstable_excess_cache_before_spill() {
        let parts = [
            part(1, QosClass::Guaranteed, 100, 60, 10, 60),
            part(2, QosClass::Burstable, 50, 70, 20, 70),
            part(3, QosClass::BestEffort, 0, 30, 5, 30),
        ];
        let plan = plan_reclaim(200, G, 7, &parts, |_| 0);
        let steps: Vec<_> = plan
            .steps
            .iter()
            .map(|s| (s.partition, s.kind, s.bytes))
            .collect();
        assert_eq!(
            steps,
            [
                (None, ReclaimKind::ReleaseCached, 7),
                // The requester's own cache hurts no one else.
                (Some(1), ReclaimKind::ReleaseCached, 10),
                (Some(3), ReclaimKind::ReleaseCached, 5),
                (Some(3), ReclaimKind::SpillEvictable, 30),
                (Some(2), ReclaimKind::ReleaseCached, 20),
                // Burstable usage 90 over a request of 50: 40 in all, 20 of it cache.
                (Some(2), ReclaimKind::SpillEvictable, 20),
            ]
        );
        assert_eq!((plan.reclaimed, plan.shortfall), (92, 108));
    }

    #[test]
    fn a_plan_stops_once_covered() {
        let parts = [
            part(3, QosClass::BestEffort, 0, 30, 5, 30),
            part(4, QosClass::BestEffort, 0, 30, 0, 30),
        ];
        let plan = plan_reclaim(8, G, 0, &parts, |id| if id == 4 { -1 } else { 0 });
        // Lower priority first: partition 4 has no cache, so 3's cache goes, then 4 spills.
        assert_eq!(
            plan.steps[0],
            ReclaimStep {
                partition: Some(3),
                kind: ReclaimKind::ReleaseCached,
                bytes: 5
            }
        );
        assert_eq!(
            plan.steps[1],
            ReclaimStep {
                partition: Some(4),
                kind: ReclaimKind::SpillEvictable,
                bytes: 3
            }
        );
        assert_eq!((plan.reclaimed, plan.shortfall), (8, 0));
    }

    #[test]
    fn bursting_requesters_take_only_from_lower_standing() {
        let parts = [
            part(2, QosClass::Burstable, 10, 50, 0, 50),
            part(3, QosClass::BestEffort, 0, 20, 0, 20),
            part(5, QosClass::BestEffort, 0, 0, 4, 0),
        ];
        let bursting = Requester {
            id: 6,
            class: QosClass::Burstable,
            within_request: false,
            own_excess: 0,
        };
        let plan = plan_reclaim(100, bursting, 0, &parts, |_| 0);
        assert!(plan.steps.iter().all(|s| s.partition != Some(2)));
        assert_eq!(plan.reclaimed, 24);
        let best_effort = Requester {
            id: 5,
            class: QosClass::BestEffort,
            within_request: false,
            own_excess: 4,
        };
        let plan = plan_reclaim(100, best_effort, 1, &parts, |_| 0);
        assert_eq!(
            plan.reclaimed, 5,
            "only the unowned cache and its own cache"
        );
    }

    fn class() -> impl Strategy<Value = QosClass> {
        prop_oneof![
            Just(QosClass::Guaranteed),
            Just(QosClass::Burstable),
            Just(QosClass::BestEffort)
        ]
    }

    fn partitions() -> impl Strategy<Value = Vec<PartitionMemory>> {
        proptest::collection::vec(
            (class(), 0u64..1000, 0u64..1000, 0u64..300, 0u64..1000),
            0..8,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (class, request, allocated, cached, evictable))| {
                    let request = if class == QosClass::BestEffort {
                        0
                    } else {
                        request
                    };
                    part(
                        i as u64 + 1,
                        class,
                        request,
                        allocated,
                        cached,
                        evictable.min(allocated),
                    )
                })
                .collect()
        })
    }

    /// Checks one plan against the policy; see the property below.
    fn check_plan(
        parts: &[PartitionMemory],
        needed: u64,
        unowned: u64,
        requester: Requester,
    ) -> Result<(), TestCaseError> {
        let plan = plan_reclaim(needed, requester, unowned, parts, |id| (id % 3) as i32);
        prop_assert_eq!(plan.reclaimed + plan.shortfall, needed);
        prop_assert_eq!(
            plan.steps.iter().map(|s| s.bytes).sum::<u64>(),
            plan.reclaimed
        );
        for p in parts {
            let of = |kind: ReclaimKind| -> u64 {
                let mine = plan.steps.iter().filter(|s| s.partition == Some(p.id));
                mine.filter(|s| s.kind == kind).map(|s| s.bytes).sum()
            };
            let (cached, spilled) = (
                of(ReclaimKind::ReleaseCached),
                of(ReclaimKind::SpillEvictable),
            );
            prop_assert!(cached <= p.cached && spilled <= p.evictable);
            let above_request = p.usage().saturating_sub(p.request);
            match p.class {
                QosClass::Guaranteed => prop_assert!(spilled == 0 && cached <= above_request),
                QosClass::Burstable => prop_assert!(cached + spilled <= above_request),
                QosClass::BestEffort => {}
            }
        }
        // Victims come class by class: BestEffort, then Burstable, then Guaranteed.
        let ranks: Vec<u8> = plan
            .steps
            .iter()
            .filter_map(|s| s.partition.and_then(|id| parts.iter().find(|p| p.id == id)))
            .map(|p| p.class.rank())
            .collect();
        prop_assert!(
            ranks.windows(2).all(|w| w[0] <= w[1]),
            "out of order: {:?}",
            plan
        );
        if requester.within_request {
            let reclaimable: u64 = parts
                .iter()
                .map(|p| match p.class {
                    QosClass::Guaranteed => excess(p),
                    _ => excess(p).min(p.cached + p.evictable),
                })
                .sum();
            prop_assert_eq!(plan.reclaimed, needed.min(unowned + reclaimable));
        }
        Ok(())
    }

    proptest! {
        /// Whatever the usage, a plan never spills a Guaranteed partition nor
        /// takes its memory within its request, never takes a Burstable one
        /// below its request, takes no more than is there, goes class by class
        /// from BestEffort up, and covers the need whenever enough is reclaimable.
        #[test]
        fn guaranteed_reservations_hold(
            parts in partitions(),
            needed in 0u64..5000,
            unowned in 0u64..200,
            class in class(),
            within_request in any::<bool>(),
        ) {
            let requester = Requester { id: 99, class, within_request, own_excess: 0 };
            check_plan(&parts, needed, unowned, requester)?;
        }
    }

    /// One partition of the simulated device below.
    #[derive(Clone, Debug)]
    struct Sim {
        mem: PartitionMemory,
        limit: u64,
        spilled: u64,
    }

    #[derive(Clone, Debug)]
    enum DeviceOp {
        Alloc {
            p: usize,
            bytes: u64,
            evictable: bool,
        },
        Free {
            p: usize,
            bytes: u64,
        },
        EmptyCache {
            p: usize,
        },
    }

    fn device_op() -> impl Strategy<Value = DeviceOp> {
        prop_oneof![
            3 => (0usize..5, 1u64..400, any::<bool>())
                .prop_map(|(p, bytes, evictable)| DeviceOp::Alloc { p, bytes, evictable }),
            2 => (0usize..5, 1u64..400).prop_map(|(p, bytes)| DeviceOp::Free { p, bytes }),
            1 => (0usize..5).prop_map(|p| DeviceOp::EmptyCache { p }),
        ]
    }

    /// Carries a covering plan out on the simulated device.
    fn apply(plan: &ReclaimPlan, sims: &mut [Sim], unowned: &mut u64) {
        for step in &plan.steps {
            match (step.partition, step.kind) {
                (None, _) => *unowned -= step.bytes,
                (Some(id), kind) => {
                    let s = sims.iter_mut().find(|s| s.mem.id == id).unwrap();
                    match kind {
                        ReclaimKind::ReleaseCached => s.mem.cached -= step.bytes,
                        ReclaimKind::SpillEvictable => {
                            s.mem.allocated -= step.bytes;
                            s.mem.evictable -= step.bytes;
                            s.spilled += step.bytes;
                        }
                    }
                }
            }
        }
    }

    /// Drives one random run of the simulated device; see the property below.
    fn run_device(classes: &[(QosClass, u64, u64)], ops: &[DeviceOp]) -> Result<(), TestCaseError> {
        const CAPACITY: u64 = 2_000;
        let mut sims: Vec<Sim> = Vec::new();
        let mut reserved = 0;
        for (i, &(class, request, limit)) in classes.iter().enumerate() {
            let (request, limit) = match class {
                QosClass::Guaranteed => (request, request),
                QosClass::Burstable => (request, request + limit),
                QosClass::BestEffort => (0, limit.max(1)),
            };
            if reserved + request > CAPACITY {
                continue; // admission control would refuse this partition
            }
            reserved += request;
            let mem = part(i as u64 + 1, class, request, 0, 0, 0);
            sims.push(Sim {
                mem,
                limit,
                spilled: 0,
            });
        }
        if sims.is_empty() {
            return Ok(());
        }
        let mut unowned = 0u64;
        for op in ops {
            match *op {
                DeviceOp::Alloc {
                    p,
                    bytes,
                    evictable,
                } => {
                    let i = p % sims.len();
                    let before: Vec<Sim> = sims.clone();
                    let me = sims[i].mem;
                    if me.allocated + bytes > sims[i].limit {
                        continue; // the partition's own quota: only it is refused
                    }
                    let mems: Vec<PartitionMemory> = sims.iter().map(|s| s.mem).collect();
                    let short = reservation_shortfall(CAPACITY, unowned, me.id, bytes, &mems);
                    let requester = Requester::allocating(&me, bytes);
                    let plan = plan_reclaim(short, requester, unowned, &mems, |_| 0);
                    if plan.shortfall > 0 {
                        prop_assert!(
                            me.class != QosClass::Guaranteed,
                            "a Guaranteed partition within its request was refused: {:?}",
                            sims
                        );
                        continue;
                    }
                    apply(&plan, &mut sims, &mut unowned);
                    sims[i].mem.allocated += bytes;
                    if evictable {
                        sims[i].mem.evictable += bytes;
                    }
                    let mems: Vec<PartitionMemory> = sims.iter().map(|s| s.mem).collect();
                    prop_assert_eq!(reservation_shortfall(CAPACITY, unowned, 0, 0, &mems), 0);
                    for (s, b) in sims.iter().zip(&before).filter(|(s, _)| s.mem.id != me.id) {
                        let lost = b.mem.allocated - s.mem.allocated;
                        match s.mem.class {
                            QosClass::Guaranteed => prop_assert_eq!(lost, 0),
                            QosClass::Burstable => prop_assert!(
                                lost == 0 || s.mem.usage() >= s.mem.request,
                                "spilled a Burstable partition below its request"
                            ),
                            QosClass::BestEffort => {}
                        }
                    }
                }
                DeviceOp::Free { p, bytes } => {
                    // Freed blocks stay cached on the partition's behalf.
                    let n = sims.len();
                    let s = &mut sims[p % n];
                    let fixed = s.mem.allocated - s.mem.evictable;
                    let from_fixed = bytes.min(fixed);
                    let from_evictable = (bytes - from_fixed).min(s.mem.evictable);
                    s.mem.allocated -= from_fixed + from_evictable;
                    s.mem.evictable -= from_evictable;
                    s.mem.cached += from_fixed + from_evictable;
                }
                DeviceOp::EmptyCache { p } => {
                    // The partition's cache goes to the pool at large.
                    let n = sims.len();
                    let s = &mut sims[p % n];
                    unowned += s.mem.cached;
                    s.mem.cached = 0;
                }
            }
            // Caches may stand in for reservations for a while (the next
            // allocation releases them first); live data never may.
            let resident: u64 = unowned + sims.iter().map(|s| s.mem.usage()).sum::<u64>();
            prop_assert!(resident <= CAPACITY, "device over capacity: {}", resident);
            let live: u64 = sims
                .iter()
                .map(|s| s.mem.request.max(s.mem.allocated))
                .sum();
            prop_assert!(live <= CAPACITY, "live commitments over capacity: {}", live);
        }
        Ok(())
    }

    fn partition_mix() -> impl Strategy<Value = Vec<(QosClass, u64, u64)>> {
        proptest::collection::vec((class(), 0u64..800, 0u64..800), 1..5)
    }

    proptest! {
        /// A simulated device where every allocation goes through
        /// `reservation_shortfall` and `plan_reclaim`: under random
        /// allocate/free/evictable/cache sequences the device never holds more
        /// than its capacity, a Guaranteed partition within its request is never
        /// refused and never loses a byte, and Burstable partitions are spilled
        /// only above their requests.
        #[test]
        fn guaranteed_reservations_hold_on_a_simulated_device(
            classes in partition_mix(),
            ops in proptest::collection::vec(device_op(), 1..120),
        ) {
            run_device(&classes, &ops)?;
        }
    }
}

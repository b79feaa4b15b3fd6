//! Which memory to take back, and from whom, when the device runs short.
//!
//! A pure planning function over usage numbers: the memory pool gathers the
//! numbers, calls [`plan_reclaim`] and carries the steps out (release cached
//! blocks, spill evictable buffers to pinned host memory). Keeping the policy
//! here lets it be tested exhaustively without a device.
//!
//! Order: the pool's unowned cache; then BestEffort partitions (cached blocks,
//! then evictable buffers); then Burstable partitions, only what they hold above
//! their request (cached blocks first, then evictable buffers). A Guaranteed
//! partition, and a Burstable one within its request, is never touched. What the
//! plan cannot cover is the requester's shortfall: the pool raises
//! `OutOfMemoryError` to the requester and to no one else.

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
}

/// Plans how to free `needed` bytes for `requester`.
///
/// A requester within its request may take from every BestEffort partition and
/// from Burstable partitions above their requests. A Burstable requester bursting
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
            (_, _, QosClass::Guaranteed) => false,
            (true, _, _) => true,
            (false, QosClass::BestEffort, _) => false,
            (false, _, victim_class) => victim_class == QosClass::BestEffort,
        }
    };
    // The requester's own cached blocks are fair game whatever its class.
    if let Some(me) = partitions.iter().find(|p| p.id == requester.id) {
        plan.take(Some(me.id), ReclaimKind::ReleaseCached, me.cached);
    }

    for class in [QosClass::BestEffort, QosClass::Burstable] {
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
                    ReclaimKind::SpillEvictable => v.evictable.min(v.allocated),
                };
                plan.take(Some(v.id), kind, available.min(room));
            }
        }
    }
    plan
}

/// How much of a partition may be reclaimed at all: everything for BestEffort,
/// usage above request for Burstable, nothing for Guaranteed.
fn excess(p: &PartitionMemory) -> u64 {
    match p.class {
        QosClass::Guaranteed => 0,
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
        };
        let plan = plan_reclaim(100, bursting, 0, &parts, |_| 0);
        assert!(plan.steps.iter().all(|s| s.partition != Some(2)));
        assert_eq!(plan.reclaimed, 24);
        let best_effort = Requester {
            id: 5,
            class: QosClass::BestEffort,
            within_request: false,
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

    proptest! {
        /// Whatever the usage, a plan never takes from a Guaranteed partition, never
        /// takes a Burstable one below its request, takes no more than is there,
        /// takes nothing from Burstable while BestEffort still has reclaimable bytes,
        /// and covers the need whenever enough is reclaimable.
        #[test]
        fn guaranteed_reservations_hold(
            parts in partitions(),
            needed in 0u64..5000,
            unowned in 0u64..200,
            requester_class in class(),
            within in any::<bool>(),
        ) {
            let requester = Requester { id: 99, class: requester_class, within_request: within };
            let plan = plan_reclaim(needed, requester, unowned, &parts, |id| (id % 3) as i32);
            prop_assert_eq!(plan.reclaimed + plan.shortfall, needed);
            prop_assert_eq!(plan.steps.iter().map(|s| s.bytes).sum::<u64>(), plan.reclaimed);
            let mut seen_burstable = false;
            for p in &parts {
                let taken: u64 = plan.steps.iter().filter(|s| s.partition == Some(p.id)).map(|s| s.bytes).sum();
                let cached: u64 = plan.steps.iter().filter(|s| s.partition == Some(p.id) && s.kind == ReclaimKind::ReleaseCached).map(|s| s.bytes).sum();
                let spilled = taken - cached;
                prop_assert!(cached <= p.cached && spilled <= p.evictable);
                match p.class {
                    QosClass::Guaranteed => prop_assert_eq!(taken, 0),
                    QosClass::Burstable => prop_assert!(taken <= p.usage().saturating_sub(p.request)),
                    QosClass::BestEffort => {}
                }
            }
            for s in &plan.steps {
                let class = s.partition.and_then(|id| parts.iter().find(|p| p.id == id)).map(|p| p.class);
                match class {
                    Some(QosClass::Burstable) => seen_burstable = true,
                    Some(QosClass::BestEffort) => prop_assert!(!seen_burstable, "BestEffort after Burstable: {:?}", plan),
                    _ => {}
                }
            }
            if within {
                let reclaimable: u64 = unowned + parts.iter().map(|p| match p.class {
                    QosClass::Guaranteed => 0,
                    _ => excess(p).min(p.cached + p.evictable),
                }).sum::<u64>();
                prop_assert_eq!(plan.reclaimed, needed.min(reclaimable));
            }
        }
    }
}

//! The pool under the scheduler's QoS: reservations held back, reclaim in plan order.

use super::*;
use crate::backend::DeviceBackend;
use crate::fake_backend::FakeBackend;
use crate::scheduler::QosClass;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GUARANTEED: u64 = 1;
const BEST_EFFORT: u64 = 2;
const BURSTABLE: u64 = 3;

fn qos_pool(budget: u64, capacity: Option<u64>) -> (Arc<FakeBackend>, DevicePool) {
    let fake = Arc::new(FakeBackend::new(budget));
    fake.set_auto_complete(true);
    let mut p = DevicePool::new(0, fake.clone(), 1);
    p.set_qos_capacity(capacity);
    let q = |class, request| {
        Some(PartitionQos {
            class,
            request,
            priority: 0,
        })
    };
    p.set_partition_qos(GUARANTEED, q(QosClass::Guaranteed, 32 * MIB));
    p.set_partition_qos(BEST_EFFORT, q(QosClass::BestEffort, 0));
    p.set_partition_qos(BURSTABLE, q(QosClass::Burstable, 8 * MIB));
    (fake, p)
}

fn opts(evictable: bool) -> AllocOptions {
    AllocOptions {
        evictable,
        no_wait: false,
    }
}

#[test]
fn best_effort_never_takes_a_guaranteed_reservation() {
    let (_fake, mut p) = qos_pool(1 << 30, Some(64 * MIB));
    let mut held = Vec::new();
    let err = loop {
        match p.alloc(4 * MIB, 0, opts(false), BEST_EFFORT) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
    };
    assert_eq!(
        (err.kind, err.partition),
        (AllocErrorKind::OutOfMemory, Some(BEST_EFFORT))
    );
    let taken: u64 = held.iter().map(|b| b.size).sum();
    assert!(taken <= 32 * MIB, "BestEffort took {taken} of 64 MiB");
    assert!(
        taken >= 16 * MIB,
        "the unreserved half stays usable: {taken}"
    );
    // The Guaranteed partition gets its whole request, in any pieces.
    let mine: Vec<BlockRef> = (0..8)
        .map(|_| p.alloc(4 * MIB, 0, opts(false), GUARANTEED).unwrap())
        .collect();
    assert_eq!(p.partition_usage(GUARANTEED).allocated, 32 * MIB);
    // Freeing BestEffort blocks caches them; the Guaranteed partition bursting
    // above its request is refused, not served from others' cache first.
    for b in held.drain(..) {
        p.free(b.id, 0).unwrap();
    }
    assert!(p.alloc(4 * MIB, 0, opts(false), BURSTABLE).is_ok());
    drop(mine);
}

#[test]
fn best_effort_never_takes_a_guaranteed_partitions_freed_blocks_from_the_cache() {
    // BestEffort has filled what the reservation leaves it; the Guaranteed partition then
    // runs a round of work and frees it into the shared cache. BestEffort, still allocating,
    // must not take those cached blocks: once the device is full they are all that backs the
    // reservation, and the Guaranteed partition's next round would meet OutOfMemoryError.
    let (_fake, mut p) = qos_pool(64 * MIB, Some(64 * MIB));
    let mut held = Vec::new();
    let fill = |p: &mut DevicePool, held: &mut Vec<BlockRef>| {
        while let Ok(b) = p.alloc(4 * MIB, 0, opts(false), BEST_EFFORT) {
            held.push(b);
        }
    };
    fill(&mut p, &mut held);
    for round in 0..3 {
        let work: Vec<BlockRef> = (0..8)
            .map(|i| {
                p.alloc(4 * MIB, 0, opts(false), GUARANTEED)
                    .unwrap_or_else(|e| {
                        panic!("round {round}, Guaranteed block {i} within its request: {e:?}")
                    })
            })
            .collect();
        for b in work {
            p.free(b.id, 0).unwrap();
        }
        let (reserved, cached) = (p.stats().reserved_bytes, p.stats().cached_bytes());
        fill(&mut p, &mut held);
        let taken: u64 = held.iter().map(|b| b.size).sum();
        assert!(
            taken <= 32 * MIB,
            "round {round}: BestEffort holds {taken} of 64 MiB"
        );
        // The refused cache hits gave nothing back to the device: the cache still holds the
        // Guaranteed partition's blocks for its next round.
        let s = p.stats();
        assert_eq!(
            (s.reserved_bytes, s.cached_bytes()),
            (reserved, cached),
            "round {round}"
        );
    }
}

#[test]
fn memory_taken_outside_the_pool_later_still_leaves_the_reservation_backed() {
    // Capacity set while the device had 64 MiB free; then 16 MiB go to something outside the
    // pool (a green context, another library). BestEffort must stop where the device can still
    // give the Guaranteed partition its 32 MiB, not where the stale capacity says.
    let (fake, mut p) = qos_pool(64 * MIB, Some(64 * MIB));
    let outside = fake.mem_alloc(0, 16 * MIB).unwrap();
    let mut held = Vec::new();
    while let Ok(b) = p.alloc(4 * MIB, 0, opts(false), BEST_EFFORT) {
        held.push(b);
    }
    let mine: Vec<BlockRef> = (0..8)
        .map(|i| {
            p.alloc(4 * MIB, 0, opts(false), GUARANTEED)
                .unwrap_or_else(|e| panic!("Guaranteed block {i} within its request: {e:?}"))
        })
        .collect();
    assert_eq!(p.partition_usage(GUARANTEED).allocated, 32 * MIB);
    assert!(!held.is_empty(), "BestEffort got the unreserved remainder");
    drop(mine);
    fake.mem_free(0, outside).unwrap();
}

#[test]
fn device_pressure_spills_best_effort_never_guaranteed() {
    // No reservation capacity: only the device's own 48 MiB bound the pool.
    let (fake, mut p) = qos_pool(48 * MIB, None);
    let g = p.alloc(16 * MIB, 0, opts(true), GUARANTEED).unwrap();
    let be: Vec<BlockRef> = (0..4)
        .map(|_| p.alloc(8 * MIB, 0, opts(true), BEST_EFFORT).unwrap())
        .collect();
    assert!(fake.device_used() >= 48 * MIB);
    // Within its request the Guaranteed partition is owed memory: BestEffort spills.
    let more = p.alloc(16 * MIB, 0, opts(false), GUARANTEED).unwrap();
    assert!(p.stats().spilled_bytes >= 16 * MIB);
    assert_eq!(p.partition_usage(GUARANTEED).allocated, 32 * MIB);
    assert!(p.partition_usage(BEST_EFFORT).allocated <= 16 * MIB);
    // BestEffort asking for more gets OutOfMemory itself; the Guaranteed
    // partition's evictable block stays resident.
    let spilled = p.stats().spilled_bytes;
    let err = loop {
        match p.alloc(8 * MIB, 0, opts(false), BEST_EFFORT) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(
        (err.kind, err.partition),
        (AllocErrorKind::OutOfMemory, Some(BEST_EFFORT))
    );
    assert_eq!(p.stats().spilled_bytes, spilled, "nothing more was spilled");
    assert_eq!(p.partition_usage(GUARANTEED).allocated, 32 * MIB);
    let _ = (g, be, more);
}

#[test]
fn without_qos_the_pool_keeps_its_plain_steps() {
    let fake = Arc::new(FakeBackend::new(16 * MIB));
    fake.set_auto_complete(true);
    let mut p = DevicePool::new(0, fake, 1);
    let a = p.alloc(8 * MIB, 0, opts(true), GUARANTEED).unwrap();
    // Anyone's evictable block is spilled for anyone when nothing says otherwise.
    let b = p.alloc(12 * MIB, 0, opts(false), BEST_EFFORT).unwrap();
    assert!(p.stats().spilled_bytes >= 8 * MIB);
    let _ = (a, b);
}

#[test]
fn one_block_of_the_whole_request_fits_after_best_effort_filled_the_rest() {
    let (_fake, mut p) = qos_pool(1 << 30, Some(64 * MIB));
    let mut held = Vec::new();
    while let Ok(b) = p.alloc(2 * MIB, 0, opts(false), BEST_EFFORT) {
        held.push(b);
    }
    // The charge made before the pool looks for memory is not usage yet: the
    // block is exactly its request, so it is within it.
    let whole = p.alloc(32 * MIB, 0, opts(false), GUARANTEED).unwrap();
    assert_eq!(p.partition_usage(GUARANTEED).allocated, 32 * MIB);
    let err = p.alloc(2 * MIB, 0, opts(false), GUARANTEED).unwrap_err();
    assert_eq!(
        err.partition,
        Some(GUARANTEED),
        "above its request it competes"
    );
    let _ = (whole, held);
}

// ----------------------------------------------------------------------------- scheduler scope

const OUTSIDE: u64 = crate::limits::DEFAULT_PARTITION;
const MEMORY_POOL: u64 = 7; // a partition with a quota but no QoS (a `MemoryPool`)

#[test]
fn allocations_outside_governed_partitions_ignore_the_scheduler_capacity() {
    // A 64 MiB scheduler on a 1 GiB device: 200 MiB outside its partitions still fit, and a
    // second, smaller scheduler does not make 64-byte allocations fail either.
    let (_fake, mut p) = qos_pool(1 << 30, Some(64 * MIB));
    let big = p.alloc(200 * MIB, 0, opts(false), OUTSIDE).unwrap();
    p.set_qos_capacity(Some(MIB));
    let small = p.alloc(64, 0, opts(false), OUTSIDE).unwrap();
    p.set_partition_limit(MEMORY_POOL, Some(300 * MIB));
    let pooled = p.alloc(250 * MIB, 0, opts(false), MEMORY_POOL).unwrap();
    assert_eq!(p.partition_usage(OUTSIDE).allocated, big.size + small.size);
    let _ = pooled;
}

#[test]
fn ungoverned_blocks_shrink_what_governed_partitions_share() {
    // 96 MiB device, 64 MiB scheduler with a 32 MiB Guaranteed reservation. 40 MiB taken
    // outside the partitions leave the device ~54 MiB for them: the Guaranteed partition
    // still gets its whole request, and BestEffort only what remains beside it.
    let (_fake, mut p) = qos_pool(96 * MIB, Some(64 * MIB));
    let outside = p.alloc(40 * MIB, 0, opts(false), OUTSIDE).unwrap();
    let mut held = Vec::new();
    while let Ok(b) = p.alloc(2 * MIB, 0, opts(false), BEST_EFFORT) {
        held.push(b);
    }
    let mine: Vec<BlockRef> = (0..8)
        .map(|i| {
            p.alloc(4 * MIB, 0, opts(false), GUARANTEED)
                .unwrap_or_else(|e| panic!("Guaranteed block {i} within its request: {e:?}"))
        })
        .collect();
    let taken: u64 = held.iter().map(|b| b.size).sum();
    assert!(
        taken <= 96 * MIB - 40 * MIB - 32 * MIB,
        "BestEffort took {taken}"
    );
    let _ = (outside, mine);
}

#[test]
fn ungoverned_pressure_never_spills_a_governed_block() {
    let (_fake, mut p) = qos_pool(32 * MIB, None);
    let g = p.alloc(16 * MIB, 0, opts(true), GUARANTEED).unwrap();
    let mine = p.alloc(8 * MIB, 0, opts(true), OUTSIDE).unwrap();
    // Outside the partitions, only ungoverned blocks may make room: its own, then nothing.
    let more = p.alloc(12 * MIB, 0, opts(false), OUTSIDE).unwrap();
    assert_eq!(p.stats().spilled_bytes, mine.size);
    let err = p.alloc(12 * MIB, 0, opts(false), OUTSIDE).unwrap_err();
    assert_eq!(
        (err.kind, err.partition),
        (AllocErrorKind::OutOfMemory, None)
    );
    assert_eq!(
        p.stats().spilled_bytes,
        mine.size,
        "the Guaranteed block stays"
    );
    let _ = (g, more);
}

#[test]
fn qos_out_of_memory_reports_what_the_partition_holds_not_the_request() {
    let (_fake, mut p) = qos_pool(1 << 30, Some(64 * MIB));
    let mut held = 0;
    let err = loop {
        match p.alloc(4 * MIB, 0, opts(false), BEST_EFFORT) {
            Ok(b) => held += b.size,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind, AllocErrorKind::OutOfMemory);
    assert_eq!(err.partition, Some(BEST_EFFORT));
    assert_eq!(err.in_use, held);
    assert_eq!(p.partition_usage(BEST_EFFORT).allocated, held);
}

#[test]
fn a_retired_partition_refuses_allocations_and_keeps_its_blocks() {
    let (_fake, mut p) = qos_pool(1 << 30, Some(64 * MIB));
    let b = p.alloc(MIB, 0, opts(false), BURSTABLE).unwrap();
    p.retire_partition(BURSTABLE);
    let err = p.alloc(64, 0, opts(false), BURSTABLE).unwrap_err();
    assert_eq!(
        (err.kind, err.partition, err.in_use),
        (AllocErrorKind::PartitionRetired, Some(BURSTABLE), b.size)
    );
    assert!(
        p.alloc(64, 0, opts(false), GUARANTEED).is_ok(),
        "others go on"
    );
    p.touch(b.id, 0).unwrap();
    p.free(b.id, 0).unwrap();
    assert_eq!(p.partition_usage(BURSTABLE).allocated, 0);
}

#[test]
fn a_block_held_in_place_is_never_spilled() {
    let fake = Arc::new(FakeBackend::new(16 * MIB));
    fake.set_auto_complete(true);
    let mut p = DevicePool::new(0, fake, 1);
    let a = p.alloc(8 * MIB, 0, opts(true), OUTSIDE).unwrap();
    let held = p.hold_in_place(a.id, 0).unwrap();
    assert_eq!(held.ptr, a.ptr);
    p.hold_in_place(a.id, 0).unwrap();
    assert!(p.alloc(12 * MIB, 0, opts(false), OUTSIDE).is_err());
    p.release_in_place(a.id);
    assert!(
        p.alloc(12 * MIB, 0, opts(false), OUTSIDE).is_err(),
        "one hold left"
    );
    p.release_in_place(a.id);
    let b = p.alloc(12 * MIB, 0, opts(false), OUTSIDE).unwrap();
    assert_eq!(p.stats().spilled_bytes, a.size);
    let _ = b;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever the governed partitions do and whatever capacity the scheduler set, an
    /// allocation outside them (the default partition, a `MemoryPool`) fails only when the
    /// device itself is full.
    #[test]
    fn outside_allocations_answer_only_to_the_device(
        ops in proptest::collection::vec((0u8..4, 1u64..6, proptest::prelude::any::<bool>()), 1..60),
        capacity_mib in 1u64..128,
    ) {
        let budget = 256 * MIB;
        let (fake, mut p) = qos_pool(budget, Some(capacity_mib * MIB));
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (who, mib, free_one) in ops {
            if free_one && !live.is_empty() {
                let (id, _) = live.swap_remove(0);
                p.free(id, 0).unwrap();
                continue;
            }
            let partition = [OUTSIDE, BEST_EFFORT, BURSTABLE, MEMORY_POOL][who as usize];
            match p.alloc(mib * MIB, 0, opts(false), partition) {
                Ok(b) => live.push((b.id, partition)),
                Err(e) => {
                    if partition == OUTSIDE || partition == MEMORY_POOL {
                        proptest::prop_assert_eq!(e.kind, AllocErrorKind::OutOfMemory);
                        proptest::prop_assert!(
                            fake.device_used() + 2 * mib * MIB > budget,
                            "refused with the device at {} of {budget}", fake.device_used()
                        );
                    }
                }
            }
        }
    }
}

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

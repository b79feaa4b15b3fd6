//! The scheduler's decision core: partitions with Kubernetes-style QoS classes,
//! admission control, the reclaim order under memory pressure, kernel pacing and
//! the task state machine.
//!
//! Everything here is a pure decision over numbers the caller supplies (usage,
//! measured kernel time, the clock), so it is tested without a device.
//!
//! # How the memory pool and the dispatch controller join it
//!
//! - **Partition ids.** A partition is created in the runtime first
//!   (`Runtime::create_partition(key, memory_limit)`, which also sets the pool's
//!   per-partition quota) and then admitted here under that id with
//!   [`PartitionManager::create_with_id`]; `pygpukit._rust` does both. Threads
//!   inside `with partition:` have it as [`crate::limits::current_partition`].
//! - **Reservations, per allocation.** Before the pool takes `bytes` for partition
//!   `p` beyond what its cache can serve, it describes every partition as a
//!   [`PartitionMemory`] (request and class from here; allocated from its
//!   partition table; cached 0 and the pool's whole cache as `unowned_cache`
//!   while the cache is shared; evictable = evictable blocks whose last-use event
//!   has completed) and calls [`reservation_shortfall`]. If that is non-zero, or
//!   the backend itself runs out, it calls [`plan_reclaim`] with
//!   [`Requester::allocating`] and carries the steps out in order (release cached
//!   segments LRU-first; spill the named partition's LRU evictable buffers) when
//!   the plan covers the need; otherwise `OutOfMemoryError` goes to `p` alone.
//! - **Pacing, per launch.** [`pacing::Pacer::register`] each partition with its
//!   class and [`Partition::pacing`]. For a launch in partition `p` the dispatch
//!   controller calls `enqueue(p)`, then `try_launch(p, now)` until it returns a
//!   ticket (on `Hold::RateLimited { ready_at }` wait until then; on
//!   `Hold::HigherClassPending` wait for the next completion), launches, and on
//!   the completion event calls `complete(ticket, measured_ns, now)`.
//! - **Tasks.** `gp.scheduler` drives [`runqueue::Scheduler`] through
//!   `pygpukit._rust.SchedulerCore`.

pub mod admission;
pub mod evaluator;
pub mod pacing;
pub mod partition;
pub mod pressure;
pub mod qos;
pub mod runqueue;
pub mod task;

pub use crate::limits::{PartitionId, DEFAULT_PARTITION};
pub use admission::{AdmissionController, AdmissionError, Amounts, Resource};
pub use evaluator::{QosDecision, QosPolicyEvaluator, QosTaskMeta};
pub use pacing::{Hold, Nanos, Pacer, PacingConfig, TokenBucket};
pub use partition::{
    ComputeShare, Partition, PartitionConfig, PartitionError, PartitionManager, PartitionSpec,
};
pub use pressure::{
    plan_reclaim, reservation_shortfall, PartitionMemory, ReclaimKind, ReclaimPlan, ReclaimStep,
    Requester,
};
pub use qos::QosClass;
pub use runqueue::{Outcome, Scheduler, SchedulerError, TaskRequest};
pub use task::{Task, TaskEvent, TaskId, TaskState, TransitionError};

/// Compute in millionths of the device (an SM count or a fraction, converted):
/// integers, so that sums of shares compare exactly against the whole.
pub type ComputeUnits = u64;

/// The whole device in [`ComputeUnits`].
pub const WHOLE_DEVICE: ComputeUnits = 1_000_000;

/// An amount for messages: bytes as KiB/MiB/GiB, compute as a percentage.
pub fn format_amount(resource: Resource, amount: u64) -> String {
    match resource {
        Resource::Memory => {
            const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
            UNITS
                .iter()
                .find(|(_, size)| amount >= *size)
                .map(|(unit, size)| format!("{:.1} {unit}", amount as f64 / *size as f64))
                .unwrap_or_else(|| format!("{amount} B"))
        }
        Resource::Compute => format!("{:.1}%", amount as f64 / WHOLE_DEVICE as f64 * 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_well_in_messages() {
        assert_eq!(format_amount(Resource::Memory, 3 << 29), "1.5 GiB");
        assert_eq!(format_amount(Resource::Memory, 256 << 20), "256.0 MiB");
        assert_eq!(format_amount(Resource::Memory, 2048), "2.0 KiB");
        assert_eq!(format_amount(Resource::Memory, 7), "7 B");
        assert_eq!(format_amount(Resource::Compute, 250_000), "25.0%");
    }
}

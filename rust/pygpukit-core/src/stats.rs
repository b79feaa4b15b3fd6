//! Pool statistics as flat counters, and a snapshot of blocks for debugging.

use crate::backend::Stream;
use crate::limits::{PartitionId, PartitionUsage};

/// Counters of one device pool. Bytes are block sizes after rounding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes in live blocks resident on the device.
    pub allocated_bytes: u64,
    /// Bytes the callers asked for in live blocks (before rounding).
    pub requested_bytes: u64,
    /// Bytes obtained from the backend (segments), live or cached.
    pub reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Live blocks (resident or spilled).
    pub active_blocks: u64,
    pub alloc_count: u64,
    pub free_count: u64,
    pub segment_alloc_count: u64,
    pub segment_free_count: u64,
    /// Blocks spilled to pinned host memory, and restored from it.
    pub evictions: u64,
    pub restores: u64,
    /// Bytes of live blocks currently spilled to the host.
    pub spilled_bytes: u64,
    pub oom_count: u64,
    /// Pinned host bytes held by the pool's pinned cache.
    pub pinned_reserved_bytes: u64,
    /// The global limit in bytes, if any.
    pub limit_bytes: Option<u64>,
}

impl PoolStats {
    /// Reserved bytes not handed out: what `empty_cache` can give back.
    pub fn cached_bytes(&self) -> u64 {
        self.reserved_bytes - self.allocated_bytes
    }

    pub fn note_allocated(&mut self, bytes: u64, requested: u64) {
        self.allocated_bytes += bytes;
        self.requested_bytes += requested;
        self.peak_allocated_bytes = self.peak_allocated_bytes.max(self.allocated_bytes);
    }

    pub fn note_released(&mut self, bytes: u64, requested: u64) {
        self.allocated_bytes -= bytes;
        self.requested_bytes -= requested;
    }

    pub fn note_reserved(&mut self, bytes: u64) {
        self.reserved_bytes += bytes;
        self.segment_alloc_count += 1;
        self.peak_reserved_bytes = self.peak_reserved_bytes.max(self.reserved_bytes);
    }

    pub fn note_unreserved(&mut self, bytes: u64) {
        self.reserved_bytes -= bytes;
        self.segment_free_count += 1;
    }

    /// Flat `(name, value)` pairs, partitions as `partition.<id>.<counter>`.
    /// A missing limit is left out rather than shown as a number.
    pub fn flatten(&self, partitions: &[(PartitionId, PartitionUsage)]) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = [
            ("allocated_bytes", self.allocated_bytes),
            ("requested_bytes", self.requested_bytes),
            ("reserved_bytes", self.reserved_bytes),
            ("cached_bytes", self.cached_bytes()),
            ("peak_allocated_bytes", self.peak_allocated_bytes),
            ("peak_reserved_bytes", self.peak_reserved_bytes),
            ("active_blocks", self.active_blocks),
            ("alloc_count", self.alloc_count),
            ("free_count", self.free_count),
            ("segment_alloc_count", self.segment_alloc_count),
            ("segment_free_count", self.segment_free_count),
            ("evictions", self.evictions),
            ("restores", self.restores),
            ("spilled_bytes", self.spilled_bytes),
            ("oom_count", self.oom_count),
            ("pinned_reserved_bytes", self.pinned_reserved_bytes),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(limit) = self.limit_bytes {
            out.push(("limit_bytes".to_string(), limit));
        }
        for (id, u) in partitions {
            out.push((format!("partition.{id}.allocated_bytes"), u.allocated));
            out.push((format!("partition.{id}.peak_allocated_bytes"), u.peak));
            if let Some(limit) = u.limit {
                out.push((format!("partition.{id}.limit_bytes"), limit));
            }
        }
        out
    }
}

/// Where a block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out and resident on the device.
    Allocated,
    /// Handed out, spilled to pinned host memory.
    Evicted,
    /// Cached by the pool, waiting for reuse.
    Free,
}

impl BlockState {
    pub fn name(self) -> &'static str {
        match self {
            BlockState::Allocated => "allocated",
            BlockState::Evicted => "evicted",
            BlockState::Free => "free",
        }
    }
}

/// One entry of a pool snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockInfo {
    /// Block id for live blocks; 0 for free ranges.
    pub id: u64,
    /// Device address (host address of the spill buffer when evicted).
    pub ptr: u64,
    pub size: u64,
    pub requested: u64,
    /// The stream the block was allocated on (free ranges: the stream that freed it).
    pub stream: Stream,
    pub state: BlockState,
    pub partition: PartitionId,
    pub evictable: bool,
    /// Graph-private region the block belongs to, if any.
    pub graph_pool: Option<u64>,
    /// Seconds since the block was handed out (free ranges: since freed).
    pub age_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_stats_name_every_counter_and_partition() {
        let mut s = PoolStats::default();
        s.note_reserved(100);
        s.note_allocated(60, 50);
        s.note_released(60, 50);
        let flat = s.flatten(&[(
            2,
            PartitionUsage {
                allocated: 0,
                peak: 60,
                limit: Some(80),
            },
        )]);
        let get = |k: &str| flat.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("cached_bytes"), Some(100));
        assert_eq!(get("peak_allocated_bytes"), Some(60));
        assert_eq!(get("partition.2.limit_bytes"), Some(80));
        assert_eq!(get("limit_bytes"), None);
    }
}

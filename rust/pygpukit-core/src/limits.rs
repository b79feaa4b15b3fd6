//! Memory limits: the global limit of a device pool and per-partition quotas.
//!
//! The global limit caps a device pool's *reserved* bytes (everything obtained
//! from the backend, cached or not), so the process never holds more device
//! memory than the limit. Partition quotas cap *allocated* bytes (live blocks)
//! charged to a partition, because segments are shared between partitions.
//! The partition charged is the calling thread's current partition
//! ([`current_partition`]); the scheduler sets it for the threads it runs.

use std::cell::Cell;
use std::collections::HashMap;

/// Partition identifier; [`DEFAULT_PARTITION`] is everything outside a partition.
pub type PartitionId = u64;
pub const DEFAULT_PARTITION: PartitionId = 0;

thread_local! {
    static CURRENT_PARTITION: Cell<PartitionId> = const { Cell::new(DEFAULT_PARTITION) };
}

/// The partition that allocations on this thread are charged to.
pub fn current_partition() -> PartitionId {
    CURRENT_PARTITION.with(Cell::get)
}

/// Makes `id` the current partition of this thread; returns the previous one.
pub fn set_current_partition(id: PartitionId) -> PartitionId {
    CURRENT_PARTITION.with(|c| c.replace(id))
}

/// A limit as the user gave it: bytes, or a fraction of the device's memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LimitSpec {
    Bytes(u64),
    Fraction(f64),
}

impl LimitSpec {
    /// The limit in bytes for a device of `total` bytes.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            LimitSpec::Bytes(b) => b,
            LimitSpec::Fraction(f) => (total as f64 * f) as u64,
        }
    }

    /// A fraction, checked to lie in (0, 1].
    pub fn fraction(f: f64) -> Result<Self, String> {
        if f > 0.0 && f <= 1.0 {
            Ok(LimitSpec::Fraction(f))
        } else {
            Err(format!(
                "a memory limit fraction must lie in (0, 1], got {f}"
            ))
        }
    }
}

/// Parses `PYGPUKIT_MEMORY_LIMIT`: bytes (`"1073741824"`), a fraction of device
/// memory (`"0.5"`), or a size with a unit (`"8GiB"`, `"512 MiB"`, `"2GB"`, `"100k"`).
pub fn parse_limit(text: &str) -> Result<LimitSpec, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let value: f64 = number
        .parse()
        .map_err(|_| format!("cannot read a memory limit from {text:?}: expected bytes, a fraction like 0.5, or a size like 8GiB"))?;
    if unit.is_empty() {
        return if number.contains('.') {
            LimitSpec::fraction(value)
        } else {
            Ok(LimitSpec::Bytes(value as u64))
        };
    }
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0_f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(format!("unknown unit {unit:?} in memory limit {text:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
    };
    Ok(LimitSpec::Bytes((value * scale) as u64))
}

/// Bytes charged to one partition of one device pool, and its quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionUsage {
    pub allocated: u64,
    pub peak: u64,
    pub limit: Option<u64>,
}

/// Why a partition refused a charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaExceeded {
    pub in_use: u64,
    pub limit: u64,
}

/// Per-partition accounting of one device pool.
#[derive(Default)]
pub struct PartitionTable {
    usage: HashMap<PartitionId, PartitionUsage>,
}

impl PartitionTable {
    pub fn set_limit(&mut self, id: PartitionId, limit: Option<u64>) {
        self.usage.entry(id).or_default().limit = limit;
    }

    /// Would charging `bytes` to `id` stay within its quota?
    pub fn check(&self, id: PartitionId, bytes: u64) -> Result<(), QuotaExceeded> {
        match self.usage.get(&id) {
            Some(PartitionUsage {
                allocated,
                limit: Some(limit),
                ..
            }) if allocated + bytes > *limit => Err(QuotaExceeded {
                in_use: *allocated,
                limit: *limit,
            }),
            _ => Ok(()),
        }
    }

    /// Charges `bytes` to `id`; call [`PartitionTable::check`] first.
    pub fn charge(&mut self, id: PartitionId, bytes: u64) {
        let u = self.usage.entry(id).or_default();
        u.allocated += bytes;
        u.peak = u.peak.max(u.allocated);
    }

    pub fn release(&mut self, id: PartitionId, bytes: u64) {
        if let Some(u) = self.usage.get_mut(&id) {
            u.allocated -= bytes;
        }
    }

    pub fn get(&self, id: PartitionId) -> PartitionUsage {
        self.usage.get(&id).copied().unwrap_or_default()
    }

    /// Every partition that has a quota or has been charged, in no order (no allocation).
    pub fn iter(&self) -> impl Iterator<Item = (PartitionId, PartitionUsage)> + '_ {
        self.usage.iter().map(|(k, u)| (*k, *u))
    }

    /// Every partition that has a quota or has been charged, by id.
    pub fn all(&self) -> Vec<(PartitionId, PartitionUsage)> {
        let mut v: Vec<_> = self.usage.iter().map(|(k, u)| (*k, *u)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bytes_fractions_and_units() {
        assert_eq!(parse_limit("1024"), Ok(LimitSpec::Bytes(1024)));
        assert_eq!(parse_limit("0.5"), Ok(LimitSpec::Fraction(0.5)));
        assert_eq!(parse_limit("8GiB"), Ok(LimitSpec::Bytes(8 << 30)));
        assert_eq!(parse_limit(" 512 MiB "), Ok(LimitSpec::Bytes(512 << 20)));
        assert_eq!(parse_limit("2GB"), Ok(LimitSpec::Bytes(2_000_000_000)));
        assert_eq!(parse_limit("1.5k"), Ok(LimitSpec::Bytes(1536)));
        assert!(parse_limit("1.5").is_err());
        assert!(parse_limit("lots").is_err());
        assert!(parse_limit("3 parsecs").is_err());
    }

    #[test]
    fn fraction_resolves_against_device_memory() {
        assert_eq!(LimitSpec::Fraction(0.25).resolve(1000), 250);
        assert_eq!(LimitSpec::Bytes(7).resolve(1000), 7);
    }

    #[test]
    fn quota_refuses_charges_past_the_limit() {
        let mut t = PartitionTable::default();
        t.set_limit(3, Some(100));
        t.charge(3, 60);
        assert_eq!(
            t.check(3, 50),
            Err(QuotaExceeded {
                in_use: 60,
                limit: 100
            })
        );
        assert!(t.check(3, 40).is_ok());
        assert!(t.check(4, 1 << 40).is_ok());
        t.release(3, 60);
        assert_eq!(t.get(3).peak, 60);
        assert_eq!(t.get(3).allocated, 0);
    }

    #[test]
    fn current_partition_is_per_thread() {
        let previous = set_current_partition(9);
        assert_eq!(current_partition(), 9);
        std::thread::spawn(|| assert_eq!(current_partition(), DEFAULT_PARTITION))
            .join()
            .unwrap();
        set_current_partition(previous);
    }
}

//! QoS classes, derived from what a partition asks for the way Kubernetes derives
//! a pod's class from its requests and limits.
//!
//! The class is never set by hand: it follows from the requests, so a user cannot
//! claim Guaranteed treatment without reserving what Guaranteed means.

use std::cmp::Ordering;
use std::fmt;

/// How well a partition is protected when the device is contended.
///
/// Ordered by protection: `Guaranteed > Burstable > BestEffort`. Pacing lets a
/// higher class go first; memory pressure is relieved from the lowest class up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Memory request equals its limit and compute is reserved: nothing it holds
    /// within its request is ever reclaimed, and it is never paced behind others.
    Guaranteed,
    /// Something is requested, but some request is below its limit: protected up
    /// to the request, reclaimable above it.
    Burstable,
    /// Nothing requested: runs on what others leave and is reclaimed first.
    BestEffort,
}

impl QosClass {
    /// Derives the class from a memory request, an optional memory limit and the
    /// reserved compute (in [`super::ComputeUnits`]; zero when none is reserved).
    ///
    /// A limit alone reserves nothing, so it leaves a partition BestEffort.
    pub fn derive(memory_request: u64, memory_limit: Option<u64>, compute_reserved: u64) -> Self {
        let guaranteed_memory = memory_request > 0 && memory_limit == Some(memory_request);
        if guaranteed_memory && compute_reserved > 0 {
            QosClass::Guaranteed
        } else if memory_request > 0 || compute_reserved > 0 {
            QosClass::Burstable
        } else {
            QosClass::BestEffort
        }
    }

    /// 2 for Guaranteed, 1 for Burstable, 0 for BestEffort: larger is more protected.
    pub fn rank(self) -> u8 {
        match self {
            QosClass::Guaranteed => 2,
            QosClass::Burstable => 1,
            QosClass::BestEffort => 0,
        }
    }

    /// The name used in snapshots and in Python (`"guaranteed"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "best_effort",
        }
    }
}

impl Ord for QosClass {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for QosClass {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_as_kubernetes_derives_pod_classes() {
        assert_eq!(
            QosClass::derive(4 << 30, Some(4 << 30), 500_000),
            QosClass::Guaranteed
        );
        // request == limit but no compute reserved: some request (compute) below its limit.
        assert_eq!(
            QosClass::derive(4 << 30, Some(4 << 30), 0),
            QosClass::Burstable
        );
        assert_eq!(
            QosClass::derive(1 << 30, Some(4 << 30), 500_000),
            QosClass::Burstable
        );
        assert_eq!(QosClass::derive(1 << 30, None, 0), QosClass::Burstable);
        assert_eq!(QosClass::derive(0, None, 250_000), QosClass::Burstable);
        assert_eq!(QosClass::derive(0, Some(1 << 30), 0), QosClass::BestEffort);
        assert_eq!(QosClass::derive(0, None, 0), QosClass::BestEffort);
    }

    #[test]
    fn ordered_by_protection() {
        assert!(QosClass::Guaranteed > QosClass::Burstable);
        assert!(QosClass::Burstable > QosClass::BestEffort);
        let mut v = vec![
            QosClass::BestEffort,
            QosClass::Guaranteed,
            QosClass::Burstable,
        ];
        v.sort_by(|a, b| b.cmp(a));
        assert_eq!(
            v,
            [
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort
            ]
        );
    }
}

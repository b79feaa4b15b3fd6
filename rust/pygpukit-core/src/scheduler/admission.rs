//! Admission control: who may reserve or claim device memory and compute.
//!
//! Each owner (a partition, or a task for [`super::QosPolicyEvaluator`]) has a
//! *request*, which is held back for it alone from the moment it is admitted, a
//! *limit*, and what it currently *holds*. Per resource the device is committed
//! to `sum over owners of max(request, held)`, and the controller keeps that sum
//! at or below capacity: an owner can burst above its request only into memory
//! nobody has reserved, and nobody else can ever eat into a request.

use super::{format_amount, ComputeUnits};
use std::collections::BTreeMap;
use std::fmt;

/// Who reserves and claims: a partition id or a task id.
pub type OwnerId = u64;

/// The two resources admission control meters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Device memory in bytes.
    Memory,
    /// Compute in [`ComputeUnits`] (millionths of the device).
    Compute,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Memory => "memory",
            Resource::Compute => "compute",
        })
    }
}

/// An amount of each resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub memory: u64,
    pub compute: ComputeUnits,
}

impl Amounts {
    pub const ZERO: Amounts = Amounts {
        memory: 0,
        compute: 0,
    };

    pub fn new(memory: u64, compute: ComputeUnits) -> Self {
        Amounts { memory, compute }
    }

    fn get(self, r: Resource) -> u64 {
        match r {
            Resource::Memory => self.memory,
            Resource::Compute => self.compute,
        }
    }
}

const RESOURCES: [Resource; 2] = [Resource::Memory, Resource::Compute];

/// What bounded a refused request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The owner's own limit.
    OwnerLimit,
    /// The device's capacity, less what other owners have reserved or hold.
    DeviceCapacity,
}

/// Why admission control refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionError {
    /// `requested` of `resource` is more than the `available` amount that `bound` leaves.
    Short {
        resource: Resource,
        requested: u64,
        available: u64,
        capacity: u64,
        bound: Bound,
    },
    /// An owner asked for a request above its own limit.
    LimitBelowRequest {
        resource: Resource,
        request: u64,
        limit: u64,
    },
    UnknownOwner(OwnerId),
    DuplicateOwner(OwnerId),
    /// The owner still holds claims; release them before removing it.
    Busy {
        owner: OwnerId,
        held: Amounts,
    },
    /// A release of more than the owner holds: a bookkeeping bug in the caller.
    ReleaseExceedsHeld {
        owner: OwnerId,
        resource: Resource,
        released: u64,
        held: u64,
    },
}

impl fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AdmissionError::Short {
                resource,
                requested,
                available,
                capacity,
                bound,
            } => {
                let (need, have, cap) = (
                    format_amount(resource, requested),
                    format_amount(resource, available),
                    format_amount(resource, capacity),
                );
                match bound {
                    Bound::OwnerLimit => write!(
                        f,
                        "{resource} short: needs {need} but only {have} is left under its limit; \
                         raise the limit or ask for less"
                    ),
                    Bound::DeviceCapacity => write!(
                        f,
                        "{resource} short: needs {need} but only {have} of the device's {cap} is \
                         neither reserved by other partitions nor in use; ask for less, or delete \
                         or shrink another partition"
                    ),
                }
            }
            AdmissionError::LimitBelowRequest {
                resource,
                request,
                limit,
            } => write!(
                f,
                "the {resource} request ({}) is above the {resource} limit ({}); a request must \
                 not exceed its limit",
                format_amount(resource, request),
                format_amount(resource, limit)
            ),
            AdmissionError::UnknownOwner(id) => write!(f, "no owner {id} is registered"),
            AdmissionError::DuplicateOwner(id) => write!(f, "owner {id} is already registered"),
            AdmissionError::Busy { owner, held } => write!(
                f,
                "owner {owner} still holds {} of memory and {} of compute; finish or cancel its \
                 tasks first",
                format_amount(Resource::Memory, held.memory),
                format_amount(Resource::Compute, held.compute)
            ),
            AdmissionError::ReleaseExceedsHeld {
                owner,
                resource,
                released,
                held,
            } => write!(
                f,
                "owner {owner} released {released} of {resource} but holds only {held}: \
                 claims and releases do not pair up"
            ),
        }
    }
}

impl std::error::Error for AdmissionError {}

/// One owner's books.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerBooks {
    /// Held back for this owner from admission until removal.
    pub request: Amounts,
    /// At most this much may be held (clamped to capacity).
    pub limit: Amounts,
    /// Claimed now.
    pub held: Amounts,
}

impl OwnerBooks {
    /// What this owner commits of a resource: its reservation or its holding.
    fn committed(&self, r: Resource) -> u64 {
        self.request.get(r).max(self.held.get(r))
    }
}

/// The admission books of one device.
#[derive(Clone, Debug)]
pub struct AdmissionController {
    capacity: Amounts,
    owners: BTreeMap<OwnerId, OwnerBooks>,
}

impl AdmissionController {
    pub fn new(capacity: Amounts) -> Self {
        AdmissionController {
            capacity,
            owners: BTreeMap::new(),
        }
    }

    pub fn capacity(&self) -> Amounts {
        self.capacity
    }

    pub fn owner(&self, id: OwnerId) -> Option<&OwnerBooks> {
        self.owners.get(&id)
    }

    /// What the device is committed to: per resource, each owner's larger of
    /// request and holding, summed. Never above [`AdmissionController::capacity`].
    pub fn committed(&self) -> Amounts {
        Amounts {
            memory: self.committed_of(Resource::Memory, None),
            compute: self.committed_of(Resource::Compute, None),
        }
    }

    /// The sum of requests: what is reserved whether or not it is used.
    pub fn reserved(&self) -> Amounts {
        self.owners.values().fold(Amounts::ZERO, |a, o| Amounts {
            memory: a.memory + o.request.memory,
            compute: a.compute + o.request.compute,
        })
    }

    fn committed_of(&self, r: Resource, except: Option<OwnerId>) -> u64 {
        self.owners
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(_, o)| o.committed(r))
            .sum()
    }

    /// Registers an owner, reserving `request` for it; `limit` of `None` means the device.
    pub fn add_owner(
        &mut self,
        id: OwnerId,
        request: Amounts,
        limit: Option<Amounts>,
    ) -> Result<(), AdmissionError> {
        self.check_owner(id, request, limit)?;
        let limit = limit.unwrap_or(self.capacity);
        self.owners.insert(
            id,
            OwnerBooks {
                request,
                limit,
                held: Amounts::ZERO,
            },
        );
        Ok(())
    }

    /// Would [`AdmissionController::add_owner`] succeed? Changes nothing.
    pub fn check_owner(
        &self,
        id: OwnerId,
        request: Amounts,
        limit: Option<Amounts>,
    ) -> Result<(), AdmissionError> {
        if self.owners.contains_key(&id) {
            return Err(AdmissionError::DuplicateOwner(id));
        }
        for r in RESOURCES {
            let (req, cap) = (request.get(r), self.capacity.get(r));
            if let Some(limit) = limit {
                if req > limit.get(r) {
                    return Err(AdmissionError::LimitBelowRequest {
                        resource: r,
                        request: req,
                        limit: limit.get(r),
                    });
                }
            }
            let available = cap.saturating_sub(self.committed_of(r, None));
            if req > available {
                return Err(AdmissionError::Short {
                    resource: r,
                    requested: req,
                    available,
                    capacity: cap,
                    bound: Bound::DeviceCapacity,
                });
            }
        }
        Ok(())
    }

    /// Removes an owner that holds nothing, giving its reservation back.
    pub fn remove_owner(&mut self, id: OwnerId) -> Result<OwnerBooks, AdmissionError> {
        let books = self
            .owners
            .get(&id)
            .ok_or(AdmissionError::UnknownOwner(id))?;
        if books.held != Amounts::ZERO {
            return Err(AdmissionError::Busy {
                owner: id,
                held: books.held,
            });
        }
        Ok(self.owners.remove(&id).expect("checked above"))
    }

    /// How much more of `r` owner `id` could claim now.
    pub fn headroom(&self, id: OwnerId, r: Resource) -> Result<(u64, Bound), AdmissionError> {
        let o = self
            .owners
            .get(&id)
            .ok_or(AdmissionError::UnknownOwner(id))?;
        let held = o.held.get(r);
        let under_limit = o
            .limit
            .get(r)
            .min(self.capacity.get(r))
            .saturating_sub(held);
        let others = self.committed_of(r, Some(id));
        // Its own reservation is always there; beyond it, only what nobody committed.
        let ceiling = o
            .request
            .get(r)
            .max(self.capacity.get(r).saturating_sub(others));
        let under_capacity = ceiling.saturating_sub(held);
        Ok(if under_limit <= under_capacity {
            (under_limit, Bound::OwnerLimit)
        } else {
            (under_capacity, Bound::DeviceCapacity)
        })
    }

    /// Would [`AdmissionController::claim`] succeed? Changes nothing.
    pub fn check_claim(&self, id: OwnerId, claim: Amounts) -> Result<(), AdmissionError> {
        for r in RESOURCES {
            let (available, bound) = self.headroom(id, r)?;
            if claim.get(r) > available {
                return Err(AdmissionError::Short {
                    resource: r,
                    requested: claim.get(r),
                    available,
                    capacity: self.capacity.get(r),
                    bound,
                });
            }
        }
        Ok(())
    }

    /// Claims `claim` for owner `id`: within its reservation first, then from
    /// what no one has committed.
    pub fn claim(&mut self, id: OwnerId, claim: Amounts) -> Result<(), AdmissionError> {
        self.check_claim(id, claim)?;
        let o = self.owners.get_mut(&id).expect("checked by check_claim");
        o.held.memory += claim.memory;
        o.held.compute += claim.compute;
        Ok(())
    }

    /// Gives back part of what owner `id` holds.
    pub fn release(&mut self, id: OwnerId, amounts: Amounts) -> Result<(), AdmissionError> {
        let o = self
            .owners
            .get_mut(&id)
            .ok_or(AdmissionError::UnknownOwner(id))?;
        for r in RESOURCES {
            if amounts.get(r) > o.held.get(r) {
                return Err(AdmissionError::ReleaseExceedsHeld {
                    owner: id,
                    resource: r,
                    released: amounts.get(r),
                    held: o.held.get(r),
                });
            }
        }
        o.held.memory -= amounts.memory;
        o.held.compute -= amounts.compute;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

    fn device() -> AdmissionController {
        AdmissionController::new(Amounts::new(8 * GIB, 1_000_000))
    }

    #[test]
    fn requests_beyond_capacity_are_refused_with_what_is_short() {
        let mut a = device();
        a.add_owner(1, Amounts::new(6 * GIB, 500_000), None)
            .unwrap();
        let err = a.add_owner(2, Amounts::new(4 * GIB, 0), None).unwrap_err();
        assert_eq!(
            err,
            AdmissionError::Short {
                resource: Resource::Memory,
                requested: 4 * GIB,
                available: 2 * GIB,
                capacity: 8 * GIB,
                bound: Bound::DeviceCapacity
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("memory short") && text.contains("4.0 GiB") && text.contains("2.0 GiB"),
            "{text}"
        );
        let err = a
            .add_owner(3, Amounts::new(GIB, 600_000), None)
            .unwrap_err();
        assert!(matches!(
            err,
            AdmissionError::Short {
                resource: Resource::Compute,
                available: 500_000,
                ..
            }
        ));
        assert!(err.to_string().contains("50.0%"), "{err}");
    }

    #[test]
    fn a_reservation_is_held_back_for_its_owner() {
        let mut a = device();
        a.add_owner(1, Amounts::new(6 * GIB, 0), Some(Amounts::new(6 * GIB, 0)))
            .unwrap();
        a.add_owner(2, Amounts::ZERO, None).unwrap();
        // The best-effort owner can burst only into the 2 GiB nobody reserved.
        assert!(a.claim(2, Amounts::new(3 * GIB, 0)).is_err());
        a.claim(2, Amounts::new(2 * GIB, 0)).unwrap();
        // ...and the owner of the reservation still gets all of it.
        a.claim(1, Amounts::new(6 * GIB, 0)).unwrap();
        let err = a.claim(1, Amounts::new(1, 0)).unwrap_err();
        assert!(matches!(
            err,
            AdmissionError::Short {
                bound: Bound::OwnerLimit,
                available: 0,
                ..
            }
        ));
        assert_eq!(a.committed(), Amounts::new(8 * GIB, 0));
    }

    #[test]
    fn owners_with_claims_cannot_be_removed_and_releases_must_pair() {
        let mut a = device();
        a.add_owner(1, Amounts::ZERO, None).unwrap();
        a.claim(1, Amounts::new(GIB, 10)).unwrap();
        assert!(matches!(
            a.remove_owner(1),
            Err(AdmissionError::Busy { owner: 1, .. })
        ));
        assert!(matches!(
            a.release(1, Amounts::new(2 * GIB, 0)),
            Err(AdmissionError::ReleaseExceedsHeld {
                resource: Resource::Memory,
                ..
            })
        ));
        a.release(1, Amounts::new(GIB, 10)).unwrap();
        assert_eq!(a.remove_owner(1).unwrap().request, Amounts::ZERO);
        assert_eq!(a.remove_owner(1), Err(AdmissionError::UnknownOwner(1)));
        assert!(matches!(
            a.add_owner(4, Amounts::new(2, 0), Some(Amounts::new(1, 0))),
            Err(AdmissionError::LimitBelowRequest {
                request: 2,
                limit: 1,
                ..
            })
        ));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add {
            id: u64,
            request: (u64, u64),
            limit: Option<(u64, u64)>,
        },
        Remove {
            id: u64,
        },
        Claim {
            id: u64,
            amount: (u64, u64),
        },
        Release {
            id: u64,
            amount: (u64, u64),
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let id = 0u64..6;
        let amount = || (0u64..6_000, 0u64..600);
        prop_oneof![
            (id.clone(), amount(), proptest::option::of(amount()))
                .prop_map(|(id, request, limit)| Op::Add { id, request, limit }),
            id.clone().prop_map(|id| Op::Remove { id }),
            (id.clone(), amount()).prop_map(|(id, amount)| Op::Claim { id, amount }),
            (id, amount()).prop_map(|(id, amount)| Op::Release { id, amount }),
        ]
    }

    /// Runs one random sequence; see the property below.
    fn run_admission(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let cap = Amounts::new(10_000, 1_000);
        let mut a = AdmissionController::new(cap);
        let pair = |(memory, compute): (u64, u64)| Amounts::new(memory, compute);
        for op in ops {
            match op {
                Op::Add { id, request, limit } => {
                    let _ = a.add_owner(id, pair(request), limit.map(pair));
                }
                Op::Remove { id } => {
                    let _ = a.remove_owner(id);
                }
                Op::Claim { id, amount } => {
                    let before = a.clone();
                    if a.claim(id, pair(amount)).is_err() {
                        prop_assert_eq!(a.committed(), before.committed());
                        // A refusal is justified: forcing the claim through would
                        // break a limit or the capacity.
                        if let Some(o) = before.owners.get(&id) {
                            let mut forced = before.clone();
                            let f = forced.owners.get_mut(&id).unwrap();
                            f.held.memory += amount.0;
                            f.held.compute += amount.1;
                            let c = forced.committed();
                            let over_limit = o.held.memory + amount.0
                                > o.limit.memory.min(cap.memory)
                                || o.held.compute + amount.1 > o.limit.compute.min(cap.compute);
                            prop_assert!(
                                over_limit || c.memory > cap.memory || c.compute > cap.compute
                            );
                        }
                    }
                }
                Op::Release { id, amount } => {
                    let _ = a.release(id, pair(amount));
                }
            }
            let committed = a.committed();
            prop_assert!(committed.memory <= cap.memory && committed.compute <= cap.compute);
            for (id, o) in a.owners.clone() {
                prop_assert!(o.held.memory <= o.limit.memory && o.held.compute <= o.limit.compute);
                for r in RESOURCES {
                    // The rest of its reservation is always there for it.
                    let (room, _) = a.headroom(id, r).unwrap();
                    prop_assert!(room >= o.request.get(r).saturating_sub(o.held.get(r)));
                }
            }
        }
        Ok(())
    }

    proptest! {
        /// Whatever is asked, committed memory and compute never exceed capacity,
        /// no owner holds more than its limit, every refusal is justified, and
        /// every owner can always still claim the rest of its request.
        #[test]
        fn admission_never_exceeds_capacity(ops in proptest::collection::vec(op(), 1..80)) {
            run_admission(ops)?;
        }
    }
}

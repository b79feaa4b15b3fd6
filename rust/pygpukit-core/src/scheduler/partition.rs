//! Partitions: named slices of one device with a memory request and limit, a
//! compute share and a priority, admitted as a whole by [`AdmissionController`].

use super::admission::{AdmissionController, AdmissionError, Amounts};
use super::pacing::PacingConfig;
use super::qos::QosClass;
use super::{ComputeUnits, PartitionId, DEFAULT_PARTITION, WHOLE_DEVICE};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// A partition's share of the device's streaming multiprocessors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ComputeShare {
    /// Nothing reserved: runs on whatever is idle.
    None,
    /// A fraction of the device, in (0, 1].
    Fraction(f64),
    /// A number of SMs; needs the device's SM count to be known.
    Sms(u32),
}

impl ComputeShare {
    /// The share in [`ComputeUnits`], rounded up so a share is never silently shrunk.
    pub fn units(self, total_sms: Option<u32>) -> Result<ComputeUnits, PartitionError> {
        match self {
            ComputeShare::None => Ok(0),
            ComputeShare::Fraction(f) if f > 0.0 && f <= 1.0 => {
                Ok((f * WHOLE_DEVICE as f64).ceil() as u64)
            }
            ComputeShare::Fraction(f) => Err(PartitionError::InvalidSpec(format!(
                "a compute fraction must lie in (0, 1], got {f}"
            ))),
            ComputeShare::Sms(n) => match total_sms {
                None => Err(PartitionError::InvalidSpec(format!(
                    "a share of {n} SMs needs the device's SM count; give PartitionConfig a \
                     total_sms or ask for a fraction"
                ))),
                Some(total) if n == 0 || n > total => Err(PartitionError::InvalidSpec(format!(
                    "a share of {n} SMs is outside 1..={total}, the device's SM count"
                ))),
                Some(total) => Ok((u64::from(n) * WHOLE_DEVICE).div_ceil(u64::from(total))),
            },
        }
    }
}

/// What a partition asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionSpec {
    /// Bytes held back for the partition alone.
    pub memory_request: u64,
    /// Bytes the partition may hold at most; `None` for the device's memory.
    pub memory_limit: Option<u64>,
    /// Compute reserved for the partition (a request equal to its limit).
    pub compute: ComputeShare,
    /// Orders tasks and launches within the same QoS class; larger goes first.
    pub priority: i32,
    /// Kernel pacing; `None` for the default of its class.
    pub pacing: Option<PacingConfig>,
}

impl Default for PartitionSpec {
    fn default() -> Self {
        PartitionSpec {
            memory_request: 0,
            memory_limit: None,
            compute: ComputeShare::None,
            priority: 0,
            pacing: None,
        }
    }
}

/// The device a [`PartitionManager`] divides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionConfig {
    pub total_memory: u64,
    /// SM count, when known; needed for [`ComputeShare::Sms`].
    pub total_sms: Option<u32>,
}

/// An admitted partition.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// The id the memory pool charges (see `crate::limits::current_partition`).
    pub id: PartitionId,
    /// The user's key (`"inference"`); unique within a manager.
    pub key: String,
    /// Display name (`"Inference"`).
    pub name: String,
    pub spec: PartitionSpec,
    pub qos: QosClass,
    /// Reserved compute in [`ComputeUnits`].
    pub compute_units: ComputeUnits,
}

impl Partition {
    /// The pacing in force: the partition's own or its class's default.
    pub fn pacing(&self) -> PacingConfig {
        self.spec
            .pacing
            .unwrap_or_else(|| PacingConfig::default_for(self.qos))
    }

    /// SMs to give a green context for this partition, on a device of `total_sms`.
    ///
    /// Rounded down, so the counts of admitted partitions never add up to more
    /// than the device (their units do not); a share given in SMs comes back
    /// exactly, as its units were rounded up. At least one SM.
    pub fn sms(&self, total_sms: u32) -> Option<u32> {
        (self.compute_units > 0)
            .then(|| (u64::from(total_sms) * self.compute_units / WHOLE_DEVICE).max(1) as u32)
    }
}

/// Why a partition could not be created, found or removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionError {
    /// The spec is malformed (a bad fraction, an unknown SM count, ...).
    InvalidSpec(String),
    DuplicateKey(String),
    UnknownPartition(String),
    /// The device cannot admit it, or it cannot be removed yet; the reason names what.
    Admission {
        partition: String,
        source: AdmissionError,
    },
}

impl fmt::Display for PartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionError::InvalidSpec(why) => write!(f, "invalid partition: {why}"),
            PartitionError::DuplicateKey(key) => {
                write!(
                    f,
                    "a partition {key:?} already exists; delete it first or pick another name"
                )
            }
            PartitionError::UnknownPartition(key) => {
                write!(f, "no partition {key:?}; create it first")
            }
            PartitionError::Admission { partition, source } => {
                write!(f, "partition {partition:?}: {source}")
            }
        }
    }
}

impl std::error::Error for PartitionError {}

/// Creates, finds and deletes partitions, and meters what their tasks claim.
///
/// The default partition ([`DEFAULT_PARTITION`], key `"default"`) always exists:
/// BestEffort, no reservation, the device as its limit. Work outside any
/// partition runs there.
#[derive(Clone, Debug)]
pub struct PartitionManager {
    config: PartitionConfig,
    admission: AdmissionController,
    partitions: BTreeMap<PartitionId, Partition>,
    by_key: HashMap<String, PartitionId>,
    next_id: PartitionId,
}

/// Key of the partition that always exists.
pub const DEFAULT_KEY: &str = "default";

impl PartitionManager {
    pub fn new(config: PartitionConfig) -> Self {
        let mut admission =
            AdmissionController::new(Amounts::new(config.total_memory, WHOLE_DEVICE));
        admission
            .add_owner(DEFAULT_PARTITION, Amounts::ZERO, None)
            .expect("an empty device admits a zero request");
        let default = Partition {
            id: DEFAULT_PARTITION,
            key: DEFAULT_KEY.to_owned(),
            name: "Default".to_owned(),
            spec: PartitionSpec::default(),
            qos: QosClass::BestEffort,
            compute_units: 0,
        };
        let mut m = PartitionManager {
            config,
            admission,
            partitions: BTreeMap::new(),
            by_key: HashMap::new(),
            next_id: DEFAULT_PARTITION + 1,
        };
        m.by_key.insert(default.key.clone(), default.id);
        m.partitions.insert(default.id, default);
        m
    }

    pub fn config(&self) -> PartitionConfig {
        self.config
    }

    /// Admits a partition, reserving its memory request and compute share, under
    /// an id of the manager's own numbering.
    pub fn create(
        &mut self,
        key: &str,
        name: &str,
        spec: PartitionSpec,
    ) -> Result<&Partition, PartitionError> {
        self.check_create(key, &spec)?;
        let id = self.next_id;
        self.create_with_id(id, key, name, spec)
    }

    /// Admits a partition under `id`: the id the memory pool already gave it
    /// (`Runtime::create_partition`), so that the pool's accounting and the
    /// scheduler's books name the same partition.
    pub fn create_with_id(
        &mut self,
        id: PartitionId,
        key: &str,
        name: &str,
        spec: PartitionSpec,
    ) -> Result<&Partition, PartitionError> {
        if self.partitions.contains_key(&id) {
            return Err(PartitionError::InvalidSpec(format!(
                "partition id {id} is already in use"
            )));
        }
        let (request, limit, compute_units) = self.check_create(key, &spec)?;
        self.admission
            .add_owner(id, request, Some(limit))
            .map_err(|source| PartitionError::Admission {
                partition: key.to_owned(),
                source,
            })?;
        self.next_id = self.next_id.max(id + 1);
        let qos = QosClass::derive(spec.memory_request, spec.memory_limit, compute_units);
        let p = Partition {
            id,
            key: key.to_owned(),
            name: name.to_owned(),
            spec,
            qos,
            compute_units,
        };
        self.by_key.insert(key.to_owned(), id);
        Ok(self.partitions.entry(id).or_insert(p))
    }

    /// Would a partition `key` with `spec` be admitted now? Changes nothing.
    /// Returns its reservation, its limit and its compute in [`ComputeUnits`].
    pub fn check_create(
        &self,
        key: &str,
        spec: &PartitionSpec,
    ) -> Result<(Amounts, Amounts, ComputeUnits), PartitionError> {
        if key.is_empty() {
            return Err(PartitionError::InvalidSpec(
                "a partition needs a non-empty name".to_owned(),
            ));
        }
        if self.by_key.contains_key(key) {
            return Err(PartitionError::DuplicateKey(key.to_owned()));
        }
        let compute_units = spec.compute.units(self.config.total_sms)?;
        if let Some(p) = spec.pacing {
            p.validate().map_err(PartitionError::InvalidSpec)?;
        }
        let request = Amounts::new(spec.memory_request, compute_units);
        // Compute reserved is also the most the partition may be promised.
        let limit_compute = if compute_units > 0 {
            compute_units
        } else {
            WHOLE_DEVICE
        };
        let limit = Amounts::new(
            spec.memory_limit.unwrap_or(self.config.total_memory),
            limit_compute,
        );
        // Any free id will do for the check: admission does not depend on it.
        self.admission
            .check_owner(self.next_id, request, Some(limit))
            .map_err(|source| PartitionError::Admission {
                partition: key.to_owned(),
                source,
            })?;
        Ok((request, limit, compute_units))
    }

    /// Deletes a partition that holds nothing, giving its reservation back.
    pub fn delete(&mut self, key: &str) -> Result<Partition, PartitionError> {
        let id = self.id_of(key)?;
        if id == DEFAULT_PARTITION {
            return Err(PartitionError::InvalidSpec(
                "the default partition cannot be deleted".to_owned(),
            ));
        }
        self.admission
            .remove_owner(id)
            .map_err(|source| PartitionError::Admission {
                partition: key.to_owned(),
                source,
            })?;
        self.by_key.remove(key);
        Ok(self
            .partitions
            .remove(&id)
            .expect("by_key and partitions agree"))
    }

    pub fn get(&self, key: &str) -> Option<&Partition> {
        self.by_key.get(key).and_then(|id| self.partitions.get(id))
    }

    pub fn get_by_id(&self, id: PartitionId) -> Option<&Partition> {
        self.partitions.get(&id)
    }

    pub fn id_of(&self, key: &str) -> Result<PartitionId, PartitionError> {
        self.by_key
            .get(key)
            .copied()
            .ok_or_else(|| PartitionError::UnknownPartition(key.to_owned()))
    }

    /// Every partition, the default first, then in creation order.
    pub fn list(&self) -> impl Iterator<Item = &Partition> {
        self.partitions.values()
    }

    /// What the partition's tasks hold now.
    pub fn held(&self, id: PartitionId) -> Amounts {
        self.admission.owner(id).map(|o| o.held).unwrap_or_default()
    }

    /// Sum of all reservations.
    pub fn reserved(&self) -> Amounts {
        self.admission.reserved()
    }

    /// What the device is committed to (reservations, or holdings above them).
    pub fn committed(&self) -> Amounts {
        self.admission.committed()
    }

    /// Would `claim` fit in partition `id` if the device were otherwise idle?
    /// A claim that fails this can never be admitted, so it is refused at once
    /// instead of waiting forever.
    pub fn check_ever_fits(&self, id: PartitionId, claim: Amounts) -> Result<(), PartitionError> {
        let p = self
            .partitions
            .get(&id)
            .ok_or_else(|| PartitionError::UnknownPartition(format!("#{id}")))?;
        let mut idle = self.admission.clone();
        let held = self.held(id);
        idle.release(id, held)
            .expect("an owner can always release what it holds");
        for other in self.partitions.keys().filter(|o| **o != id) {
            let h = self.held(*other);
            idle.release(*other, h)
                .expect("an owner can always release what it holds");
        }
        idle.check_claim(id, claim)
            .map_err(|source| PartitionError::Admission {
                partition: p.key.clone(),
                source,
            })
    }

    /// Claims resources for a task of partition `id` if they are free now.
    pub fn claim(&mut self, id: PartitionId, claim: Amounts) -> Result<(), PartitionError> {
        let key = self.key_of(id)?;
        self.admission
            .claim(id, claim)
            .map_err(|source| PartitionError::Admission {
                partition: key,
                source,
            })
    }

    /// Gives back what a task of partition `id` claimed.
    pub fn release(&mut self, id: PartitionId, claim: Amounts) -> Result<(), PartitionError> {
        let key = self.key_of(id)?;
        self.admission
            .release(id, claim)
            .map_err(|source| PartitionError::Admission {
                partition: key,
                source,
            })
    }

    fn key_of(&self, id: PartitionId) -> Result<String, PartitionError> {
        self.partitions
            .get(&id)
            .map(|p| p.key.clone())
            .ok_or_else(|| PartitionError::UnknownPartition(format!("#{id}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::admission::{Bound, Resource};
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

    fn manager() -> PartitionManager {
        PartitionManager::new(PartitionConfig {
            total_memory: 8 * GIB,
            total_sms: Some(132),
        })
    }

    fn spec(request: u64, limit: Option<u64>, compute: ComputeShare) -> PartitionSpec {
        PartitionSpec {
            memory_request: request,
            memory_limit: limit,
            compute,
            ..PartitionSpec::default()
        }
    }

    #[test]
    fn create_get_delete_and_classes() {
        let mut m = manager();
        let p = m
            .create(
                "inference",
                "Inference",
                spec(4 * GIB, Some(4 * GIB), ComputeShare::Fraction(0.5)),
            )
            .unwrap();
        assert_eq!(
            (p.qos, p.compute_units, p.sms(132)),
            (QosClass::Guaranteed, 500_000, Some(66))
        );
        let p = m
            .create(
                "asr",
                "Speech",
                spec(GIB, Some(2 * GIB), ComputeShare::Sms(33)),
            )
            .unwrap();
        assert_eq!((p.qos, p.compute_units), (QosClass::Burstable, 250_000));
        assert_eq!(
            m.create("batch", "Batch", PartitionSpec::default())
                .unwrap()
                .qos,
            QosClass::BestEffort
        );
        assert_eq!(m.reserved(), Amounts::new(5 * GIB, 750_000));
        assert_eq!(m.get("asr").unwrap().name, "Speech");
        assert_eq!(
            m.list().map(|p| p.key.as_str()).collect::<Vec<_>>(),
            ["default", "inference", "asr", "batch"]
        );
        assert_eq!(m.delete("asr").unwrap().key, "asr");
        assert!(m.get("asr").is_none());
        assert_eq!(m.reserved(), Amounts::new(4 * GIB, 500_000));
        assert_eq!(
            m.delete("asr"),
            Err(PartitionError::UnknownPartition("asr".into()))
        );
        assert!(matches!(
            m.delete(DEFAULT_KEY),
            Err(PartitionError::InvalidSpec(_))
        ));
        assert!(matches!(
            m.create("inference", "", PartitionSpec::default()),
            Err(PartitionError::DuplicateKey(_))
        ));
    }

    #[test]
    fn ids_given_by_the_memory_pool_are_kept() {
        let mut m = manager();
        assert_eq!(
            m.create_with_id(7, "pooled", "P", PartitionSpec::default())
                .unwrap()
                .id,
            7
        );
        assert!(matches!(
            m.create_with_id(7, "again", "A", PartitionSpec::default()),
            Err(PartitionError::InvalidSpec(_))
        ));
        assert_eq!(
            m.create("next", "N", PartitionSpec::default()).unwrap().id,
            8
        );
        let too_big = spec(9 * GIB, None, ComputeShare::None);
        assert!(m.check_create("big", &too_big).is_err());
        assert!(m.get("big").is_none());
    }

    #[test]
    fn refusals_say_what_is_short() {
        let mut m = manager();
        m.create("a", "A", spec(6 * GIB, None, ComputeShare::Fraction(0.75)))
            .unwrap();
        let err = m
            .create("b", "B", spec(3 * GIB, None, ComputeShare::None))
            .unwrap_err();
        let PartitionError::Admission { source, .. } = &err else {
            panic!("expected an admission refusal, got {err:?}");
        };
        assert!(matches!(
            source,
            AdmissionError::Short { resource: Resource::Memory, available, .. } if *available == 2 * GIB
        ));
        assert!(
            err.to_string().starts_with("partition \"b\": memory short"),
            "{err}"
        );
        let err = m
            .create("c", "C", spec(0, None, ComputeShare::Fraction(0.5)))
            .unwrap_err();
        assert!(err.to_string().contains("compute short"), "{err}");
        assert!(matches!(
            m.create("d", "D", spec(0, None, ComputeShare::Sms(200))),
            Err(PartitionError::InvalidSpec(_))
        ));
        assert!(matches!(
            m.create("d", "D", spec(0, None, ComputeShare::Fraction(1.5))),
            Err(PartitionError::InvalidSpec(_))
        ));
        let no_sms = PartitionManager::new(PartitionConfig {
            total_memory: GIB,
            total_sms: None,
        });
        assert!(no_sms
            .clone()
            .create("e", "E", spec(0, None, ComputeShare::Sms(4)))
            .is_err());
    }

    #[test]
    fn tasks_claim_within_limits_and_block_deletion() {
        let mut m = manager();
        let id = m
            .create("burst", "B", spec(GIB, Some(2 * GIB), ComputeShare::None))
            .unwrap()
            .id;
        m.claim(id, Amounts::new(2 * GIB, 0)).unwrap();
        let err = m.claim(id, Amounts::new(1, 0)).unwrap_err();
        assert!(matches!(
            err,
            PartitionError::Admission {
                source: AdmissionError::Short {
                    bound: Bound::OwnerLimit,
                    ..
                },
                ..
            }
        ));
        assert!(matches!(
            m.delete("burst"),
            Err(PartitionError::Admission {
                source: AdmissionError::Busy { .. },
                ..
            })
        ));
        assert!(m.check_ever_fits(id, Amounts::new(2 * GIB, 0)).is_ok());
        assert!(m.check_ever_fits(id, Amounts::new(3 * GIB, 0)).is_err());
        m.release(id, Amounts::new(2 * GIB, 0)).unwrap();
        m.delete("burst").unwrap();
    }

    type PartitionOp = (u8, usize, u64, u64, u32);

    /// Runs one random sequence; see the property below.
    fn run_partitions(ops: Vec<PartitionOp>) -> Result<(), TestCaseError> {
        let total = 10_000;
        let config = PartitionConfig {
            total_memory: total,
            total_sms: Some(64),
        };
        let mut m = PartitionManager::new(config);
        let keys = ["p0", "p1", "p2", "p3", "p4"];
        let mut claims: Vec<(PartitionId, Amounts)> = Vec::new();
        for (kind, k, a, b, sms) in ops {
            match kind {
                0 => {
                    let compute = match sms % 3 {
                        0 => ComputeShare::None,
                        1 => ComputeShare::Sms(sms % 64 + 1),
                        _ => ComputeShare::Fraction(f64::from(sms % 64 + 1) / 67.0),
                    };
                    let limit = if b % 2 == 0 { None } else { Some(a.max(b)) };
                    let _ = m.create(keys[k], keys[k], spec(a.min(b), limit, compute));
                }
                1 => {
                    if let Ok(gone) = m.delete(keys[k]) {
                        // Deletion succeeds only when the partition holds nothing, so any
                        // claims the model still lists for it were empty; drop them.
                        prop_assert!(claims
                            .iter()
                            .filter(|(id, _)| *id == gone.id)
                            .all(|(_, c)| c.memory == 0 && c.compute == 0));
                        claims.retain(|(id, _)| *id != gone.id);
                    }
                }
                2 => {
                    if let Some(id) = m.get(keys[k]).map(|p| p.id) {
                        let c = Amounts::new(a / 4, 0);
                        if m.claim(id, c).is_ok() {
                            claims.push((id, c));
                        }
                    }
                }
                _ => {
                    if !claims.is_empty() {
                        let (id, c) = claims.swap_remove(k % claims.len());
                        m.release(id, c).unwrap();
                    }
                }
            }
            let committed = m.committed();
            prop_assert!(
                committed.memory <= total,
                "memory {} > {}",
                committed.memory,
                total
            );
            prop_assert!(committed.compute <= WHOLE_DEVICE);
            // The SM counts green contexts get fit the device together, and a
            // share asked in SMs gets exactly that many.
            let sms: u32 = m.list().filter_map(|p| p.sms(64)).sum();
            prop_assert!(sms <= 64, "{} SMs handed out of 64", sms);
            for p in m.list() {
                if let ComputeShare::Sms(n) = p.spec.compute {
                    prop_assert_eq!(p.sms(64), Some(n));
                }
                let held = m.held(p.id);
                prop_assert!(held.memory <= p.spec.memory_limit.unwrap_or(total));
                // The rest of its memory request is still there for it alone.
                let rest = p.spec.memory_request.saturating_sub(held.memory);
                prop_assert!(m.admission.check_claim(p.id, Amounts::new(rest, 0)).is_ok());
            }
        }
        Ok(())
    }

    proptest! {
        /// Random create/delete/claim/release sequences never commit more memory or
        /// compute than the device has, never let a partition claim past its limit,
        /// and never take the unused part of a partition's request from it.
        #[test]
        fn partitions_never_overcommit_the_device(
            ops in proptest::collection::vec((0u8..4, 0usize..5, 0u64..5_000, 0u64..5_000, 0u32..80), 1..60)
        ) {
            run_partitions(ops)?;
        }
    }
}

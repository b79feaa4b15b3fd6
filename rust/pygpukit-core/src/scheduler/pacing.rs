//! Kernel pacing: a token bucket over measured kernel time per partition, and a
//! pacer that holds lower QoS classes back while higher ones have work pending.
//!
//! Pure logic: every call takes the time (`now`, nanoseconds of a monotonic
//! clock) from the caller, so tests drive a fake clock and the dispatch
//! controller passes its own. Tokens are kernel time: a partition with rate 0.25
//! may keep the device busy a quarter of the time, plus a burst after idling.

use super::qos::QosClass;
use super::PartitionId;
use std::collections::HashMap;

/// Nanoseconds of a monotonic clock, or a duration in nanoseconds.
pub type Nanos = u64;

/// Token units per nanosecond of kernel time at rate 1: integer tokens keep the
/// rate bound exact (no rounding drift over long runs).
const SCALE: u128 = 1_000_000;

/// How one partition's launches are paced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacingConfig {
    /// Share of device time its kernels may use, in (0, 1].
    pub rate: f64,
    /// Kernel time it may spend at once after idling: the bucket's capacity.
    pub burst_ns: Nanos,
    /// Hold its launches while a partition of a higher class has work pending.
    pub yield_to_higher: bool,
}

impl PacingConfig {
    /// The default of a class: unpaced, with lower classes yielding to higher ones.
    pub fn default_for(class: QosClass) -> Self {
        PacingConfig {
            rate: 1.0,
            burst_ns: 20_000_000,
            yield_to_higher: class != QosClass::Guaranteed,
        }
    }

    /// Checks the rate and burst; the message says what to change.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rate > 0.0 && self.rate <= 1.0) {
            return Err(format!(
                "a pacing rate is a share of device time in (0, 1], got {}",
                self.rate
            ));
        }
        if self.burst_ns == 0 {
            return Err(
                "a pacing burst must be positive (it is the most kernel time spent at once)"
                    .to_owned(),
            );
        }
        Ok(())
    }

    fn rate_units(&self) -> u128 {
        (self.rate * SCALE as f64).round().max(1.0) as u128
    }
}

/// A token bucket over kernel time, full at creation.
///
/// A kernel is granted its *estimated* time up front (at most the burst: a longer
/// kernel is granted the whole burst); when its *measured* time comes back, any
/// overrun is charged as debt, which delays later grants. Underruns are not
/// refunded, so over any window the grants never exceed `burst + rate * window`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: u128,
    capacity: i128,
    tokens: i128,
    last: Nanos,
}

impl TokenBucket {
    pub fn new(config: PacingConfig, now: Nanos) -> Self {
        let capacity = (u128::from(config.burst_ns) * SCALE) as i128;
        TokenBucket {
            rate: config.rate_units(),
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Nanos) {
        if now > self.last {
            let accrued = (u128::from(now - self.last) * self.rate) as i128;
            self.tokens = (self.tokens + accrued).min(self.capacity);
            self.last = now;
        }
    }

    /// Grants `estimate_ns` of kernel time (capped at the burst) if the tokens are
    /// there; otherwise says when they will be.
    pub fn try_acquire(&mut self, estimate_ns: Nanos, now: Nanos) -> Result<Nanos, Nanos> {
        self.refill(now);
        let cost_ns = estimate_ns.min((self.capacity as u128 / SCALE) as u64);
        let cost = (u128::from(cost_ns) * SCALE) as i128;
        if self.tokens >= cost {
            self.tokens -= cost;
            Ok(cost_ns)
        } else {
            let missing = (cost - self.tokens) as u128;
            Err(now + missing.div_ceil(self.rate) as Nanos)
        }
    }

    /// Charges what a granted kernel ran beyond the time it was granted.
    pub fn settle(&mut self, granted_ns: Nanos, measured_ns: Nanos, now: Nanos) {
        self.refill(now);
        let overrun = measured_ns.saturating_sub(granted_ns);
        self.tokens -= (u128::from(overrun) * SCALE) as i128;
    }

    /// Kernel time that could be granted now, in nanoseconds (negative while in debt).
    pub fn available_ns(&mut self, now: Nanos) -> i64 {
        self.refill(now);
        (self.tokens / SCALE as i128) as i64
    }
}

/// Why a launch must wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A partition of this higher class has work pending; retry when it completes.
    HigherClassPending(QosClass),
    /// The partition spent its share; retry at `ready_at`.
    RateLimited { ready_at: Nanos },
}

/// Proof of a granted launch, handed back at completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub partition: PartitionId,
    pub granted_ns: Nanos,
}

/// Why the pacer could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PacingError {
    /// The partition was never registered with the pacer (or was removed).
    UnknownPartition(PartitionId),
    /// A completion or withdrawal without pending work: the caller's calls do not pair up.
    NothingPending(PartitionId),
    InvalidConfig(String),
}

impl std::fmt::Display for PacingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PacingError::UnknownPartition(id) => {
                write!(f, "partition {id} is not registered with the pacer")
            }
            PacingError::NothingPending(id) => {
                write!(
                    f,
                    "partition {id} has no pending work to complete or withdraw: enqueue and \
                     complete must pair up"
                )
            }
            PacingError::InvalidConfig(why) => write!(f, "invalid pacing: {why}"),
        }
    }
}

impl std::error::Error for PacingError {}

#[derive(Clone, Debug)]
struct Lane {
    class: QosClass,
    config: PacingConfig,
    bucket: TokenBucket,
    /// Launches queued or in flight.
    pending: u32,
    /// Moving average of measured kernel time: what the next launch is granted.
    estimate_ns: Nanos,
}

/// Paces the launches of every partition on one device.
///
/// The dispatch controller calls [`Pacer::enqueue`] when a launch arrives,
/// [`Pacer::try_launch`] before issuing it (retrying after a [`Hold`]) and
/// [`Pacer::complete`] with the kernel's measured time when its event completes.
#[derive(Clone, Debug, Default)]
pub struct Pacer {
    lanes: HashMap<PartitionId, Lane>,
}

impl Pacer {
    /// Adds or reconfigures a partition; reconfiguring refills its bucket.
    pub fn register(
        &mut self,
        id: PartitionId,
        class: QosClass,
        config: PacingConfig,
        now: Nanos,
    ) -> Result<(), PacingError> {
        config.validate().map_err(PacingError::InvalidConfig)?;
        let pending = self.lanes.get(&id).map_or(0, |l| l.pending);
        let estimate_ns = self.lanes.get(&id).map_or(0, |l| l.estimate_ns);
        self.lanes.insert(
            id,
            Lane {
                class,
                config,
                bucket: TokenBucket::new(config, now),
                pending,
                estimate_ns,
            },
        );
        Ok(())
    }

    pub fn unregister(&mut self, id: PartitionId) {
        self.lanes.remove(&id);
    }

    /// A launch of partition `id` is waiting: it now counts as pending work.
    pub fn enqueue(&mut self, id: PartitionId) -> Result<(), PacingError> {
        self.lane(id)?.pending += 1;
        Ok(())
    }

    /// A queued launch was withdrawn without running.
    pub fn withdraw(&mut self, id: PartitionId) -> Result<(), PacingError> {
        let lane = self.lane(id)?;
        lane.pending = lane
            .pending
            .checked_sub(1)
            .ok_or(PacingError::NothingPending(id))?;
        Ok(())
    }

    /// May partition `id` issue its next launch now?
    pub fn try_launch(
        &mut self,
        id: PartitionId,
        now: Nanos,
    ) -> Result<Result<Ticket, Hold>, PacingError> {
        let lane = self
            .lanes
            .get(&id)
            .ok_or(PacingError::UnknownPartition(id))?;
        if lane.config.yield_to_higher {
            let busy_higher = self
                .lanes
                .values()
                .filter(|l| l.class > lane.class && l.pending > 0)
                .map(|l| l.class)
                .max();
            if let Some(class) = busy_higher {
                return Ok(Err(Hold::HigherClassPending(class)));
            }
        }
        let lane = self.lane(id)?;
        if lane.config.rate >= 1.0 {
            // The whole device: nothing to ration; only yielding can hold it.
            return Ok(Ok(Ticket {
                partition: id,
                granted_ns: 0,
            }));
        }
        Ok(match lane.bucket.try_acquire(lane.estimate_ns, now) {
            Ok(granted_ns) => Ok(Ticket {
                partition: id,
                granted_ns,
            }),
            Err(ready_at) => Err(Hold::RateLimited { ready_at }),
        })
    }

    /// A granted launch finished after `measured_ns` of kernel time.
    pub fn complete(
        &mut self,
        ticket: Ticket,
        measured_ns: Nanos,
        now: Nanos,
    ) -> Result<(), PacingError> {
        let lane = self.lane(ticket.partition)?;
        lane.pending = lane
            .pending
            .checked_sub(1)
            .ok_or(PacingError::NothingPending(ticket.partition))?;
        if lane.config.rate < 1.0 {
            lane.bucket.settle(ticket.granted_ns, measured_ns, now);
        }
        lane.estimate_ns = if lane.estimate_ns == 0 {
            measured_ns
        } else {
            (3 * lane.estimate_ns + measured_ns) / 4
        };
        Ok(())
    }

    /// Pending launches of partition `id`.
    pub fn pending(&self, id: PartitionId) -> Option<u32> {
        self.lanes.get(&id).map(|l| l.pending)
    }

    fn lane(&mut self, id: PartitionId) -> Result<&mut Lane, PacingError> {
        self.lanes
            .get_mut(&id)
            .ok_or(PacingError::UnknownPartition(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    fn config(rate: f64, burst_ns: Nanos) -> PacingConfig {
        PacingConfig {
            rate,
            burst_ns,
            yield_to_higher: true,
        }
    }

    #[test]
    fn bucket_grants_its_rate_and_says_when_to_retry() {
        let mut b = TokenBucket::new(config(0.25, 4 * MS), 0);
        assert_eq!(b.try_acquire(3 * MS, 0), Ok(3 * MS));
        // 1 ms left; 2 ms needs 1 ms more, which takes 4 ms at a quarter rate.
        assert_eq!(b.try_acquire(2 * MS, 0), Err(4 * MS));
        assert_eq!(b.try_acquire(2 * MS, 4 * MS), Ok(2 * MS));
        // A kernel longer than the burst is granted the burst once full...
        assert_eq!(b.try_acquire(10 * MS, 100 * MS), Ok(4 * MS));
        // ...and its overrun, once measured, is debt that delays the next grant.
        b.settle(4 * MS, 10 * MS, 100 * MS);
        assert_eq!(b.available_ns(100 * MS), -6 * MS as i64);
        assert_eq!(b.try_acquire(0, 100 * MS), Err(124 * MS));
        assert!(config(0.0, MS).validate().is_err() && config(1.5, MS).validate().is_err());
        assert!(config(0.5, 0).validate().is_err() && config(0.5, MS).validate().is_ok());
    }

    #[test]
    fn lower_classes_yield_while_higher_have_work_pending() {
        let mut p = Pacer::default();
        p.register(
            1,
            QosClass::Guaranteed,
            PacingConfig::default_for(QosClass::Guaranteed),
            0,
        )
        .unwrap();
        p.register(
            2,
            QosClass::BestEffort,
            PacingConfig::default_for(QosClass::BestEffort),
            0,
        )
        .unwrap();
        let mut stubborn = PacingConfig::default_for(QosClass::Burstable);
        stubborn.yield_to_higher = false;
        p.register(3, QosClass::Burstable, stubborn, 0).unwrap();
        p.enqueue(1).unwrap();
        p.enqueue(2).unwrap();
        p.enqueue(3).unwrap();
        assert_eq!(
            p.try_launch(2, 0).unwrap(),
            Err(Hold::HigherClassPending(QosClass::Guaranteed))
        );
        let burstable = p
            .try_launch(3, 0)
            .unwrap()
            .expect("a partition that does not yield is paced only by rate");
        let ticket = p.try_launch(1, 0).unwrap().unwrap();
        p.complete(ticket, 2 * MS, 2 * MS).unwrap();
        assert_eq!(
            p.try_launch(2, 2 * MS).unwrap(),
            Err(Hold::HigherClassPending(QosClass::Burstable))
        );
        p.complete(burstable, MS, 2 * MS).unwrap();
        let ticket = p.try_launch(2, 2 * MS).unwrap().unwrap();
        assert_eq!(
            ticket.granted_ns, 0,
            "no measurement yet: nothing to estimate from"
        );
        p.complete(ticket, 5 * MS, 7 * MS).unwrap();
        assert_eq!(p.pending(2), Some(0));
        assert_eq!(
            p.complete(ticket, 1, 8 * MS),
            Err(PacingError::NothingPending(2))
        );
        assert_eq!(p.enqueue(9), Err(PacingError::UnknownPartition(9)));
        p.unregister(2);
        assert_eq!(p.pending(2), None);
    }

    /// Runs one random sequence; see the property below.
    fn run_bucket(
        rate_ppm: u64,
        burst_ns: Nanos,
        steps: Vec<(Nanos, Nanos, u64, Nanos)>,
    ) -> Result<(), TestCaseError> {
        let cfg = PacingConfig {
            rate: rate_ppm as f64 / 1e6,
            burst_ns,
            yield_to_higher: false,
        };
        let rate = cfg.rate_units();
        let mut b = TokenBucket::new(cfg, 0);
        let mut now = 0;
        let mut grants: Vec<(Nanos, Nanos)> = Vec::new();
        for (dt, estimate, settle, measured) in steps {
            now += dt;
            if let Ok(granted) = b.try_acquire(estimate, now) {
                prop_assert!(granted <= estimate.min(burst_ns));
                grants.push((now, granted));
                if settle == 0 {
                    b.settle(granted, measured, now);
                }
            }
        }
        for (i, first) in grants.iter().enumerate() {
            let mut total: u128 = 0;
            for g in &grants[i..] {
                total += u128::from(g.1) * SCALE;
                let window = u128::from(g.0 - first.0);
                let allowed = u128::from(burst_ns) * SCALE + rate * window;
                prop_assert!(total <= allowed, "granted {} units in {} ns", total, window);
            }
        }
        Ok(())
    }

    proptest! {
        /// Over every window of a random run, the grants never add up to more than
        /// the burst plus the rate times the window, overruns charged or not.
        #[test]
        fn bucket_never_grants_more_than_its_rate(
            rate_ppm in 1u64..=1_000_000,
            burst_ns in 1u64..10_000,
            steps in proptest::collection::vec((0u64..5_000, 0u64..12_000, 0u64..3, 0u64..20_000), 1..120),
        ) {
            run_bucket(rate_ppm, burst_ns, steps)?;
        }
    }
}

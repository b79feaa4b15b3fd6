//! `QosPolicyEvaluator`: admission of individual tasks by QoS class against a
//! device's memory and bandwidth, the product brief's task-level API.
//!
//! Guaranteed tasks reserve their memory (request equals limit) and bandwidth;
//! Burstable tasks reserve their request and may use up to their limit from
//! what is unreserved; BestEffort tasks reserve nothing and are always admitted
//! (they run on what is left and are reclaimed first). The same
//! [`AdmissionController`] as partitions keeps the sum of reservations within
//! the device.

use super::admission::{AdmissionController, Amounts, OwnerId};
use super::qos::QosClass;
use super::{format_amount, ComputeUnits, WHOLE_DEVICE};
use std::collections::HashMap;

/// A task as the evaluator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct QosTaskMeta {
    pub id: String,
    pub name: String,
    pub class: QosClass,
    pub memory_request: u64,
    /// `None`: up to the device.
    pub memory_limit: Option<u64>,
    /// Share of the evaluator's total bandwidth to reserve.
    pub bandwidth: f64,
}

impl QosTaskMeta {
    /// A task that reserves `memory` bytes (request = limit) and `bandwidth`.
    pub fn guaranteed(id: &str, name: &str, memory: u64, bandwidth: f64) -> Self {
        Self::new(
            id,
            name,
            QosClass::Guaranteed,
            memory,
            Some(memory),
            bandwidth,
        )
    }

    /// A task that reserves `memory_request` and may grow to `memory_limit`.
    pub fn burstable(
        id: &str,
        name: &str,
        memory_request: u64,
        memory_limit: Option<u64>,
        bandwidth: f64,
    ) -> Self {
        Self::new(
            id,
            name,
            QosClass::Burstable,
            memory_request,
            memory_limit,
            bandwidth,
        )
    }

    /// A task that reserves nothing.
    pub fn best_effort(id: &str, name: &str) -> Self {
        Self::new(id, name, QosClass::BestEffort, 0, None, 0.0)
    }

    fn new(
        id: &str,
        name: &str,
        class: QosClass,
        request: u64,
        limit: Option<u64>,
        bandwidth: f64,
    ) -> Self {
        QosTaskMeta {
            id: id.to_owned(),
            name: name.to_owned(),
            class,
            memory_request: request,
            memory_limit: limit,
            bandwidth,
        }
    }
}

/// The evaluator's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct QosDecision {
    pub admitted: bool,
    pub class: QosClass,
    pub reserved_memory: u64,
    pub reserved_bandwidth: f64,
    /// Why, in words: what was reserved, or what is short and what to do.
    pub reason: String,
}

/// Evaluates and admits tasks against a device's memory and bandwidth.
#[derive(Clone, Debug)]
pub struct QosPolicyEvaluator {
    admission: AdmissionController,
    total_bandwidth: f64,
    admitted: HashMap<String, OwnerId>,
    next_owner: OwnerId,
}

impl QosPolicyEvaluator {
    /// `total_bandwidth` is in whatever unit the tasks' bandwidth uses (1.0 = the device).
    pub fn new(total_memory: u64, total_bandwidth: f64) -> Result<Self, String> {
        if !(total_bandwidth > 0.0 && total_bandwidth.is_finite()) {
            return Err(format!(
                "total_bandwidth must be a positive number, got {total_bandwidth}"
            ));
        }
        Ok(QosPolicyEvaluator {
            admission: AdmissionController::new(Amounts::new(total_memory, WHOLE_DEVICE)),
            total_bandwidth,
            admitted: HashMap::new(),
            next_owner: 1,
        })
    }

    /// Would `task` be admitted now? Reserves nothing.
    pub fn evaluate(&self, task: &QosTaskMeta) -> QosDecision {
        match self.plan(task) {
            Ok((request, limit)) => {
                match self
                    .admission
                    .check_owner(self.next_owner, request, Some(limit))
                {
                    Ok(()) => self.admitted_decision(task, request),
                    Err(e) => self.refused(task, e.to_string()),
                }
            }
            Err(why) => self.refused(task, why),
        }
    }

    /// Evaluates `task` and, if admitted, reserves its resources until [`Self::release`].
    pub fn admit(&mut self, task: &QosTaskMeta) -> QosDecision {
        let decision = self.evaluate(task);
        if decision.admitted {
            let (request, limit) = self.plan(task).expect("evaluate accepted the plan");
            let owner = self.next_owner;
            self.admission
                .add_owner(owner, request, Some(limit))
                .expect("evaluate checked the same reservation");
            self.next_owner += 1;
            self.admitted.insert(task.id.clone(), owner);
        }
        decision
    }

    /// Gives back an admitted task's reservation.
    pub fn release(&mut self, task_id: &str) -> Result<(), String> {
        let owner = self.admitted.remove(task_id).ok_or_else(|| {
            format!("task {task_id:?} is not admitted (never admitted, or already released)")
        })?;
        self.admission
            .remove_owner(owner)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Unreserved memory in bytes.
    pub fn available_memory(&self) -> u64 {
        self.admission.capacity().memory - self.admission.committed().memory
    }

    /// Unreserved bandwidth, in the unit of `total_bandwidth`.
    pub fn available_bandwidth(&self) -> f64 {
        let free = WHOLE_DEVICE - self.admission.committed().compute;
        free as f64 / WHOLE_DEVICE as f64 * self.total_bandwidth
    }

    /// Ids of the admitted tasks.
    pub fn admitted(&self) -> impl Iterator<Item = &str> {
        self.admitted.keys().map(String::as_str)
    }

    /// The reservation and limit `task` asks for, or why it is malformed.
    fn plan(&self, task: &QosTaskMeta) -> Result<(Amounts, Amounts), String> {
        if self.admitted.contains_key(&task.id) {
            return Err(format!(
                "a task {:?} is already admitted; release it first or use another id",
                task.id
            ));
        }
        if !(task.bandwidth >= 0.0 && task.bandwidth <= self.total_bandwidth) {
            return Err(format!(
                "bandwidth {} is outside 0..={}",
                task.bandwidth, self.total_bandwidth
            ));
        }
        let bandwidth: ComputeUnits =
            (task.bandwidth / self.total_bandwidth * WHOLE_DEVICE as f64).ceil() as u64;
        let capacity = self.admission.capacity();
        let limit = Amounts::new(
            task.memory_limit.unwrap_or(capacity.memory),
            capacity.compute,
        );
        match task.class {
            QosClass::Guaranteed if task.memory_request == 0 => {
                Err("a guaranteed task must reserve some memory".to_owned())
            }
            QosClass::BestEffort => Ok((Amounts::ZERO, limit)),
            _ => Ok((Amounts::new(task.memory_request, bandwidth), limit)),
        }
    }

    fn admitted_decision(&self, task: &QosTaskMeta, request: Amounts) -> QosDecision {
        let reason = if task.class == QosClass::BestEffort {
            "best effort: admitted without a reservation; it runs on unreserved capacity and \
             is reclaimed first"
                .to_owned()
        } else {
            format!(
                "{}: reserves {} of memory and {} of bandwidth; {} of memory stays unreserved",
                task.class,
                format_amount(super::admission::Resource::Memory, request.memory),
                format_amount(super::admission::Resource::Compute, request.compute),
                format_amount(
                    super::admission::Resource::Memory,
                    self.available_memory() - request.memory
                ),
            )
        };
        QosDecision {
            admitted: true,
            class: task.class,
            reserved_memory: request.memory,
            reserved_bandwidth: request.compute as f64 / WHOLE_DEVICE as f64 * self.total_bandwidth,
            reason,
        }
    }

    fn refused(&self, task: &QosTaskMeta, why: String) -> QosDecision {
        QosDecision {
            admitted: false,
            class: task.class,
            reserved_memory: 0,
            reserved_bandwidth: 0.0,
            reason: format!("{} task {:?} refused: {why}", task.class, task.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn guaranteed_tasks_reserve_until_released() {
        let mut e = QosPolicyEvaluator::new(1024 * MIB, 1.0).unwrap();
        let a = QosTaskMeta::guaranteed("task-1", "Critical", 768 * MIB, 0.5);
        let d = e.admit(&a);
        assert!(d.admitted, "{}", d.reason);
        assert_eq!((d.reserved_memory, d.reserved_bandwidth), (768 * MIB, 0.5));
        assert!(
            d.reason.contains("768.0 MiB") && d.reason.contains("256.0 MiB of memory stays"),
            "{}",
            d.reason
        );
        let b = QosTaskMeta::guaranteed("task-2", "Also critical", 512 * MIB, 0.0);
        let d = e.evaluate(&b);
        assert!(!d.admitted);
        assert!(
            d.reason.contains("memory short") && d.reason.contains("256.0 MiB"),
            "{}",
            d.reason
        );
        assert!(e.admit(&QosTaskMeta::best_effort("be", "Batch")).admitted);
        assert!(
            !e.evaluate(&QosTaskMeta::burstable("task-3", "", 0, None, 0.6))
                .admitted
        );
        assert!(!e.evaluate(&a).admitted, "the same id twice");
        e.release("task-1").unwrap();
        assert!(e.admit(&b).admitted);
        assert!(e.release("task-1").is_err());
        assert_eq!(e.available_memory(), 512 * MIB);
        assert!((e.available_bandwidth() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn malformed_tasks_are_refused_with_why() {
        let e = QosPolicyEvaluator::new(MIB, 2.0).unwrap();
        assert!(e
            .evaluate(&QosTaskMeta::guaranteed("g", "", 0, 0.0))
            .reason
            .contains("must reserve some memory"));
        assert!(e
            .evaluate(&QosTaskMeta::burstable("b", "", 10, Some(5), 0.0))
            .reason
            .contains("above the memory limit"));
        assert!(e
            .evaluate(&QosTaskMeta::burstable("b", "", 10, None, 2.5))
            .reason
            .contains("outside 0..=2"));
        assert!(QosPolicyEvaluator::new(MIB, 0.0).is_err());
    }
}

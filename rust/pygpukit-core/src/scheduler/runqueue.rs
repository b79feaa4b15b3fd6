//! The run queue: tasks submitted to partitions, admitted when their memory
//! fits, handed out highest class and priority first, and recorded through the
//! task state machine until they end.
//!
//! Workers (Python threads in simulation, the GPU runner later) ask
//! [`Scheduler::dispatch`] for the next task, then report [`Scheduler::start`]
//! and [`Scheduler::finish`]. Time comes from the caller.

use super::admission::Amounts;
use super::pacing::Nanos;
use super::partition::{Partition, PartitionError, PartitionManager};
use super::qos::QosClass;
use super::task::{Task, TaskEvent, TaskId, TaskState, TransitionError};
use super::PartitionId;
use std::collections::BTreeMap;
use std::fmt;

/// Why the scheduler refused a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedulerError {
    /// The partition layer refused (unknown partition, or the task can never fit).
    Partition(PartitionError),
    UnknownTask(TaskId),
    /// A partition cannot be deleted while `task` is unfinished.
    PartitionBusy {
        partition: String,
        task: TaskId,
        state: TaskState,
    },
    Transition {
        task: TaskId,
        source: TransitionError,
    },
}

impl fmt::Display for SchedulerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedulerError::Partition(e) => e.fmt(f),
            SchedulerError::UnknownTask(id) => write!(f, "no task {id} in this scheduler"),
            SchedulerError::PartitionBusy {
                partition,
                task,
                state,
            } => write!(
                f,
                "partition {partition:?} still has task {task} ({state}); wait for it or cancel \
                 it first"
            ),
            SchedulerError::Transition { task, source } => write!(f, "task {task}: {source}"),
        }
    }
}

impl std::error::Error for SchedulerError {}

impl From<PartitionError> for SchedulerError {
    fn from(e: PartitionError) -> Self {
        SchedulerError::Partition(e)
    }
}

/// How a running task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Failed,
    TimedOut,
}

/// What a task asks for at submission.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskRequest {
    pub name: String,
    /// Key of the partition; the default partition when `None`.
    pub partition: Option<String>,
    pub priority: i32,
    /// Bytes of device memory to claim while the task is admitted or running.
    pub memory: u64,
    /// Absolute time by which the task must have started.
    pub deadline: Option<Nanos>,
}

/// Partitions plus tasks: the scheduler's whole decision state for one device.
#[derive(Clone, Debug)]
pub struct Scheduler {
    partitions: PartitionManager,
    tasks: BTreeMap<TaskId, Task>,
    next_task: TaskId,
}

impl Scheduler {
    pub fn new(partitions: PartitionManager) -> Self {
        Scheduler {
            partitions,
            tasks: BTreeMap::new(),
            next_task: 1,
        }
    }

    pub fn partitions(&self) -> &PartitionManager {
        &self.partitions
    }

    /// Partitions are created and deleted here so tasks and partitions agree.
    pub fn partitions_mut(&mut self) -> &mut PartitionManager {
        &mut self.partitions
    }

    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// Queues a task as `Pending`. A task that could not fit even on an otherwise
    /// idle device is refused now, with what is short, rather than waiting forever.
    pub fn submit(&mut self, request: TaskRequest, now: Nanos) -> Result<TaskId, SchedulerError> {
        let key = request
            .partition
            .as_deref()
            .unwrap_or(super::partition::DEFAULT_KEY);
        let partition = self.partitions.id_of(key)?;
        self.partitions
            .check_ever_fits(partition, Amounts::new(request.memory, 0))?;
        let id = self.next_task;
        self.next_task += 1;
        let task = Task::new(
            id,
            request.name,
            partition,
            request.priority,
            request.memory,
            request.deadline,
            now,
        );
        self.tasks.insert(id, task);
        Ok(id)
    }

    /// Times out every task whose deadline passed before it started; returns them.
    pub fn expire(&mut self, now: Nanos) -> Result<Vec<TaskId>, SchedulerError> {
        let overdue: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| {
                matches!(t.state(), TaskState::Pending | TaskState::Admitted) && t.overdue(now)
            })
            .map(|t| t.id)
            .collect();
        for id in &overdue {
            self.end(*id, TaskEvent::TimeOut, now)?;
        }
        Ok(overdue)
    }

    /// Admits the first pending task, in [`Scheduler::order`], whose memory fits
    /// now, and returns it (now `Admitted`). Tasks that do not fit yet keep their
    /// place; smaller ones behind them may go first.
    pub fn dispatch(&mut self, now: Nanos) -> Result<Option<TaskId>, SchedulerError> {
        self.expire(now)?;
        let mut pending: Vec<&Task> = self
            .tasks
            .values()
            .filter(|t| t.state() == TaskState::Pending)
            .collect();
        pending.sort_by_key(|t| self.order(t));
        let ids: Vec<TaskId> = pending.iter().map(|t| t.id).collect();
        for id in ids {
            let (partition, memory) = {
                let t = &self.tasks[&id];
                (t.partition, t.memory)
            };
            if self
                .partitions
                .claim(partition, Amounts::new(memory, 0))
                .is_ok()
            {
                self.transition(id, TaskEvent::Admit, now)?;
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Sort key of a pending task: higher QoS class, then higher priority of the
    /// task and then of its partition, then earlier deadline, then submission order.
    pub fn order(&self, t: &Task) -> impl Ord {
        let p = self.partitions.get_by_id(t.partition);
        let class = p.map_or(QosClass::BestEffort, |p| p.qos);
        let partition_priority = p.map_or(0, |p| p.spec.priority);
        (
            std::cmp::Reverse(class),
            std::cmp::Reverse(t.priority),
            std::cmp::Reverse(partition_priority),
            t.deadline.unwrap_or(Nanos::MAX),
            t.id,
        )
    }

    /// An admitted task begins running.
    pub fn start(&mut self, id: TaskId, now: Nanos) -> Result<(), SchedulerError> {
        self.transition(id, TaskEvent::Start, now).map(drop)
    }

    /// A running task ended; its memory claim is released.
    pub fn finish(
        &mut self,
        id: TaskId,
        outcome: Outcome,
        now: Nanos,
    ) -> Result<(), SchedulerError> {
        let event = match outcome {
            Outcome::Completed => TaskEvent::Complete,
            Outcome::Failed => TaskEvent::Fail,
            Outcome::TimedOut => TaskEvent::TimeOut,
        };
        if self.state(id)? != TaskState::Running {
            let from = self.state(id)?;
            return Err(SchedulerError::Transition {
                task: id,
                source: TransitionError { from, event },
            });
        }
        self.end(id, event, now)
    }

    /// Cancels a task that has not started, releasing its claim.
    pub fn cancel(&mut self, id: TaskId, now: Nanos) -> Result<(), SchedulerError> {
        self.end(id, TaskEvent::Cancel, now)
    }

    /// Forgets finished tasks so a long-running scheduler does not grow without bound.
    pub fn forget_finished(&mut self) -> usize {
        let before = self.tasks.len();
        self.tasks.retain(|_, t| !t.state().is_terminal());
        before - self.tasks.len()
    }

    /// Deletes a partition; refused while it has unfinished tasks.
    pub fn delete_partition(&mut self, key: &str) -> Result<Partition, SchedulerError> {
        let id = self.partitions.id_of(key)?;
        if let Some(t) = self
            .tasks
            .values()
            .find(|t| t.partition == id && !t.state().is_terminal())
        {
            return Err(SchedulerError::PartitionBusy {
                partition: key.to_owned(),
                task: t.id,
                state: t.state(),
            });
        }
        Ok(self.partitions.delete(key)?)
    }

    /// Unfinished tasks per partition: `(pending, admitted, running)`.
    pub fn counts(&self, partition: PartitionId) -> (usize, usize, usize) {
        let of = |s: TaskState| {
            self.tasks
                .values()
                .filter(|t| t.partition == partition && t.state() == s)
                .count()
        };
        (
            of(TaskState::Pending),
            of(TaskState::Admitted),
            of(TaskState::Running),
        )
    }

    fn state(&self, id: TaskId) -> Result<TaskState, SchedulerError> {
        self.tasks
            .get(&id)
            .map(Task::state)
            .ok_or(SchedulerError::UnknownTask(id))
    }

    /// A transition into a terminal state, releasing the claim if one was held.
    fn end(&mut self, id: TaskId, event: TaskEvent, now: Nanos) -> Result<(), SchedulerError> {
        let held = self.state(id)?.holds_resources();
        self.transition(id, event, now)?;
        if held {
            let t = &self.tasks[&id];
            self.partitions
                .release(t.partition, Amounts::new(t.memory, 0))?;
        }
        Ok(())
    }

    fn transition(
        &mut self,
        id: TaskId,
        event: TaskEvent,
        now: Nanos,
    ) -> Result<TaskState, SchedulerError> {
        let t = self
            .tasks
            .get_mut(&id)
            .ok_or(SchedulerError::UnknownTask(id))?;
        t.apply(event, now)
            .map_err(|source| SchedulerError::Transition { task: id, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::partition::{ComputeShare, PartitionConfig, PartitionSpec};
    use proptest::prelude::*;

    fn scheduler() -> Scheduler {
        let mut m = PartitionManager::new(PartitionConfig {
            total_memory: 1000,
            total_sms: None,
        });
        let guaranteed = PartitionSpec {
            memory_request: 400,
            memory_limit: Some(400),
            compute: ComputeShare::Fraction(0.5),
            ..PartitionSpec::default()
        };
        m.create("g", "G", guaranteed).unwrap();
        m.create(
            "b",
            "B",
            PartitionSpec {
                memory_request: 100,
                memory_limit: Some(500),
                ..PartitionSpec::default()
            },
        )
        .unwrap();
        m.create("e", "E", PartitionSpec::default()).unwrap();
        Scheduler::new(m)
    }

    fn req(partition: &str, priority: i32, memory: u64) -> TaskRequest {
        TaskRequest {
            name: format!("{partition}{priority}"),
            partition: Some(partition.into()),
            priority,
            memory,
            deadline: None,
        }
    }

    #[test]
    fn higher_classes_and_priorities_go_first() {
        let mut s = scheduler();
        let e = s.submit(req("e", 9, 10), 0).unwrap();
        let b = s.submit(req("b", 0, 10), 0).unwrap();
        let g_low = s.submit(req("g", 0, 10), 0).unwrap();
        let g_high = s.submit(req("g", 5, 10), 0).unwrap();
        let order: Vec<_> = std::iter::from_fn(|| s.dispatch(1).unwrap()).collect();
        assert_eq!(order, [g_high, g_low, b, e]);
    }

    #[test]
    fn memory_is_claimed_while_admitted_and_released_at_the_end() {
        let mut s = scheduler();
        let a = s.submit(req("b", 0, 450), 0).unwrap();
        let b = s.submit(req("b", 0, 100), 0).unwrap();
        assert_eq!(s.dispatch(1).unwrap(), Some(a));
        assert_eq!(
            s.dispatch(1).unwrap(),
            None,
            "500 would exceed the partition's limit"
        );
        s.start(a, 2).unwrap();
        s.finish(a, Outcome::Completed, 3).unwrap();
        assert_eq!(
            s.partitions().held(s.partitions().id_of("b").unwrap()),
            Amounts::ZERO
        );
        assert_eq!(s.dispatch(4).unwrap(), Some(b));
        s.cancel(b, 5).unwrap();
        assert_eq!(
            s.partitions().held(s.partitions().id_of("b").unwrap()),
            Amounts::ZERO
        );
        assert_eq!(s.task(b).unwrap().state(), TaskState::Cancelled);
    }

    #[test]
    fn impossible_tasks_are_refused_and_illegal_calls_are_errors() {
        let mut s = scheduler();
        let err = s.submit(req("b", 0, 501), 0).unwrap_err();
        assert!(err.to_string().contains("memory short"), "{err}");
        // The default partition can burst only into the unreserved 500 bytes.
        assert!(s
            .submit(
                TaskRequest {
                    memory: 501,
                    ..TaskRequest::default()
                },
                0
            )
            .is_err());
        assert!(matches!(
            s.submit(req("nope", 0, 1), 0),
            Err(SchedulerError::Partition(PartitionError::UnknownPartition(
                _
            )))
        ));
        let t = s.submit(req("g", 0, 1), 0).unwrap();
        assert!(matches!(
            s.start(t, 1),
            Err(SchedulerError::Transition { .. })
        ));
        assert!(matches!(
            s.finish(t, Outcome::Completed, 1),
            Err(SchedulerError::Transition { .. })
        ));
        assert!(s
            .delete_partition("g")
            .unwrap_err()
            .to_string()
            .contains("still has task"));
        s.dispatch(2).unwrap();
        s.start(t, 3).unwrap();
        assert!(s
            .cancel(t, 4)
            .unwrap_err()
            .to_string()
            .contains("cannot be cancelled"));
        s.finish(t, Outcome::Failed, 5).unwrap();
        assert_eq!(s.forget_finished(), 1);
        s.delete_partition("g").unwrap();
        assert_eq!(s.start(t, 6), Err(SchedulerError::UnknownTask(t)));
    }

    #[test]
    fn tasks_not_started_by_their_deadline_time_out() {
        let mut s = scheduler();
        let late = s
            .submit(
                TaskRequest {
                    deadline: Some(10),
                    memory: 5,
                    ..req("e", 0, 0)
                },
                0,
            )
            .unwrap();
        let fine = s.submit(req("e", 0, 0), 0).unwrap();
        assert_eq!(s.dispatch(11).unwrap(), Some(fine));
        assert_eq!(s.task(late).unwrap().state(), TaskState::TimedOut);
        assert_eq!(s.counts(s.partitions().id_of("e").unwrap()), (0, 1, 0));
    }

    /// Is `from -> to` an edge of the task state machine?
    fn edge(from: TaskState, to: TaskState) -> bool {
        use TaskEvent::*;
        [Admit, Start, Complete, Fail, Cancel, TimeOut]
            .into_iter()
            .any(|e| from.apply(e) == Ok(to))
    }

    /// Runs one random sequence; see the property below.
    fn run_scheduler(ops: Vec<(u8, usize, u64, usize)>) -> Result<(), TestCaseError> {
        let mut s = scheduler();
        let keys = ["g", "b", "e"];
        let outcomes = [Outcome::Completed, Outcome::Failed, Outcome::TimedOut];
        for (now, (op, k, amount, pick)) in (1..).zip(ops) {
            let ids: Vec<TaskId> = s.tasks().map(|t| t.id).collect();
            let target = if ids.is_empty() {
                0
            } else {
                ids[pick % ids.len()]
            };
            let _ = match op {
                0 => {
                    let deadline = (amount % 3 == 0).then_some(now + amount / 10);
                    let request = req(keys[k], (amount % 5) as i32, amount);
                    s.submit(
                        TaskRequest {
                            deadline,
                            ..request
                        },
                        now,
                    )
                    .map(drop)
                }
                1 => s.dispatch(now).map(drop),
                2 => s.start(target, now),
                3 => s.finish(target, outcomes[k], now),
                4 => s.cancel(target, now),
                _ => s.expire(now).map(drop),
            };
            for p in s.partitions().list() {
                let claimed: u64 = s
                    .tasks()
                    .filter(|t| t.partition == p.id && t.state().holds_resources())
                    .map(|t| t.memory)
                    .sum();
                prop_assert_eq!(s.partitions().held(p.id).memory, claimed);
                prop_assert!(claimed <= p.spec.memory_limit.unwrap_or(1000));
            }
            prop_assert!(s.partitions().committed().memory <= 1000);
        }
        for t in s.tasks() {
            for w in t.history().windows(2) {
                prop_assert!(edge(w[0].0, w[1].0), "task {}: {:?}", t.id, t.history());
            }
        }
        Ok(())
    }

    proptest! {
        /// Random submit/dispatch/start/finish/cancel/expire sequences: every task's
        /// history is a legal walk, and held memory equals the sum of the claims of
        /// admitted and running tasks, never above a partition's limit.
        #[test]
        fn scheduler_books_match_task_states(
            ops in proptest::collection::vec((0u8..6, 0usize..3, 0u64..300, 0usize..16), 1..80)
        ) {
            run_scheduler(ops)?;
        }
    }
}

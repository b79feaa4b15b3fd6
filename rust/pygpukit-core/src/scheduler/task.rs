//! The task state machine: every state a task goes through, and the only
//! transitions allowed between them.
//!
//! ```text
//! Pending --admit--> Admitted --start--> Running --complete--> Completed
//!    |                  |                   |-----fail------> Failed
//!    |                  |                   '---time out----> TimedOut
//!    '--cancel / time out--'--> Cancelled / TimedOut
//! ```
//!
//! A running task cannot be cancelled: like `concurrent.futures`, cancellation
//! only withdraws work that has not started. It can time out (a watchdog may stop
//! a kernel loop past its deadline). Terminal states have no way out.

use super::pacing::Nanos;
use super::PartitionId;
use std::fmt;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Submitted; waiting for its resources.
    Pending,
    /// Its resources are claimed; waiting for a worker.
    Admitted,
    Running,
    Completed,
    Failed,
    Cancelled,
    /// Its deadline passed before it could finish (or start).
    TimedOut,
}

/// What happens to a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskEvent {
    Admit,
    Start,
    Complete,
    Fail,
    Cancel,
    TimeOut,
}

impl TaskState {
    /// No event leads out of a terminal state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Cancelled | TaskState::TimedOut
        )
    }

    /// Does the task hold its claimed resources in this state?
    pub fn holds_resources(self) -> bool {
        matches!(self, TaskState::Admitted | TaskState::Running)
    }

    /// The state `event` leads to, or why it may not happen now.
    pub fn apply(self, event: TaskEvent) -> Result<TaskState, TransitionError> {
        use TaskEvent as E;
        use TaskState as S;
        match (self, event) {
            (S::Pending, E::Admit) => Ok(S::Admitted),
            (S::Admitted, E::Start) => Ok(S::Running),
            (S::Running, E::Complete) => Ok(S::Completed),
            (S::Running, E::Fail) => Ok(S::Failed),
            (S::Pending | S::Admitted, E::Cancel) => Ok(S::Cancelled),
            (S::Pending | S::Admitted | S::Running, E::TimeOut) => Ok(S::TimedOut),
            (from, event) => Err(TransitionError { from, event }),
        }
    }

    /// The name used in snapshots and in Python (`"pending"`, `"timed_out"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Admitted => "admitted",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::TimedOut => "timed_out",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event that may not happen in the task's current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionError {
    pub from: TaskState,
    pub event: TaskEvent,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hint = match (self.from, self.event) {
            (TaskState::Running, TaskEvent::Cancel) => {
                "; a running task cannot be cancelled, wait for it"
            }
            (from, _) if from.is_terminal() => "; the task has already finished",
            _ => "",
        };
        write!(f, "a {} task cannot {:?}{hint}", self.from, self.event)
    }
}

impl std::error::Error for TransitionError {}

/// Task identifier, unique within a scheduler.
pub type TaskId = u64;

/// One task's record: what it asked for and everything that happened to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub id: TaskId,
    pub name: String,
    pub partition: PartitionId,
    /// Larger runs first within a QoS class.
    pub priority: i32,
    /// Bytes of device memory claimed while admitted or running.
    pub memory: u64,
    pub submitted_at: Nanos,
    /// A task not started by then times out. (A runner able to stop running work,
    /// such as a GPU watchdog, may also time out a running task.)
    pub deadline: Option<Nanos>,
    state: TaskState,
    /// Every state entered and when, starting with `Pending` at submission.
    history: Vec<(TaskState, Nanos)>,
}

impl Task {
    pub fn new(
        id: TaskId,
        name: String,
        partition: PartitionId,
        priority: i32,
        memory: u64,
        deadline: Option<Nanos>,
        now: Nanos,
    ) -> Self {
        Task {
            id,
            name,
            partition,
            priority,
            memory,
            submitted_at: now,
            deadline,
            state: TaskState::Pending,
            history: vec![(TaskState::Pending, now)],
        }
    }

    pub fn state(&self) -> TaskState {
        self.state
    }

    pub fn history(&self) -> &[(TaskState, Nanos)] {
        &self.history
    }

    /// Moves the task by `event` if the state machine allows it; on error nothing changes.
    pub fn apply(&mut self, event: TaskEvent, now: Nanos) -> Result<TaskState, TransitionError> {
        let next = self.state.apply(event)?;
        self.state = next;
        self.history.push((next, now));
        Ok(next)
    }

    /// Has the deadline passed at `now`?
    pub fn overdue(&self, now: Nanos) -> bool {
        self.deadline.is_some_and(|d| now > d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_happy_path_and_its_history() {
        let mut t = Task::new(1, "t".into(), 0, 0, 0, Some(10), 1);
        for (i, e) in [TaskEvent::Admit, TaskEvent::Start, TaskEvent::Complete]
            .into_iter()
            .enumerate()
        {
            t.apply(e, 2 + i as u64).unwrap();
        }
        let states: Vec<_> = t.history().iter().map(|(s, _)| *s).collect();
        assert_eq!(
            states,
            [
                TaskState::Pending,
                TaskState::Admitted,
                TaskState::Running,
                TaskState::Completed
            ]
        );
        assert_eq!(t.history().last(), Some(&(TaskState::Completed, 4)));
        assert!(!t.overdue(10) && t.overdue(11));
    }

    #[test]
    fn illegal_transitions_are_typed_errors_that_change_nothing() {
        let mut t = Task::new(1, "t".into(), 0, 0, 0, None, 0);
        t.apply(TaskEvent::Admit, 1).unwrap();
        t.apply(TaskEvent::Start, 2).unwrap();
        let err = t.apply(TaskEvent::Cancel, 3).unwrap_err();
        assert_eq!(
            err,
            TransitionError {
                from: TaskState::Running,
                event: TaskEvent::Cancel
            }
        );
        assert!(err.to_string().contains("cannot be cancelled"), "{err}");
        assert_eq!((t.state(), t.history().len()), (TaskState::Running, 3));
        t.apply(TaskEvent::Fail, 4).unwrap();
        assert!(t
            .apply(TaskEvent::Complete, 5)
            .unwrap_err()
            .to_string()
            .contains("already finished"));
        assert_eq!(
            TaskState::Pending.apply(TaskEvent::Start).unwrap_err().from,
            TaskState::Pending
        );
    }

    fn event() -> impl Strategy<Value = TaskEvent> {
        prop_oneof![
            Just(TaskEvent::Admit),
            Just(TaskEvent::Start),
            Just(TaskEvent::Complete),
            Just(TaskEvent::Fail),
            Just(TaskEvent::Cancel),
            Just(TaskEvent::TimeOut),
        ]
    }

    /// The allowed edges, written out independently of `apply`'s match.
    fn legal(from: TaskState, to: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (from, to),
            (Pending, Admitted | Cancelled | TimedOut)
                | (Admitted, Running | Cancelled | TimedOut)
                | (Running, Completed | Failed | TimedOut)
        )
    }

    /// Runs one random sequence; see the property below.
    fn run_events(events: Vec<TaskEvent>) -> Result<(), TestCaseError> {
        let mut t = Task::new(7, "p".into(), 0, 0, 0, None, 0);
        for (now, e) in (1..).zip(events) {
            let before = t.state();
            match t.apply(e, now) {
                Ok(after) => {
                    prop_assert!(legal(before, after), "{:?} -{:?}-> {:?}", before, e, after)
                }
                Err(err) => prop_assert_eq!((err.from, t.state()), (before, before)),
            }
        }
        for pair in t.history().windows(2) {
            prop_assert!(legal(pair[0].0, pair[1].0) && pair[0].1 <= pair[1].1);
        }
        for (s, _) in &t.history()[..t.history().len() - 1] {
            prop_assert!(!s.is_terminal());
        }
        Ok(())
    }

    proptest! {
        /// Under any event sequence only legal edges appear in the history, time
        /// never goes backwards in it, and a terminal state is final.
        #[test]
        fn only_legal_transitions_happen(events in proptest::collection::vec(event(), 0..40)) {
            run_events(events)?;
        }
    }
}

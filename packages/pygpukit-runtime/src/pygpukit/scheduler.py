"""``gp.scheduler``: several workloads sharing one GPU with guarantees.

Partitions are named slices of the device with a memory request and limit, a
compute share and a priority; their QoS class (Guaranteed, Burstable,
BestEffort) follows from what they request, as a Kubernetes pod's does. Tasks
are submitted to partitions and run by a pool of worker threads, highest class
and priority first, once their memory fits (admission control). Every decision
is made in Rust (``pygpukit._rust.SchedulerCore``): admission, ordering, and the
task state machine that records each transition. This module only runs the
Python callables and turns the decisions into futures.

``with partition:`` makes the partition current for the calling thread, so the
memory pool charges allocations made inside it to the partition and enforces
its memory limit; tasks run inside their partition automatically.

On the CPU backend the same API runs in simulation: the callables run on the
worker threads and memory is accounted by the host pool.

The product brief's names are re-exported: ``QosPolicyEvaluator``,
``QosTaskMeta``, ``PartitionManager``, ``PartitionConfig``, ``PartitionLimits``.
"""

from __future__ import annotations

import enum
import importlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from pygpukit.errors import AdmissionError

# The scheduler's decisions live in the Rust core; importing this module loads it.
_rust: Any = importlib.import_module("pygpukit._rust")

__all__ = [
    "AdmissionError",
    "Partition",
    "PartitionConfig",
    "PartitionLimits",
    "PartitionManager",
    "QosClass",
    "QosDecision",
    "QosPolicyEvaluator",
    "QosTaskMeta",
    "Scheduler",
    "Task",
    "TaskState",
    "create_partition",
    "current_partition",
    "default_scheduler",
    "delete_partition",
    "get_partition",
    "shutdown",
    "snapshot",
    "submit",
]

QosPolicyEvaluator = _rust.QosPolicyEvaluator
QosTaskMeta = _rust.QosTaskMeta
QosDecision = _rust.QosDecision
PartitionManager = _rust.PartitionManager
PartitionConfig = _rust.PartitionConfig
PartitionLimits = _rust.PartitionLimits

T = TypeVar("T")


class QosClass(str, enum.Enum):
    """How well a partition is protected, derived from its requests."""

    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BEST_EFFORT = "best_effort"


class TaskState(str, enum.Enum):
    """The states of the Rust task state machine."""

    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


_local = threading.local()


def _stack() -> list[tuple[Partition, int]]:
    stack: list[tuple[Partition, int]] = _local.__dict__.setdefault("stack", [])
    return stack


def current_partition() -> Partition | None:
    """The partition entered last with ``with partition:`` on this thread, or None."""
    stack = _stack()
    return stack[-1][0] if stack else None


class Partition:
    """A partition of a :class:`Scheduler`: what it was admitted with, plus entry points.

    ``with partition:`` charges this thread's allocations to the partition (the
    memory pool enforces its memory limit) until the block ends; blocks nest.
    """

    __slots__ = ("_info", "_scheduler")

    def __init__(self, scheduler: Scheduler, info: Any) -> None:
        self._scheduler = scheduler
        self._info = info

    @property
    def id(self) -> str:
        """The key the partition was created with (``"inference"``)."""
        return str(self._info.id)

    @property
    def name(self) -> str:
        """The display name."""
        return str(self._info.name)

    @property
    def numeric_id(self) -> int:
        """The id the memory pool charges (0 for the default partition)."""
        return int(self._info.numeric_id)

    @property
    def qos_class(self) -> QosClass:
        """Guaranteed, Burstable or BestEffort, derived from the requests."""
        return QosClass(self._info.qos_class)

    @property
    def memory_request(self) -> int:
        """Bytes reserved for this partition alone."""
        return int(self._info.memory_request)

    @property
    def memory_limit(self) -> int | None:
        """Bytes the partition may hold at most (None: the device)."""
        limit = self._info.memory_limit
        return None if limit is None else int(limit)

    @property
    def compute(self) -> float:
        """Reserved compute as a fraction of the device (0.0 when none)."""
        return float(self._info.compute)

    @property
    def sms(self) -> int | None:
        """Reserved SMs, when the device's SM count is known."""
        sms = self._info.sms
        return None if sms is None else int(sms)

    @property
    def priority(self) -> int:
        """Orders tasks within the QoS class; larger goes first."""
        return int(self._info.priority)

    @property
    def pacing(self) -> tuple[float, float, bool]:
        """Kernel pacing in force: ``(rate, burst_ms, yield_to_higher)``."""
        rate, burst_ms, yield_to_higher = self._info.pacing
        return float(rate), float(burst_ms), bool(yield_to_higher)

    def submit(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        priority: int = 0,
        deadline: float | None = None,
        memory: int = 0,
        name: str | None = None,
        **kwargs: Any,
    ) -> Task[T]:
        """Submit ``fn(*args, **kwargs)`` to this partition (see :meth:`Scheduler.submit`)."""
        return self._scheduler.submit(
            fn,
            *args,
            partition=self,
            priority=priority,
            deadline=deadline,
            memory=memory,
            name=name,
            **kwargs,
        )

    def usage(self) -> dict[str, Any]:
        """The partition's entry of :meth:`Scheduler.snapshot`."""
        for entry in self._scheduler.snapshot()["partitions"]:
            if entry["id"] == self.id:
                return dict(entry)
        raise KeyError(f"partition {self.id!r} was deleted")

    def __enter__(self) -> Partition:
        previous = int(_rust.set_current_partition(self.numeric_id))
        _stack().append((self, previous))
        return self

    def __exit__(self, *exc: object) -> None:
        entered, previous = _stack().pop()
        if entered is not self:
            raise RuntimeError(
                f"partition {self.id!r} exited while {entered.id!r} was current: "
                "nest `with partition:` blocks properly"
            )
        _rust.set_current_partition(previous)

    def __repr__(self) -> str:
        return (
            f"Partition(id={self.id!r}, qos_class={self.qos_class.value!r}, "
            f"memory_request={self.memory_request}, memory_limit={self.memory_limit}, "
            f"compute={self.compute}, priority={self.priority})"
        )


class Task(Future[T]):
    """A submitted task: a ``concurrent.futures.Future`` plus its scheduler state.

    ``cancel()`` withdraws a task that has not started (and returns False once
    it runs). A task not started by its deadline fails with ``TimeoutError``.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        task_id: int,
        name: str,
        partition: Partition,
        priority: int,
        deadline: float | None,
        call: tuple[Callable[..., T], tuple[Any, ...], dict[str, Any]],
    ) -> None:
        super().__init__()
        self._scheduler = scheduler
        self._final_state: TaskState | None = None
        # The callable and its arguments; dropped once run so they can be freed.
        self._call: tuple[Callable[..., T], tuple[Any, ...], dict[str, Any]] | None = call
        self.id = task_id
        self.name = name
        self.partition = partition
        self.priority = priority
        self.deadline = deadline

    @property
    def state(self) -> TaskState:
        """The state the Rust state machine holds for this task."""
        if self._final_state is not None:
            return self._final_state
        return self._scheduler._state(self)

    def cancel(self) -> bool:
        """Withdraw the task if it has not started; True when it is (or was) cancelled."""
        return self._scheduler._cancel(self)

    def __repr__(self) -> str:
        return (
            f"Task(id={self.id}, name={self.name!r}, partition={self.partition.id!r}, "
            f"state={self.state.value!r})"
        )


class Scheduler:
    """Runs tasks in partitions of one device under admission control.

    ``total_memory`` is the memory the partitions share (bytes); ``total_sms``
    the device's SM count, needed for shares given in SMs; ``workers`` how many
    tasks run at once. Worker threads start with the first task and stop at
    :meth:`shutdown`. Usable as a context manager (shutdown on exit).
    """

    def __init__(
        self, total_memory: int, *, total_sms: int | None = None, workers: int = 2
    ) -> None:
        if total_memory <= 0:
            raise ValueError(f"total_memory must be a positive byte count, got {total_memory}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._core = _rust.SchedulerCore(total_memory, total_sms)
        self._cond = threading.Condition()
        self._tasks: dict[int, Task[Any]] = {}
        self._partitions: dict[str, Partition] = {
            "default": Partition(self, self._core.get_partition("default"))
        }
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self._closed = False

    # -- partitions -------------------------------------------------------------------

    def create_partition(self, id: str, name: str | None = None, limits: Any = None) -> Partition:
        """Admit a partition; ``limits`` is a :class:`PartitionLimits` (None: BestEffort).

        Raises ``AdmissionError`` saying what is short when the device cannot
        hold back its memory request or compute share, ``ValueError`` for a
        malformed request or a name in use.
        """
        if isinstance(name, PartitionLimits):
            raise TypeError(
                "create_partition(id, name, limits): pass the limits third or as limits=..."
            )
        limits = PartitionLimits() if limits is None else limits
        with self._cond:
            info = self._core.create_partition(id, name if name is not None else id, limits)
            partition = Partition(self, info)
            self._partitions[id] = partition
        return partition

    def get_partition(self, id: str) -> Partition:
        """The partition created as ``id`` (``"default"`` always exists)."""
        with self._cond:
            try:
                return self._partitions[id]
            except KeyError:
                raise KeyError(f"no partition {id!r}; create it first") from None

    def partitions(self) -> list[Partition]:
        """Every partition, the default first."""
        with self._cond:
            return list(self._partitions.values())

    def delete_partition(self, partition: Partition | str) -> None:
        """Delete a partition with no unfinished tasks, giving its reservation back."""
        key = partition.id if isinstance(partition, Partition) else partition
        with self._cond:
            self._core.delete_partition(key)
            del self._partitions[key]
            self._cond.notify_all()

    # -- tasks ------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        partition: Partition | str | None = None,
        priority: int = 0,
        deadline: float | None = None,
        memory: int = 0,
        name: str | None = None,
        **kwargs: Any,
    ) -> Task[T]:
        """Queue ``fn(*args, **kwargs)`` and return its :class:`Task` (a future).

        ``partition``: where it runs (default: the default partition).
        ``priority``: larger runs first within the partition's QoS class.
        ``deadline``: seconds from now by which it must have started, else it
        fails with ``TimeoutError``. ``memory``: bytes it needs; it is admitted
        only when they fit in its partition and stay claimed while it runs.
        Raises ``AdmissionError`` when the task could never fit, ``KeyError``
        for an unknown partition, ``RuntimeError`` after :meth:`shutdown`.
        """
        if not callable(fn):
            raise TypeError(f"submit needs a callable, got {type(fn).__name__}")
        if memory < 0:
            raise ValueError(f"memory must be >= 0 bytes, got {memory}")
        key = partition.id if isinstance(partition, Partition) else (partition or "default")
        label = name if name is not None else getattr(fn, "__qualname__", repr(fn))
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is shut down; create a new one to submit")
            target = self.get_partition(key)
            task_id = self._core.submit(label, key, priority, memory, deadline)
            task = Task(self, task_id, label, target, priority, deadline, (fn, args, kwargs))
            self._tasks[task_id] = task
            self._start_workers()
            self._cond.notify()
        return task

    def snapshot(self) -> dict[str, Any]:
        """Partitions, tasks (with their state history) and totals, for inspection.

        Each partition also carries ``memory_allocated``: the bytes the memory
        pool has charged to it (live allocations made inside the partition).
        """
        with self._cond:
            snap: dict[str, Any] = self._core.snapshot()
        pool = _rust.pool_stats()
        for entry in snap["partitions"]:
            entry["memory_allocated"] = int(
                pool.get(f"partition.{entry['numeric_id']}.allocated_bytes", 0)
            )
        return snap

    def forget_finished(self) -> int:
        """Drop finished tasks from the snapshot's books; returns how many."""
        with self._cond:
            return int(self._core.forget_finished())

    def shutdown(self, wait: bool = True, *, cancel_pending: bool = False) -> None:
        """Stop accepting tasks; run (or with ``cancel_pending``, cancel) queued ones.

        With ``wait``, returns once every worker has stopped.
        """
        with self._cond:
            self._closed = True
            pending = list(self._tasks.values()) if cancel_pending else []
            self._cond.notify_all()
        for task in pending:
            task.cancel()
        if wait:
            for thread in list(self._threads):
                thread.join()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True)

    # -- internals ----------------------------------------------------------------------

    def _state(self, task: Task[Any]) -> TaskState:
        with self._cond:
            return TaskState(self._core.state(task.id))

    def _cancel(self, task: Task[Any]) -> bool:
        with self._cond:
            if task.done():
                return task.cancelled()
            try:
                self._core.cancel(task.id)
            except RuntimeError:
                return False  # running: like concurrent.futures, too late to cancel
            self._tasks.pop(task.id, None)
            task._final_state = TaskState.CANCELLED
            self._cond.notify_all()  # its memory claim is free again
        return Future.cancel(task)

    def _start_workers(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(
                target=self._work, name=f"pygpukit-scheduler-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _next(self) -> Task[Any] | None:
        """Wait for the next task this worker should run; None when shut down and idle."""
        with self._cond:
            while True:
                task_id, expired = self._core.dispatch()
                for late in expired:
                    self._expire(self._tasks.pop(late))
                if task_id is not None:
                    task = self._tasks[task_id]
                    self._core.start(task_id)
                    task.set_running_or_notify_cancel()
                    return task
                if self._closed and not self._tasks:
                    return None
                self._cond.wait(timeout=self._core.next_deadline())

    def _expire(self, task: Task[Any]) -> None:
        task._final_state = TaskState.TIMED_OUT
        task.set_exception(
            TimeoutError(
                f"task {task.name!r} did not start within its deadline of {task.deadline} s"
                f" (partition {task.partition.id!r}); give it a later deadline, a higher"
                " priority, or fewer competing tasks"
            )
        )

    def _work(self) -> None:
        while (task := self._next()) is not None:
            assert task._call is not None, "a task is dispatched once"
            fn, args, kwargs = task._call
            task._call = None
            try:
                with task.partition:
                    result = fn(*args, **kwargs)
            except BaseException as exc:
                self._finish(task, TaskState.FAILED)
                task.set_exception(exc)
            else:
                self._finish(task, TaskState.COMPLETED)
                task.set_result(result)

    def _finish(self, task: Task[Any], state: TaskState) -> None:
        with self._cond:
            self._core.finish(task.id, state.value)
            self._tasks.pop(task.id, None)
            task._final_state = state
            self._cond.notify_all()  # its memory claim is free again


_default: Scheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> Scheduler:
    """The process's scheduler, made on first use over the current device.

    Its memory is the global memory limit when one is set, else the device's
    memory (host memory on the CPU backend); SMs are the GPU's SM count.
    """
    global _default
    with _default_lock:
        if _default is None:
            from pygpukit import device

            info = device.get_device_info()
            limit = _rust.get_limit()
            total = int(limit if limit is not None else info["total_memory"])
            sms = info["sm_count"] if info["backend"] == "cuda" else None
            _default = Scheduler(total, total_sms=sms)
        return _default


def create_partition(id: str, name: str | None = None, limits: Any = None) -> Partition:
    """Admit a partition on the default scheduler (see :meth:`Scheduler.create_partition`)."""
    return default_scheduler().create_partition(id, name, limits)


def get_partition(id: str) -> Partition:
    """A partition of the default scheduler."""
    return default_scheduler().get_partition(id)


def delete_partition(partition: Partition | str) -> None:
    """Delete a partition of the default scheduler."""
    default_scheduler().delete_partition(partition)


def submit(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Task[T]:
    """Submit to the default scheduler (see :meth:`Scheduler.submit` for the keywords)."""
    return default_scheduler().submit(fn, *args, **kwargs)


def snapshot() -> dict[str, Any]:
    """The default scheduler's snapshot (see :meth:`Scheduler.snapshot`)."""
    return default_scheduler().snapshot()


def shutdown(wait: bool = True, *, cancel_pending: bool = False) -> None:
    """Shut the default scheduler down; the next use makes a fresh one."""
    global _default
    with _default_lock:
        scheduler, _default = _default, None
    if scheduler is not None:
        scheduler.shutdown(wait, cancel_pending=cancel_pending)

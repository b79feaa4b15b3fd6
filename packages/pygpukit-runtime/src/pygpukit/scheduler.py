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
its memory limit, and its stream becomes the thread's current stream; tasks run
inside their partition automatically. A partition's stream lives in a CUDA green
context holding its SM share where the driver has them, else it is a stream of
its class's priority (Guaranteed highest). The memory pool holds reservations
back and reclaims in QoS order; the dispatch controller paces launches of lower
classes while higher ones have work pending (``pacing_stats()``).

On the CPU backend the same API runs in simulation: the callables run on the
worker threads, memory is accounted by the host pool, partitions get host
streams and nothing is paced on a device.

The product brief's names are re-exported: ``QosPolicyEvaluator``,
``QosTaskMeta``, ``PartitionManager``, ``PartitionConfig``, ``PartitionLimits``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from pygpukit._rust_loader import rust_module
from pygpukit.backend.select import backend
from pygpukit.errors import AdmissionError, PyGPUkitError, SchedulerDeadlockError

# The scheduler's decisions live in the Rust core; importing this module loads it.
_rust: Any = rust_module()
_log = logging.getLogger("pygpukit.scheduler")

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
    "SchedulerDeadlockError",
    "Task",
    "TaskState",
    "create_partition",
    "current_partition",
    "default_scheduler",
    "delete_partition",
    "get_partition",
    "pacing_stats",
    "partition_of",
    "set_pacing_max_hold",
    "shutdown",
    "snapshot",
    "submit",
]

QosPolicyEvaluator = _rust.QosPolicyEvaluator
QosTaskMeta = _rust.QosTaskMeta
QosDecision = _rust.QosDecision
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
# Live partitions by the numeric id the pool charges, for partition_of().
_by_numeric_id: weakref.WeakValueDictionary[int, Partition] = weakref.WeakValueDictionary()


def _stack() -> list[tuple[Partition, int, Any]]:
    stack: list[tuple[Partition, int, Any]] = _local.__dict__.setdefault("stack", [])
    return stack


def current_partition() -> Partition | None:
    """The partition entered last with ``with partition:`` on this thread, or None."""
    stack = _stack()
    return stack[-1][0] if stack else None


def pacing_stats() -> dict[str, Any]:
    """Kernel pacing as the dispatch controller enforces it now.

    ``active``: whether any launch can be held (pacing costs a completion event
    per launch while it is). ``partitions``: per numeric partition id, its
    ``qos_class``, ``rate``, ``burst_ms``, ``yield_to_higher`` and counters:
    ``launched``, ``held`` (launches that waited), ``held_ms``, ``forced``
    (released by the max-hold bound), ``measured_ms`` (kernel time measured
    from completion events) and ``pending``.
    """
    return dict(_rust.pacing_stats())


def set_pacing_max_hold(seconds: float) -> None:
    """Bound how long pacing may hold one launch (default 0.05 s).

    The bound is what keeps a lower class moving when a higher class's pending
    work itself waits on it (a cross-stream dependency): pacing never deadlocks.
    """
    _rust.set_pacing_max_hold(float(seconds))


def partition_of(array: Any) -> Partition | None:
    """The partition ``array``'s memory is charged to, or None (no partition).

    Arrays remember the partition that was current when their memory was
    allocated: the memory pool records it per block. Views share their base's
    block. Inspection only: this scans the pool's block list.
    """
    from pygpukit import memory

    address = int(array.data_ptr)
    device = memory.HOST_DEVICE if array.device == "cpu" else int(array.device.split(":")[1])
    for block in memory.snapshot(device):
        start = int(block["address"])
        if block["state"] != "free" and start <= address < start + int(block["size"]):
            numeric = int(block["partition"])
            return None if numeric == 0 else _by_numeric_id.get(numeric)
    return None


_PRIORITY_OF_CLASS = {"guaranteed": 0, "burstable": 1, "best_effort": 2}


@dataclass
class _Compute:
    """Where a partition's kernels run on one device."""

    mode: str  # "green_context", "stream_priority" or "simulated"
    stream: Any  # the backend's stream object
    sm_count: int | None
    green: Any = None  # the native GreenContext acquired for the partition, if any
    reason: str = ""  # why a share got no green context
    # No share on a device with green contexts: follow the SMs nobody holds, which
    # change as partitions with shares come and go (checked at each entry).
    follow_rest: bool = False
    rest_sms: int = -1  # the unassigned SM count this placement was made for


def _probe(stream: Any) -> str:
    """Why work launched into ``stream`` fails; empty when a kernel and a matmul compute right.

    Modules are loaded in the primary context; a driver that cannot launch them into
    a green context must cost the partition its SM confinement, not its results.
    """
    import numpy as np

    import pygpukit as gp
    from pygpukit.stream import Stream

    host = np.arange(1.0, 65.0, dtype=np.float32).reshape(8, 8)
    try:
        with Stream._from_impl(stream):
            got = (gp.from_numpy(host) @ gp.from_numpy(host) + 1.0).to_numpy()
    except (RuntimeError, PyGPUkitError) as exc:  # CudaError, OutOfMemoryError, CompileError
        return f"a launch into the green context failed ({exc}); using a priority stream"
    if not np.allclose(got, host.astype(np.float64) @ host + 1.0, rtol=1e-4):
        return "a matmul in the green context computed wrong results; using a priority stream"
    return ""


def _resolve_compute(partition: Partition, device: int) -> _Compute:
    """Place a partition on ``device``.

    A green context of its SM share; the SMs no green context holds (no share);
    else a stream of its class's priority.
    """
    from pygpukit.backend.select import backend, native

    b = backend()
    if b.name == "cpu":
        return _Compute("simulated", b.Stream(device, 0), partition.sms)
    least, greatest = (int(v) for v in b.priority_range(device))
    # Guaranteed highest (CUDA: the smallest number), BestEffort lowest.
    rank = _PRIORITY_OF_CLASS[partition.qos_class.value]
    priority = (greatest, (least + greatest) // 2, least)[rank]
    mod = native()
    assert mod is not None, "the CUDA backend runs on the native module"
    support = mod.green_context_support(device)
    reason = str(support["reason"])
    follow_rest = False
    rest_missing = False  # no share and no SM held by anyone: the whole device, not a failure
    if support["supported"]:
        # A driver failure here costs the partition its SM confinement, not its work:
        # it falls back to a priority stream and says why.
        try:
            if partition.compute > 0:
                sms = partition.sms
                if sms is None:
                    sms = max(1, round(partition.compute * int(support["sm_count"])))
                green = mod.GreenContext.acquire(device, sms)
                stream = green.stream(priority)
                reason = _probe(stream)
                if not reason:
                    return _Compute("green_context", stream, green.sm_count, green)
                green.release()
                _log.warning("partition %r on device %d: %s", partition.id, device, reason)
                return _Compute("stream_priority", b.Stream(device, priority), None, None, reason)
            follow_rest = True
            rest = mod.GreenContext.unassigned(device)
            # Read after the context is made: making it can settle what counts as unassigned.
            support = mod.green_context_support(device)
            rest_sms = int(support["unassigned"])
            if rest is not None:
                stream = rest.stream(priority)
                reason = _probe(stream)
                if not reason:
                    return _Compute(
                        "green_context", stream, rest.sm_count, follow_rest=True, rest_sms=rest_sms
                    )
            else:
                rest_missing = True
                reason = "no SMs are held by green contexts: the whole device"
        except (RuntimeError, PyGPUkitError) as exc:
            reason = str(exc)
    if reason and support["supported"] and not rest_missing:
        # A device that could be partitioned but was not: worth a line in the log.
        _log.warning(
            "partition %r on device %d runs on a priority stream, not a green context: %s",
            partition.id,
            device,
            reason,
        )
    stream = b.Stream(device, priority)
    rest_sms = int(support["unassigned"]) if follow_rest else -1
    return _Compute("stream_priority", stream, None, None, reason, follow_rest, rest_sms)


class Partition:
    """A partition of a :class:`Scheduler`: what it was admitted with, plus entry points.

    ``with partition:`` charges this thread's allocations to the partition (the
    memory pool enforces its memory limit) and makes its stream the thread's
    current stream until the block ends; blocks nest.
    """

    __slots__ = ("__weakref__", "_compute", "_ended", "_info", "_lock", "_owner")

    def __init__(self, scheduler: Scheduler | PartitionManager, info: Any) -> None:
        # Weak: the owner holds its partitions, and a cycle would keep a dropped
        # scheduler's reservations and pacing enforced until the garbage collector ran.
        self._owner = weakref.ref(scheduler)
        self._info = info
        self._compute: dict[int, _Compute] = {}
        self._lock = threading.Lock()
        # Why the partition can no longer be entered (it was deleted), or None. A partition of
        # a shut-down scheduler or closed manager can still be entered, unenforced.
        self._ended: str | None = None
        _by_numeric_id[self.numeric_id] = self

    @property
    def _scheduler(self) -> Scheduler | PartitionManager:
        owner = self._owner()
        if owner is None:
            raise RuntimeError(
                f"the scheduler of partition {self.id!r} was garbage-collected, which ended "
                "the partition; keep a reference to the Scheduler or PartitionManager"
            )
        return owner

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
        """Kernel pacing configured: ``(rate, burst_ms, yield_to_higher)``."""
        rate, burst_ms, yield_to_higher = self._info.pacing
        return float(rate), float(burst_ms), bool(yield_to_higher)

    @property
    def pacing_active(self) -> bool:
        """Whether the dispatch controller can hold this partition's launches now.

        True when its rate is below 1, or when it yields and a partition of a
        higher class is registered; a Guaranteed partition at rate 1 is never held.
        """
        stats = pacing_stats()
        if not stats["active"]:
            return False
        mine = stats["partitions"].get(self.numeric_id)
        if mine is None:
            return False
        if float(mine["rate"]) < 1.0:
            return True
        rank = _PRIORITY_OF_CLASS[mine["qos_class"]]
        return bool(mine["yield_to_higher"]) and any(
            _PRIORITY_OF_CLASS[other["qos_class"]] < rank for other in stats["partitions"].values()
        )

    def _placement(self) -> _Compute:
        """Where this partition runs on the current device.

        Resolved once per device; a partition without a share follows the SMs no
        green context holds.
        """
        from pygpukit.backend.select import backend, native

        b = backend()
        device = int(b.get_device())
        with self._lock:
            compute = self._compute.get(device)
            if compute is not None and compute.follow_rest:
                mod = native()
                assert mod is not None, "green contexts exist only on the CUDA backend"
                unassigned = int(mod.green_context_support(device)["unassigned"])
                if unassigned != compute.rest_sms:
                    moved = _resolve_compute(self, device)
                    # Work enqueued on the old stream stays ahead of the new stream's.
                    fence = b.Event(device, False)
                    fence.record(compute.stream)
                    moved.stream.wait_event(fence)
                    compute = self._compute[device] = moved
            if compute is None:
                compute = self._compute[device] = _resolve_compute(self, device)
            return compute

    @property
    def stream(self) -> Any:
        """The partition's stream on the current device (a ``gp.Stream``).

        In its green context when it has a compute share and the driver has green
        contexts; else a stream of its class's priority.
        """
        from pygpukit.stream import Stream

        return Stream._from_impl(self._placement().stream)

    @property
    def compute_mode(self) -> str:
        """``"green_context"``, ``"stream_priority"`` (fallback) or ``"simulated"`` (CPU)."""
        return self._placement().mode

    @property
    def sm_count(self) -> int | None:
        """SMs its green context holds on the current device (None without one).

        On the CPU backend: the SMs it reserved, when known (simulation).
        """
        return self._placement().sm_count

    @property
    def compute_fallback_reason(self) -> str:
        """Why the partition's kernels are not confined to a green context ("" when they are)."""
        compute = self._placement()
        return "" if compute.mode == "green_context" else compute.reason

    def _release_compute(self) -> None:
        from pygpukit import memory

        with self._lock:
            devices = [d for d, c in self._compute.items() if c.mode != "simulated"]
            for compute in self._compute.values():
                if compute.green is not None:
                    compute.green.release()
            self._compute.clear()
        # The pool caches the blocks the partition freed; segments are shared by partitions,
        # so the idle ones go back to the driver. A partition that filled the device must not
        # leave it full for other processes (cuDevicePrimaryCtxRetain fails there otherwise).
        for device in devices:
            memory.empty_cache(device)

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
        if not isinstance(self._scheduler, Scheduler):
            raise TypeError(
                f"partition {self.id!r} belongs to a PartitionManager, which runs no tasks; "
                "create it with a Scheduler to submit work to it"
            )
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
        """The partition's entry of :meth:`Scheduler.snapshot` (memory and pacing)."""
        if isinstance(self._scheduler, Scheduler):
            for entry in self._scheduler.snapshot()["partitions"]:
                if entry["id"] == self.id:
                    return dict(entry)
            raise KeyError(f"partition {self.id!r} was deleted")
        return {"id": self.id, **_enforcement(self.numeric_id)}

    def __enter__(self) -> Partition:
        from pygpukit.backend.select import backend

        if self._ended is not None:
            raise RuntimeError(
                f"partition {self.id!r} {self._ended}: allocations inside it would be refused, "
                "so `with partition:` is refused too; create the partition again to run in it"
            )
        stream = self._placement().stream
        b = backend()
        previous_stream = b.current_stream()
        previous = int(_rust.set_current_partition(self.numeric_id))
        b.set_current_stream(stream)
        _stack().append((self, previous, previous_stream))
        return self

    def __exit__(self, *exc: object) -> None:
        from pygpukit.backend.select import backend

        entered, previous, previous_stream = _stack().pop()
        if entered is not self:
            raise RuntimeError(
                f"partition {self.id!r} exited while {entered.id!r} was current: "
                "nest `with partition:` blocks properly"
            )
        _rust.set_current_partition(previous)
        backend().set_current_stream(previous_stream)

    def __repr__(self) -> str:
        rate, burst_ms, yields = self.pacing
        pacing = "active" if self.pacing_active else "inactive"
        return (
            f"Partition(id={self.id!r}, qos_class={self.qos_class.value!r}, "
            f"memory_request={self.memory_request}, memory_limit={self.memory_limit}, "
            f"compute={self.compute}, priority={self.priority}, "
            f"pacing=({rate}, burst_ms={burst_ms}, yield_to_higher={yields}, {pacing}))"
        )


def _enforcement(numeric_id: int) -> dict[str, Any]:
    """What the pool and the dispatch controller hold for a partition now."""
    pool = _rust.pool_stats()
    return {
        "memory_allocated": int(pool.get(f"partition.{numeric_id}.allocated_bytes", 0)),
        "pacing_stats": pacing_stats()["partitions"].get(numeric_id),
    }


class PartitionManager:
    """The product brief's partition books (no tasks): admission control over partitions.

    ``PartitionManager(PartitionConfig(total_memory, total_sms=None))``; its
    partitions are :class:`Partition` objects, enterable with ``with partition:``
    like a :class:`Scheduler`'s, and enforced the same way (memory quota,
    reservations, pacing, green contexts) until deleted or the manager goes.
    """

    def __init__(self, config: Any) -> None:
        backend()  # the runtime's first use: pick the backend (and say so if it is the CPU)
        self._core = _rust.PartitionManager(config)
        self._partitions: dict[str, Partition] = {}
        self._guard = threading.Lock()
        self._closed = False

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"{what} after PartitionManager.close(): the manager no longer enforces "
                "partitions; create a new PartitionManager"
            )

    def create_partition(self, id: str, name: str | None = None, limits: Any = None) -> Partition:
        """Admit a partition; raises ``AdmissionError`` saying what is short.

        ``RuntimeError`` once the manager is closed.
        """
        limits = PartitionLimits() if limits is None else limits
        with self._guard:
            self._check_open("create_partition")
            info = self._core.create_partition(id, name if name is not None else id, limits)
            partition = Partition(self, info)
            self._partitions[id] = partition
        return partition

    def get_partition(self, id: str) -> Partition | None:
        """The partition ``id``, or None (``"default"`` always exists)."""
        with self._guard:
            if id in self._partitions:
                return self._partitions[id]
            info = self._core.get_partition(id)
            if info is None:
                return None
            partition = Partition(self, info)
            self._partitions[id] = partition
            return partition

    def list_partitions(self) -> list[Partition]:
        """Every partition, the default first."""
        return [p for p in (self.get_partition(i.id) for i in self._core.list_partitions()) if p]

    def delete_partition(self, partition: Partition | str) -> Partition:
        """Delete a partition, giving its reservation and its SMs back.

        Allocations still made inside it are refused from then on (``RuntimeError``).
        """
        key = partition.id if isinstance(partition, Partition) else partition
        with self._guard:
            self._check_open("delete_partition")
            info = self._core.delete_partition(key)
            gone = self._partitions.pop(key, None)
        if gone is None:
            gone = Partition(self, info)
        gone._ended = "was deleted"
        gone._release_compute()
        return gone

    def close(self) -> None:
        """Stop enforcing every partition (quota, reservation, pacing, SMs).

        The books stay readable and its partitions can still be entered (unenforced);
        creating or deleting partitions raises ``RuntimeError`` afterwards. Also done
        when the manager is garbage-collected. Closing twice does nothing more.
        """
        with self._guard:
            if self._closed:
                return
            self._closed = True
            partitions = list(self._partitions.values())
        self._core.end_enforcement()
        for partition in partitions:
            partition._release_compute()

    @property
    def available_memory(self) -> int:
        """Unreserved memory in bytes."""
        return int(self._core.available_memory)

    @property
    def available_compute(self) -> float:
        """Unreserved compute as a fraction of the device."""
        return float(self._core.available_compute)


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

    def result(self, timeout: float | None = None) -> T:
        """The task's return value, waiting for it (see ``concurrent.futures.Future``).

        Inside another task of the same scheduler, a wait without ``timeout`` that
        would leave no worker free to run this task raises
        :class:`SchedulerDeadlockError` instead of hanging.
        """
        with self._scheduler._waiting(self, timeout):
            return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The task's exception, waiting for it; deadlocks detected as in :meth:`result`."""
        with self._scheduler._waiting(self, timeout):
            return super().exception(timeout)

    def __repr__(self) -> str:
        return (
            f"Task(id={self.id}, name={self.name!r}, partition={self.partition.id!r}, "
            f"state={self.state.value!r})"
        )


class Scheduler:
    """Runs tasks in partitions of one device under admission control.

    ``total_memory`` is the memory the partitions share (bytes, or a size string
    such as ``"8GiB"``); it bounds this scheduler's partitions only: allocations
    outside every partition answer to the global limit
    (:func:`pygpukit.memory.set_limit`) alone. ``total_sms`` is the device's SM
    count, needed for shares given in SMs; ``workers`` how many tasks run at once.
    Worker threads start with the first task and stop at :meth:`shutdown`. Usable
    as a context manager (shutdown on exit).

    A task that waits for the result of a task it submitted needs a free worker
    for that task: when every worker is blocked that way, the wait that would
    complete the deadlock raises :class:`SchedulerDeadlockError` instead. The
    other waits of that chain may still hold their workers when the error
    reaches the caller; they come free as their inner tasks finish.
    """

    def __init__(
        self, total_memory: int | str, *, total_sms: int | None = None, workers: int = 2
    ) -> None:
        total = int(_rust.parse_size(total_memory, "Scheduler(total_memory)"))
        if total == 0:
            raise ValueError("Scheduler(total_memory) must be a positive size, got 0")
        if isinstance(workers, bool) or not isinstance(workers, int):
            raise TypeError(f"Scheduler(workers) must be an int, got {type(workers).__name__}")
        if workers < 1:
            raise ValueError(f"Scheduler(workers) must be at least 1, got {workers}")
        backend()  # the runtime's first use: pick the backend (and say so if it is the CPU)
        self._core = _rust.SchedulerCore(total, total_sms)
        self._cond = threading.Condition()
        self._tasks: dict[int, Task[Any]] = {}
        self._partitions: dict[str, Partition] = {
            "default": Partition(self, self._core.get_partition("default"))
        }
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self._closed = False
        # Workers blocked in Task.result()/exception() on a task of this scheduler.
        self._blocked_workers = 0

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
            if self._closed:
                raise RuntimeError(
                    "create_partition after Scheduler.shutdown(): a shut-down scheduler "
                    "governs nothing; create a new Scheduler"
                )
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
        """Delete a partition with no unfinished tasks, giving its reservation back.

        Allocations still made inside it are refused from then on (``RuntimeError``).
        """
        key = partition.id if isinstance(partition, Partition) else partition
        with self._cond:
            self._core.delete_partition(key)
            gone = self._partitions.pop(key)
            self._cond.notify_all()
        gone._ended = "was deleted"
        gone._release_compute()

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
        memory = int(_rust.parse_size(memory, "submit(memory)"))
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
        pool has charged to it (live allocations made inside the partition), and
        ``pacing_stats``: its entry of :func:`pacing_stats` (None if unregistered).
        """
        with self._cond:
            snap: dict[str, Any] = self._core.snapshot()
        for entry in snap["partitions"]:
            entry.update(_enforcement(int(entry["numeric_id"])))
        return snap

    def forget_finished(self) -> int:
        """Drop finished tasks from the snapshot's books; returns how many."""
        with self._cond:
            return int(self._core.forget_finished())

    def shutdown(self, wait: bool = True, *, cancel_pending: bool = False) -> None:
        """Stop accepting tasks; run (or with ``cancel_pending``, cancel) queued ones.

        With ``wait``, returns once every worker has stopped. Once shut down (and
        the workers are done) the partitions are no longer enforced: no quota,
        no reservation held back, no pacing, SMs given back.
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
            self._end_enforcement()

    def _end_enforcement(self) -> None:
        self._core.end_enforcement()
        for partition in self.partitions():
            partition._release_compute()

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

    @contextlib.contextmanager
    def _waiting(self, task: Task[Any], timeout: float | None) -> Iterator[None]:
        """Counts a worker of this scheduler blocked on ``task`` for as long as it waits.

        When every worker would be blocked that way nobody is left to run a pending
        task, and nothing running can finish either: the last wait raises instead.
        A wait with a timeout comes back by itself, so it never counts.
        """
        if timeout is not None or task.done() or getattr(_local, "worker_of", None) is not self:
            yield
            return
        with self._cond:
            if self._blocked_workers + 1 >= self._workers:
                raise SchedulerDeadlockError(
                    f"task {task.name!r} can never run: this wait would leave all"
                    f" {self._workers} worker(s) of the scheduler blocked on tasks they"
                    " submitted, with none free to run them. Create the Scheduler with more"
                    " workers, wait with a timeout, or return the inner task instead of"
                    " waiting for it inside a task."
                )
            self._blocked_workers += 1
        try:
            yield
        finally:
            with self._cond:
                self._blocked_workers -= 1

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
        _local.worker_of = self
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

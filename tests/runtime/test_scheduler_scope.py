"""The scheduler's scope and lifecycle, and the sizes it takes (docs/scheduler.md).

Scope: a ``Scheduler(total_memory=...)`` bounds its own partitions, never allocations made
outside them, and a second scheduler adds its budget instead of replacing the first one's.
An ``OutOfMemoryError`` names the partition only when one was refused, with what it holds.
Lifecycle: shut-down schedulers, closed managers and deleted partitions refuse further use
with a clear ``RuntimeError``; a task that would deadlock waiting for a task it submitted
raises ``SchedulerDeadlockError``. Sizes: every size argument takes bytes or the strings
``set_limit`` takes and names itself when refused. Runs on every backend.
"""

from __future__ import annotations

import gc
import importlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory
from pygpukit import scheduler as S
from pygpukit.errors import OutOfMemoryError, SchedulerDeadlockError

_rust: Any = importlib.import_module("pygpukit._rust")

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def _device() -> int:
    return memory.HOST_DEVICE if gp.backend_name() == "cpu" else int(gp.get_device())


@pytest.fixture
def no_limit() -> Iterator[None]:
    """No global limit on the pool the arrays use, before and after."""
    memory.set_limit(None, device=_device())
    yield
    memory.set_limit(None, device=_device())


# ----------------------------------------------------------------------------- scope

# Ways to allocate outside every partition; each returns something holding `nbytes`.
OUTSIDE: dict[str, Callable[[int], Any]] = {
    "array": lambda n: gp.empty((n,), dtype="uint8"),
    "memory_pool_block": lambda n: memory.MemoryPool(name="outside", device=_device()).allocate(n),
    "memory_pool_with_quota": lambda n: memory.MemoryPool(
        quota=n + MIB, name="outside-q", device=_device()
    ).allocate(n),
}


def _schedulers(kind: str) -> list[Any]:
    """Small schedulers (or managers) each with an admitted Guaranteed partition."""
    owners: list[Any] = []
    for total, request in ((4 * MIB, 2 * MIB), (MIB, 512 * KIB)):
        if kind == "scheduler":
            owner: Any = S.Scheduler(total, workers=1)
        else:
            owner = S.PartitionManager(S.PartitionConfig(total))
        owner.create_partition(f"p{total}", limits=S.PartitionLimits().memory(request))
        owners.append(owner)
    return owners


@pytest.mark.parametrize("owner_kind", ["scheduler", "manager"])
@pytest.mark.parametrize("way", list(OUTSIDE))
def test_allocations_outside_partitions_answer_only_to_the_global_limit(
    no_limit: None, owner_kind: str, way: str
) -> None:
    owners = _schedulers(owner_kind)  # 4 MiB and 1 MiB: far below what is allocated next
    big = OUTSIDE[way](64 * MIB)
    small = OUTSIDE[way](64)
    assert big is not None and small is not None
    # Inside a partition its own quota still holds.
    part = owners[1].get_partition("p1048576")
    with part, pytest.raises(OutOfMemoryError) as info:
        gp.empty((MIB,), dtype="uint8")
    assert info.value.partition == "p1048576"
    for owner in owners:
        if isinstance(owner, S.Scheduler):
            owner.shutdown()
        else:
            owner.close()


def test_a_task_in_the_default_partition_is_outside_the_partitions(no_limit: None) -> None:
    with S.Scheduler(MIB, workers=1) as sched:
        sched.create_partition("tiny", limits=S.PartitionLimits().memory(256 * KIB))
        task = sched.submit(lambda: gp.empty((32 * MIB,), dtype="uint8").nbytes)
        assert task.result(timeout=60) == 32 * MIB


def _partition_bytes(numeric_id: int) -> int:
    return int(memory.stats(_device()).get(f"partition.{numeric_id}.allocated_bytes", 0))


def _fill(held: list[Any], most: int = 512) -> None:
    """Allocate 1 MiB arrays into ``held`` until refused (fails after ``most`` of them)."""
    for _ in range(most):
        held.append(gp.empty((MIB,), dtype="uint8"))
    pytest.fail(f"{most} MiB were allocated without a refusal")


@pytest.mark.parametrize("case", ["partition_quota", "qos_reservation", "global_limit"])
def test_out_of_memory_names_the_refused_partition_and_what_it_holds(
    no_limit: None, case: str
) -> None:
    # Reservations are held back within the sum of the live schedulers' totals: drop the
    # default scheduler and unreferenced ones, so only this test's 32 MiB count.
    S.shutdown()
    gc.collect()
    held: list[Any] = []
    with S.Scheduler(32 * MIB, workers=1) as sched:
        sched.create_partition("guaranteed", limits=S.PartitionLimits().memory(24 * MIB))
        limits = S.PartitionLimits().memory(6 * MIB) if case == "partition_quota" else None
        part = sched.create_partition("batch", limits=limits)
        with pytest.raises(OutOfMemoryError) as info:
            if case == "global_limit":
                # Cached memory would serve allocations under any limit: release it first.
                memory.empty_cache(_device())
                memory.set_limit(memory.stats(_device())["reserved_bytes"] + 4 * MIB, _device())
                _fill(held)  # outside every partition
            with part:
                _fill(held)
        err = info.value
        assert err.requested == MIB
        if case == "global_limit":
            assert err.partition is None and "partition" not in str(err)
            assert err.limit_exceeded
        else:
            assert err.partition == "batch" and "'batch'" in str(err)
            # What the partition holds, not counting the refused request.
            assert err.in_use == _partition_bytes(part.numeric_id) >= len(held) * MIB
            assert err.limit_exceeded == (case == "partition_quota")
            if case == "partition_quota":
                assert err.limit == 6 * MIB and "larger memory limit" in str(err)
            else:
                assert "reserved for other partitions" in str(err)
        del held
        gc.collect()


# ----------------------------------------------------------------------------- lifecycle


def _owner(kind: str) -> Any:
    if kind == "scheduler":
        return S.Scheduler(16 * MIB, workers=1)
    return S.PartitionManager(S.PartitionConfig(16 * MIB))


def _end(owner: Any) -> None:
    if isinstance(owner, S.Scheduler):
        owner.shutdown()
    else:
        owner.close()


@pytest.mark.parametrize("kind", ["scheduler", "manager"])
def test_create_partition_after_the_end_is_refused(kind: str) -> None:
    owner = _owner(kind)
    _end(owner)
    with pytest.raises(RuntimeError, match=r"shutdown\(\)|close\(\)"):
        owner.create_partition("late", limits=S.PartitionLimits().memory(MIB))


def test_a_closed_manager_refuses_deletes_and_keeps_its_books() -> None:
    manager = _owner("manager")
    manager.create_partition("kept", limits=S.PartitionLimits().memory(MIB))
    manager.close()
    manager.close()  # twice: nothing more
    with pytest.raises(RuntimeError, match=r"close\(\)"):
        manager.delete_partition("kept")
    assert manager.get_partition("kept") is not None
    assert [p.id for p in manager.list_partitions()] == ["default", "kept"]


@pytest.mark.parametrize("kind", ["scheduler", "manager"])
def test_entering_a_deleted_partition_is_refused(kind: str) -> None:
    owner = _owner(kind)
    part = owner.create_partition("gone", limits=S.PartitionLimits().memory(MIB))
    with part:  # usable while it exists
        gp.empty((KIB,), dtype="uint8")
    owner.delete_partition(part)
    with pytest.raises(RuntimeError, match="was deleted"), part:
        pass
    _end(owner)


@pytest.mark.parametrize("kind", ["scheduler", "manager"])
def test_a_partition_of_an_ended_owner_runs_unenforced(kind: str, no_limit: None) -> None:
    owner = _owner(kind)
    part = owner.create_partition("free", limits=S.PartitionLimits().memory(MIB))
    _end(owner)
    with part:  # its 1 MiB quota is lifted with the owner's enforcement
        x = gp.empty((4 * MIB,), dtype="uint8")
    assert x.nbytes == 4 * MIB


# Ways to allocate; each returns an object holding the allocation.
ALLOCATE: dict[str, Callable[[], Any]] = {
    "empty": lambda: gp.empty((4 * KIB,), dtype="float32"),
    "from_numpy": lambda: gp.from_numpy(np.arange(1, 1025, dtype=np.float32)),
    "binary_op": lambda: gp.ones((256,)) + 1.0,
}


@pytest.mark.parametrize("kind", ["scheduler", "manager"])
@pytest.mark.parametrize("way", list(ALLOCATE))
def test_allocating_inside_a_deleted_partition_is_refused(kind: str, way: str) -> None:
    owner = _owner(kind)
    part = owner.create_partition("doomed", limits=S.PartitionLimits().memory(4 * MIB))
    with part:
        kept = gp.from_numpy(np.arange(1, 65, dtype=np.float32))
        owner.delete_partition(part)  # this thread is still inside it
        with pytest.raises(RuntimeError, match=r"partition \"doomed\" was deleted"):
            ALLOCATE[way]()
    np.testing.assert_array_equal(kept.to_numpy(), np.arange(1, 65, dtype=np.float32))
    ALLOCATE[way]()  # outside it again: fine
    del kept
    _end(owner)


@pytest.mark.parametrize("wait", ["result", "exception"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_task_waiting_on_tasks_it_submitted_with_every_worker_blocked_raises(
    wait: str, workers: int
) -> None:
    """A chain of `workers` nested waits blocks every worker: the wait that would block the
    last free one raises. One level fewer leaves a worker free for the innermost task."""

    def run(depth: int) -> int:
        # A fresh scheduler each time: after a detected deadlock the remaining waits of the
        # failed chain unwind in the background, still holding workers for a moment.
        with S.Scheduler(16 * MIB, workers=workers) as sched:

            def nest(level: int) -> int:
                if level == 0:
                    return 7
                inner = sched.submit(nest, level - 1)
                if wait == "result":
                    return int(inner.result())
                error = inner.exception()
                if error is not None:
                    raise error
                return int(inner.result())

            return int(sched.submit(nest, depth).result(timeout=60))

    with pytest.raises(SchedulerDeadlockError, match=f"all {workers} worker"):
        run(workers)
    assert run(workers - 1) == 7


def test_a_wait_with_a_timeout_is_not_a_deadlock() -> None:
    with S.Scheduler(16 * MIB, workers=1) as sched:
        gate = threading.Event()

        def outer() -> str:
            inner = sched.submit(gate.set)
            try:
                inner.result(timeout=0.05)  # comes back by itself: never counted as blocked
            except FutureTimeout:
                return "timed out"
            return "ran"

        assert sched.submit(outer).result(timeout=60) == "timed out"
        assert gate.wait(60), "the inner task ran once the worker was free"


# ----------------------------------------------------------------------------- sizes

# Every size argument of the scheduler and memory APIs: (make(value), read back the bytes).
SIZES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], int], str]] = {
    "PartitionLimits.memory": (
        lambda v: S.PartitionLimits().memory(v),
        lambda r: r.to_dict()["memory_request"],
        r"PartitionLimits\.memory\(bytes\)",
    ),
    "PartitionLimits.memory_request": (
        lambda v: S.PartitionLimits().memory_request(v),
        lambda r: r.to_dict()["memory_request"],
        r"PartitionLimits\.memory_request\(bytes\)",
    ),
    "PartitionLimits.memory_limit": (
        lambda v: S.PartitionLimits().memory_limit(v),
        lambda r: r.to_dict()["memory_limit"],
        r"PartitionLimits\.memory_limit\(bytes\)",
    ),
    "PartitionConfig.total_memory": (
        lambda v: S.PartitionConfig(v),
        lambda r: r.total_memory,
        r"PartitionConfig\(total_memory\)",
    ),
    "QosTaskMeta.guaranteed.memory": (
        lambda v: S.QosTaskMeta.guaranteed("t", "T", v),
        lambda r: r.memory_request,
        r"QosTaskMeta\.guaranteed\(memory\)",
    ),
    "QosTaskMeta.burstable.memory_request": (
        lambda v: S.QosTaskMeta.burstable("t", "T", v),
        lambda r: r.memory_request,
        r"QosTaskMeta\.burstable\(memory_request\)",
    ),
    "QosTaskMeta.burstable.memory_limit": (
        lambda v: S.QosTaskMeta.burstable("t", "T", 0, v),
        lambda r: r.memory_limit,
        r"QosTaskMeta\.burstable\(memory_limit\)",
    ),
    "QosPolicyEvaluator.total_memory": (
        lambda v: S.QosPolicyEvaluator(v),
        lambda r: r.available_memory,
        r"QosPolicyEvaluator\(total_memory\)",
    ),
    "Scheduler.total_memory": (
        lambda v: S.Scheduler(v, workers=1),
        lambda r: r.snapshot()["total_memory"],
        r"Scheduler\(total_memory\)",
    ),
    "Scheduler.submit.memory": (
        lambda v: _submitted(v),
        lambda r: r,
        r"submit\(memory\)",
    ),
    "MemoryPool.quota": (
        lambda v: memory.MemoryPool(quota=v, device=memory.HOST_DEVICE),
        lambda r: r.quota,
        r"MemoryPool\(quota\)",
    ),
    "MemoryPool.allocate.nbytes": (
        lambda v: memory.MemoryPool(device=memory.HOST_DEVICE).allocate(v),
        lambda r: r.nbytes,
        r"MemoryPool\.allocate\(nbytes\)",
    ),
    "host_buffer.nbytes": (lambda v: memory.host_buffer(v), lambda r: r.nbytes, r"nbytes"),
}


def _submitted(memory_arg: Any) -> int:
    """The memory a task submitted with ``memory=memory_arg`` claims, from the snapshot."""
    with S.Scheduler(64 * MIB, workers=1) as sched:
        sched.submit(lambda: None, memory=memory_arg, name="sized").result(timeout=60)
        return int(next(t["memory"] for t in sched.snapshot()["tasks"] if t["name"] == "sized"))


@pytest.mark.parametrize("site", list(SIZES))
@pytest.mark.parametrize(
    ("text", "expected"),
    [("3MiB", 3 * MIB), ("2 KiB", 2 * KIB), ("1000000", 1_000_000), ("1.5k", 1536)],
)
def test_size_strings_are_read_like_set_limit(site: str, text: str, expected: int) -> None:
    make, read, _ = SIZES[site]
    assert read(make(text)) == expected
    assert read(make(expected)) == expected


@pytest.mark.parametrize("site", list(SIZES))
@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (-1, ValueError),
        (-(1 << 70), ValueError),
        ("-5MiB", ValueError),
        ("lots", ValueError),
        ("3 parsecs", ValueError),
        ("0.5", ValueError),  # a fraction of the device is not a size
        (True, TypeError),
        (1.5e9, TypeError),
        ([1], TypeError),
    ],
)
def test_bad_sizes_are_refused_naming_the_argument(site: str, bad: Any, error: type) -> None:
    make, _, name = SIZES[site]
    with pytest.raises(error, match=name):
        make(bad)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: S.PartitionLimits().sms(-2), r"PartitionLimits\.sms\(count\)"),
        (lambda: S.PartitionLimits().compute(-0.5), r"PartitionLimits\.compute\(fraction\)"),
        (lambda: S.PartitionLimits().pacing(-1.0), r"PartitionLimits\.pacing\(rate"),
        (lambda: S.PartitionLimits().pacing(0.5, -3.0), r"PartitionLimits\.pacing\(rate"),
        (lambda: S.PartitionLimits().sms(0), r"PartitionLimits\.sms\(count\)"),
        (lambda: S.PartitionConfig(MIB, total_sms=-1), r"PartitionConfig\(total_sms\)"),
        (lambda: S.Scheduler(MIB, total_sms=0), r"Scheduler\(total_sms\)"),
        (lambda: S.Scheduler(MIB, workers=0), r"Scheduler\(workers\)"),
        (lambda: S.Scheduler(0), r"Scheduler\(total_memory\)"),
        (lambda: S.QosTaskMeta.guaranteed("t", "T", MIB, -0.5), r"guaranteed\(bandwidth\)"),
        (
            lambda: S.QosTaskMeta.burstable("t", "T", MIB, None, float("nan")),
            r"burstable\(bandwidth\)",
        ),
    ],
)
def test_other_negative_arguments_are_refused_naming_them(
    call: Callable[[], Any], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        call()

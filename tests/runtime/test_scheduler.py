"""gp.scheduler in simulation: partitions, QoS, admission, tasks, the state machine."""

from __future__ import annotations

import importlib
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import scheduler as S
from pygpukit.errors import AdmissionError, OutOfMemoryError

_rust: Any = importlib.import_module("pygpukit._rust")

GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def sched():
    s = S.Scheduler(8 * GIB, total_sms=132, workers=2)
    yield s
    s.shutdown(wait=True, cancel_pending=True)


def blocker(s: S.Scheduler, partition: S.Partition | None = None):
    """A running task that holds a worker until the returned event is set."""
    started, release = threading.Event(), threading.Event()

    def hold() -> str:
        started.set()
        release.wait()
        return "released"

    task = s.submit(hold, partition=partition, priority=1000, name="blocker")
    assert started.wait(10)
    return task, release


# -- the product brief's names ---------------------------------------------------------


def test_evaluator_admits_guaranteed_until_memory_is_reserved():
    evaluator = S.QosPolicyEvaluator(total_memory=8 * GIB, total_bandwidth=1.0)
    task = S.QosTaskMeta.guaranteed("task-1", "Critical Task", 256 * MIB)
    assert task.qos_class == "guaranteed" and task.memory_limit == 256 * MIB
    decision = evaluator.evaluate(task)
    assert decision and decision.admitted and decision.reserved_memory == 256 * MIB
    assert evaluator.available_memory == 8 * GIB, "evaluate reserves nothing"

    assert evaluator.admit(S.QosTaskMeta.guaranteed("big", "Big", 7 * GIB + 900 * MIB, 0.5))
    refused = evaluator.evaluate(task)
    assert not refused
    assert "memory short" in refused.reason and "task-1" in refused.reason
    assert evaluator.admit(S.QosTaskMeta.best_effort("batch", "Batch")).admitted
    evaluator.release("big")
    assert evaluator.admit(task).admitted
    assert evaluator.admitted_tasks() == ["batch", "task-1"]
    with pytest.raises(KeyError):
        evaluator.release("big")


def test_burstable_tasks_reserve_their_request_and_bandwidth():
    evaluator = S.QosPolicyEvaluator(total_memory=GIB, total_bandwidth=2.0)
    meta = S.QosTaskMeta.burstable("b", "B", 100 * MIB, 900 * MIB, bandwidth=1.5)
    decision = evaluator.admit(meta)
    assert decision.qos_class == "burstable"
    assert decision.reserved_memory == 100 * MIB
    assert decision.reserved_bandwidth == pytest.approx(1.5)
    assert evaluator.available_bandwidth == pytest.approx(0.5)
    second = evaluator.evaluate(S.QosTaskMeta.burstable("c", "C", MIB, None, bandwidth=1.0))
    assert not second.admitted and "compute short" in second.reason


def test_partition_manager_derives_qos_classes_like_kubernetes():
    manager = S.PartitionManager(S.PartitionConfig(total_memory=8 * GIB, total_sms=132))
    inference = manager.create_partition(
        "inference", "Inference", S.PartitionLimits().memory(4 * GIB).compute(0.5)
    )
    assert (inference.qos_class, inference.sms, inference.compute) == ("guaranteed", 66, 0.5)
    asr = manager.create_partition(
        "asr", "Speech", S.PartitionLimits().memory_request(GIB).memory_limit(3 * GIB).sms(33)
    )
    assert asr.qos_class == "burstable" and asr.compute == pytest.approx(0.25)
    batch = manager.create_partition("batch", "Batch", S.PartitionLimits())
    assert batch.qos_class == "best_effort"
    assert [p.id for p in manager.list_partitions()] == ["default", "inference", "asr", "batch"]
    assert manager.available_memory == 3 * GIB
    assert manager.available_compute == pytest.approx(0.25)
    manager.delete_partition("asr")
    assert manager.get_partition("asr") is None
    assert manager.available_memory == 4 * GIB


def test_refusals_raise_admission_error_saying_what_is_short():
    manager = S.PartitionManager(S.PartitionConfig(total_memory=8 * GIB))
    manager.create_partition("a", "A", S.PartitionLimits().memory(6 * GIB).compute(0.75))
    with pytest.raises(AdmissionError, match="memory short") as info:
        manager.create_partition("b", "B", S.PartitionLimits().memory(3 * GIB))
    # The refusal's details, set as attributes by the Rust core.
    details = vars(info.value)
    assert [details[k] for k in ("resource", "requested", "available", "partition")] == [
        "memory",
        3 * GIB,
        2 * GIB,
        "b",
    ]
    with pytest.raises(AdmissionError, match="compute short"):
        manager.create_partition("c", "C", S.PartitionLimits().compute(0.5))
    with pytest.raises(ValueError, match="already exists"):
        manager.create_partition("a", "A", S.PartitionLimits())
    with pytest.raises(ValueError, match="SM count"):
        manager.create_partition("d", "D", S.PartitionLimits().sms(8))
    with pytest.raises(AdmissionError, match="above the memory limit"):
        manager.create_partition(
            "e", "E", S.PartitionLimits().memory_request(2 * GIB).memory_limit(GIB)
        )


def test_partition_limits_chain_without_mutating():
    base = S.PartitionLimits().memory(GIB)
    derived = base.compute(0.25).priority(3).pacing(0.5, burst_ms=5.0)
    assert base.to_dict()["compute"] is None
    d = derived.to_dict()
    assert (d["memory_request"], d["memory_limit"], d["compute"], d["priority"]) == (
        GIB,
        GIB,
        0.25,
        3,
    )
    assert d["pacing"] == (0.5, 5.0, True)
    assert repr(derived).startswith("PartitionLimits().memory_request(1073741824)")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        base.compute(1.5)
    with pytest.raises(ValueError, match="pacing rate"):
        base.pacing(0.0)


# -- running tasks -------------------------------------------------------------------


def test_tasks_compute_real_results(sched):
    rng = np.random.default_rng()
    mats = [rng.standard_normal((64, 64)) for _ in range(8)]
    tasks = [sched.submit(np.linalg.norm, m @ m.T) for m in mats]
    for m, t in zip(mats, tasks, strict=True):
        assert t.result(timeout=30) == pytest.approx(np.linalg.norm(m @ m.T), rel=1e-12)
        assert t.state is S.TaskState.COMPLETED


def test_higher_classes_and_priorities_run_first(sched):
    single = S.Scheduler(8 * GIB, workers=1)
    try:
        g = single.create_partition("g", "G", S.PartitionLimits().memory(GIB).compute(0.5))
        b = single.create_partition("b", "B", S.PartitionLimits().memory_request(GIB))
        e = single.create_partition("e")
        gate, release = blocker(single)
        order: list[str] = []
        submitted = [
            single.submit(order.append, "e9", partition=e, priority=9),
            single.submit(order.append, "b0", partition=b),
            single.submit(order.append, "g0", partition=g),
            single.submit(order.append, "g5", partition=g, priority=5),
            single.submit(order.append, "b1", partition=b, priority=1),
        ]
        assert all(t.state is S.TaskState.PENDING for t in submitted)
        release.set()
        for t in [gate, *submitted]:
            t.result(timeout=30)
        assert order == ["g5", "g0", "b1", "b0", "e9"]
    finally:
        single.shutdown()


def test_tasks_run_inside_their_partition(sched):
    p = sched.create_partition("inference", "Inference", S.PartitionLimits().memory(GIB))
    inside = sched.submit(_rust.current_partition, partition=p).result(timeout=30)
    outside = sched.submit(_rust.current_partition).result(timeout=30)
    assert inside == p.numeric_id != 0
    assert outside == 0


def test_memory_claims_wait_until_they_fit(sched):
    p = sched.create_partition("b", "B", S.PartitionLimits().memory_request(0).memory_limit(100))
    started, release = threading.Event(), threading.Event()

    def hold() -> int:
        started.set()
        release.wait()
        return 60

    first = sched.submit(hold, partition=p, memory=60)
    assert started.wait(10)
    second = sched.submit(lambda: 40 + 20, partition=p, memory=60)
    # A worker is free, but 60 + 60 bytes exceed the partition's 100-byte limit.
    assert second.state is S.TaskState.PENDING
    assert p.usage()["memory_held"] == 60
    release.set()
    assert first.result(timeout=30) == 60 and second.result(timeout=30) == 60
    assert p.usage()["memory_held"] == 0


def test_tasks_that_can_never_fit_are_refused_at_submit(sched):
    p = sched.create_partition("small", "Small", S.PartitionLimits().memory(MIB))
    with pytest.raises(AdmissionError, match="memory short"):
        sched.submit(print, partition=p, memory=2 * MIB)
    with pytest.raises(KeyError, match="nope"):
        sched.submit(print, partition="nope")
    with pytest.raises(ValueError):
        sched.submit(print, memory=-1)
    with pytest.raises(TypeError):
        sched.submit(42)


def test_cancel_withdraws_pending_tasks_but_not_running_ones(sched):
    gates = [blocker(sched) for _ in range(2)]  # both workers busy
    queued = sched.submit(lambda: "never")
    assert queued.cancel() and queued.cancelled()
    assert queued.state is S.TaskState.CANCELLED
    assert queued.cancel(), "cancelling twice is still cancelled"
    running = gates[0][0]
    assert not running.cancel()
    assert running.state is S.TaskState.RUNNING
    for _, r in gates:
        r.set()
    assert running.result(timeout=30) == "released"
    assert not running.cancel()


def test_tasks_not_started_by_their_deadline_time_out(sched):
    gates = [blocker(sched) for _ in range(2)]
    late = sched.submit(lambda: "too late", deadline=0.0)
    for _, release in gates:
        release.set()
    with pytest.raises(TimeoutError, match="deadline"):
        late.result(timeout=30)
    assert late.state is S.TaskState.TIMED_OUT
    assert sched.submit(lambda: "fine", deadline=60.0).result(timeout=30) == "fine"
    with pytest.raises(ValueError, match="deadline"):
        sched.submit(print, deadline=-1.0)


def test_failures_propagate_and_are_recorded(sched):
    def boom() -> None:
        raise ArithmeticError("boom")

    task = sched.submit(boom, name="boom")
    with pytest.raises(ArithmeticError, match="boom"):
        task.result(timeout=30)
    assert task.state is S.TaskState.FAILED
    entry = next(t for t in sched.snapshot()["tasks"] if t["id"] == task.id)
    assert [s for s, _ in entry["history"]] == ["pending", "admitted", "running", "failed"]


def test_snapshot_shows_partitions_tasks_and_history(sched):
    g = sched.create_partition("g", "G", S.PartitionLimits().memory(2 * GIB).compute(0.5))
    done = sched.submit(sum, [1, 2, 3], partition=g, priority=4, memory=MIB, name="sum")
    assert done.result(timeout=30) == 6
    snap = sched.snapshot()
    assert snap["total_memory"] == 8 * GIB and snap["reserved_memory"] == 2 * GIB
    assert snap["reserved_compute"] == pytest.approx(0.5)
    part = next(p for p in snap["partitions"] if p["id"] == "g")
    assert (part["qos_class"], part["sms"], part["memory_held"]) == ("guaranteed", 66, 0)
    assert part["pacing"] == (1.0, 20.0, False)
    task = next(t for t in snap["tasks"] if t["id"] == done.id)
    assert (task["name"], task["partition"], task["priority"], task["state"]) == (
        "sum",
        "g",
        4,
        "completed",
    )
    times = [at for _, at in task["history"]]
    assert times == sorted(times)
    assert sched.forget_finished() >= 1
    assert all(t["id"] != done.id for t in sched.snapshot()["tasks"])
    assert done.state is S.TaskState.COMPLETED, "a forgotten task remembers how it ended"


def test_partitions_with_unfinished_tasks_cannot_be_deleted(sched):
    p = sched.create_partition("p", "P", S.PartitionLimits().memory(6 * GIB))
    gate, release = blocker(sched, p)
    with pytest.raises(RuntimeError, match="still has task"):
        sched.delete_partition(p)
    with pytest.raises(AdmissionError):
        sched.create_partition("q", "Q", S.PartitionLimits().memory(4 * GIB))
    release.set()
    gate.result(timeout=30)
    sched.delete_partition("p")
    assert sched.create_partition("q", "Q", S.PartitionLimits().memory(4 * GIB))
    with pytest.raises(KeyError):
        sched.get_partition("p")


def test_shutdown_runs_queued_work_then_refuses_more():
    s = S.Scheduler(GIB, workers=1)
    tasks = [s.submit(pow, 2, k) for k in range(10)]
    s.shutdown(wait=True)
    assert [t.result(timeout=0) for t in tasks] == [2**k for k in range(10)]
    with pytest.raises(RuntimeError, match="shut down"):
        s.submit(print)


# -- partitions and the memory pool ----------------------------------------------------


def test_with_partition_makes_it_current_and_nests(sched):
    a = sched.create_partition("a")
    b = sched.create_partition("b")
    before = _rust.current_partition()
    with a:
        assert (S.current_partition(), _rust.current_partition()) == (a, a.numeric_id)
        with b:
            assert _rust.current_partition() == b.numeric_id
        assert S.current_partition() is a
    assert _rust.current_partition() == before and S.current_partition() is None
    assert [p.id for p in sched.partitions()] == ["default", "a", "b"]
    assert sched.get_partition("default").qos_class is S.QosClass.BEST_EFFORT


def test_caller_mistakes_are_plain_errors(sched):
    with pytest.raises(TypeError, match="limits third"):
        sched.create_partition("x", S.PartitionLimits())
    with pytest.raises(ValueError, match="total_memory"):
        S.Scheduler(0)
    with pytest.raises(ValueError, match="workers"):
        S.Scheduler(GIB, workers=0)
    with pytest.raises(ValueError, match="non-empty"):
        sched.create_partition("")


def test_only_the_offending_partition_runs_out_of_memory(sched):
    guaranteed = sched.create_partition(
        "serving", "Serving", S.PartitionLimits().memory(64 * MIB).compute(0.5)
    )
    best_effort = sched.create_partition(
        "batch", "Batch", S.PartitionLimits().memory_limit(32 * MIB)
    )
    # Arrays, not raw host blocks: they come from the pool of the backend in use
    # (the GPU's on CUDA, the host pool on CPU), which is the one the snapshot reports.
    hog: list[object] = []
    with best_effort, pytest.raises(OutOfMemoryError) as info:
        while True:  # allocates until its own limit stops it
            hog.append(gp.empty((4 * MIB,), dtype="uint8"))
    assert info.value.partition == "batch"
    assert len(hog) >= 7
    with guaranteed:
        kept = [gp.empty((8 * MIB,), dtype="uint8") for _ in range(8)]  # its whole request
    usage = {p["id"]: p["memory_allocated"] for p in sched.snapshot()["partitions"]}
    assert usage["serving"] >= 64 * MIB and 28 * MIB <= usage["batch"] <= 32 * MIB
    del kept, hog


def test_default_scheduler_module_functions():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU fallback notice on machines without a GPU
        p = S.create_partition("module-level", limits=S.PartitionLimits().memory_request(MIB))
        try:
            assert S.get_partition("module-level") is p
            assert S.submit(abs, -3, partition=p).result(timeout=30) == 3
            assert any(t["partition"] == "module-level" for t in S.snapshot()["tasks"])
            S.delete_partition(p)
        finally:
            S.shutdown()

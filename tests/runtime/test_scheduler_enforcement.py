"""gp.scheduler enforcement in simulation: partition streams, reservations, pacing, arrays.

The GPU half (green contexts, pacing of real kernels) is tests/runtime/gpu/test_gpu_scheduler.py;
here the same API runs on the CPU backend: partitions get host streams, the host pool holds
reservations back and reclaims in QoS order, and the dispatch controller's pacing state is
registered and reported.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import scheduler as S
from pygpukit.benchmark.case import Timed
from pygpukit.benchmark.report import format_markdown
from pygpukit.benchmark.results import LibResult, Row, RunResult
from pygpukit.errors import OutOfMemoryError

_rust: Any = importlib.import_module("pygpukit._rust")

MIB = 1 << 20


def _on_cuda() -> bool:
    from pygpukit.backend.select import backend

    return bool(backend().name == "cuda")


# The fixture's 256 MiB and 16 SMs are the whole device only in simulation; on a GPU the pool
# also holds every other live array of the process, and partitions get green contexts.
simulation_only = pytest.mark.skipif(
    _on_cuda(), reason="asserts the CPU backend's simulated device (see test_gpu_scheduler.py)"
)


@pytest.fixture
def sched():
    s = S.Scheduler(256 * MIB, total_sms=16, workers=1)
    yield s
    s.shutdown(wait=True, cancel_pending=True)


def guaranteed(s: S.Scheduler, name: str = "online", memory: int = 128 * MIB) -> S.Partition:
    return s.create_partition(name, name, S.PartitionLimits().memory(memory).compute(0.5))


def test_with_partition_makes_its_stream_current_and_restores(sched, rand):
    online = guaranteed(sched)
    batch = sched.create_partition("batch")
    outside = gp.current_stream()
    with online:
        assert gp.current_stream() == online.stream
        assert online.stream != outside
        with batch:
            assert gp.current_stream() == batch.stream
            assert S.current_partition() is batch
        assert gp.current_stream() == online.stream
        x = gp.from_numpy(rand((64, 64)))
        y = (x * 2.0).to_numpy()  # work on the partition's stream computes normally
    assert gp.current_stream() == outside and S.current_partition() is None
    np.testing.assert_allclose(y, 2.0 * rand_copy(x), rtol=1e-6)


def rand_copy(x: gp.GPUArray) -> np.ndarray:
    return x.to_numpy().astype(np.float64)


@simulation_only
def test_placement_is_simulated_and_reports_the_reserved_sms(sched):
    online = guaranteed(sched)
    batch = sched.create_partition("batch")
    assert online.compute_mode == batch.compute_mode == "simulated"
    assert online.sm_count == 8  # half of total_sms=16, decided by the Rust core
    assert batch.sm_count is None
    assert online.compute_fallback_reason == ""  # nothing fell back: there is no device


@simulation_only  # a 256 MiB scheduler on a GPU the test process already uses more of
def test_arrays_remember_their_partition(sched, rand):
    online = guaranteed(sched)
    outside = gp.from_numpy(rand((32, 32)))
    with online:
        inside = gp.from_numpy(rand((256, 256)))
        view = inside[3:7]
    assert S.partition_of(inside) is online
    assert S.partition_of(view) is online  # a view shares its base's block
    assert S.partition_of(outside) is None
    with pytest.raises(AttributeError):
        S.partition_of(object())


def test_pacing_is_registered_and_reported_honestly(sched):
    online = guaranteed(sched, "paced-online")
    batch = sched.create_partition("paced-batch")
    slow = sched.create_partition(
        "paced-slow", "Slow", S.PartitionLimits().memory_request(MIB).pacing(0.25, 5.0, False)
    )
    stats = S.pacing_stats()
    assert stats["active"]
    entry = stats["partitions"][batch.numeric_id]
    assert (entry["qos_class"], entry["rate"], entry["yield_to_higher"]) == (
        "best_effort",
        1.0,
        True,
    )
    assert stats["partitions"][slow.numeric_id]["rate"] == 0.25
    assert stats["partitions"][slow.numeric_id]["burst_ms"] == pytest.approx(5.0)
    assert 0 in stats["partitions"], "work outside partitions counts as BestEffort"
    assert batch.pacing_active and slow.pacing_active
    assert not online.pacing_active, "nothing ranks above Guaranteed and its rate is 1"
    assert "active)" in repr(batch) and "inactive)" in repr(online)
    usage = batch.usage()
    assert usage["pacing_stats"]["qos_class"] == "best_effort"
    for p in (batch, slow, online):
        sched.delete_partition(p)
        assert p.numeric_id not in S.pacing_stats()["partitions"]


def test_pacing_max_hold_is_validated():
    with pytest.raises(ValueError, match="positive"):
        S.set_pacing_max_hold(0.0)
    S.set_pacing_max_hold(0.05)


@simulation_only
def test_best_effort_cannot_take_a_guaranteed_reservation(sched):
    gp.memory.empty_cache()
    online = guaranteed(sched)  # 128 of the scheduler's 256 MiB held back
    batch = sched.create_partition("batch")
    hog: list[object] = []
    with batch, pytest.raises(OutOfMemoryError) as info:
        while True:
            hog.append(gp.empty((8 * MIB,), dtype="uint8"))
    assert info.value.partition == "batch"
    taken = sum(8 * MIB for _ in hog)
    assert 64 * MIB <= taken <= 128 * MIB
    with online:  # its whole request, while BestEffort still holds what it got
        kept = [gp.empty((8 * MIB,), dtype="uint8") for _ in range(16)]
    usage = {p["id"]: p["memory_allocated"] for p in sched.snapshot()["partitions"]}
    assert usage["online"] >= 128 * MIB
    del kept, hog


def test_guaranteed_in_a_loop_next_to_a_best_effort_hog_never_fails(sched):
    gp.memory.empty_cache()
    online = guaranteed(sched, memory=64 * MIB)
    batch = sched.create_partition("batch")
    stop = threading.Event()
    errors: list[str] = []

    def hog() -> None:
        held: list[object] = []
        with batch:
            while not stop.is_set():
                try:
                    held.append(gp.empty((4 * MIB,), dtype="uint8"))
                except OutOfMemoryError as exc:
                    if exc.partition != "batch":
                        errors.append(f"hog got someone else's error: {exc}")
                    held = held[len(held) // 2 :]  # give some back, grab again

    thread = threading.Thread(target=hog)
    thread.start()
    try:
        with online:
            for _ in range(200):
                work = [gp.empty((4 * MIB,), dtype="uint8") for _ in range(16)]  # 64 MiB
                del work
    finally:
        stop.set()
        thread.join()
    assert not errors


def test_shutdown_ends_enforcement():
    s = S.Scheduler(64 * MIB, workers=1)
    online = s.create_partition("online", "Online", S.PartitionLimits().memory(48 * MIB))
    batch = s.create_partition("batch")
    assert batch.numeric_id in S.pacing_stats()["partitions"]
    s.shutdown()
    assert online.numeric_id not in S.pacing_stats()["partitions"]
    with batch:  # no reservation held back any more: 32 MiB fits
        x = gp.empty((32 * MIB,), dtype="uint8")
    del x


def test_partition_manager_partitions_are_enterable(rand):
    manager = S.PartitionManager(S.PartitionConfig(total_memory=64 * MIB))
    p = manager.create_partition("infer", "Infer", S.PartitionLimits().memory(16 * MIB))
    assert manager.get_partition("infer") is p
    assert [q.id for q in manager.list_partitions()] == ["default", "infer"]
    with p:
        x = gp.from_numpy(rand((64, 64)))
        assert gp.current_stream() == p.stream
        with pytest.raises(OutOfMemoryError):
            gp.empty((32 * MIB,), dtype="uint8")
    assert S.partition_of(x) is p
    assert p.usage()["memory_allocated"] >= x.nbytes
    with pytest.raises(TypeError, match="Scheduler"):
        p.submit(print)
    assert manager.delete_partition(p) is p
    assert manager.get_partition("infer") is None
    manager.close()


def test_report_lists_case_metrics():
    row = Row(
        key="isolation/guaranteed_latency[mode=partitions]",
        suite="isolation",
        op="guaranteed_latency",
        params={"mode": "partitions"},
        timing="wall",
    )
    row.libs["pygpukit"] = LibResult(
        "ok", times_ms=[1.0], inner=1, metrics={"p99_ratio": 1.1, "acceptance": "met"}
    )
    text = format_markdown(RunResult(environment={}, rows=[row]))
    assert "`guaranteed_latency mode=partitions` (pygpukit): p99_ratio=1.1, acceptance=met" in text
    assert LibResult.from_dict(row.libs["pygpukit"].to_dict()).metrics["p99_ratio"] == 1.1
    assert Timed(run=lambda i: i, check=lambda o: None).metrics is None


@simulation_only  # on a GPU the isolation suite itself runs the pair (benchmark)
def test_isolation_pair_runs_in_simulation():
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.registry import SuiteContext, registered_suites
    from pygpukit.benchmark.suites import isolation

    assert "isolation" in registered_suites()
    ctx = SuiteContext(
        backend="cpu",
        quick=True,
        data=DataCache(np.random.default_rng()),
        rng=np.random.default_rng(),
    )
    work, (rows, ref) = isolation.workload(gp, ctx, 32, 64)
    result = isolation.partitioned(gp, work, 0.05, 0.005)
    metrics = isolation.summary(result)
    assert len(result.alone_ms) == len(result.shared_ms) == 10
    assert all(t >= 0 for t in result.alone_ms + result.shared_ms)
    assert result.be_solo_per_s > 0 and result.be_shared_per_s > 0
    modes = {"green_context", "stream_priority"} if _on_cuda() else {"simulated"}
    assert metrics["compute_mode"] in modes
    assert metrics["p99_ratio"] == pytest.approx(metrics["p99_shared_ms"] / metrics["p99_alone_ms"])
    out = work.lat[2].to_numpy().astype(np.float64)[rows]
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def test_the_green_context_probe_accepts_a_stream_that_computes_right():
    # On the GPU the same probe guards every green-context stream before a partition uses it.
    assert S._probe(gp.current_stream()._impl) == ""


def test_dropping_a_scheduler_ends_its_enforcement():
    s = S.Scheduler(64 * MIB, workers=1)
    batch = s.create_partition("dropped-batch")
    s.create_partition("dropped-online", "Online", S.PartitionLimits().memory(32 * MIB))
    numeric = batch.numeric_id
    assert numeric in S.pacing_stats()["partitions"]
    del s  # no reference cycle through its partitions: collected at once
    assert numeric not in S.pacing_stats()["partitions"]
    with pytest.raises(RuntimeError, match="garbage-collected"):
        batch.usage()


class _FakeCudaBackend:
    """Just enough of the CUDA backend for placement: priorities and streams."""

    name = "cuda"

    def priority_range(self, device: int) -> tuple[int, int]:
        return 0, -5

    def Stream(self, device: int, priority: int) -> tuple[str, int]:
        return ("priority-stream", priority)


class _SplitFails:
    """A native module whose driver refuses every SM split (the H200's first run)."""

    def green_context_support(self, device: int) -> dict[str, Any]:
        return {
            "supported": True,
            "reason": "",
            "sm_count": 132,
            "granularity": 8,
            "unassigned": 132,
        }

    class GreenContext:
        @staticmethod
        def acquire(device: int, sm_count: int) -> Any:
            from pygpukit.errors import CudaError

            raise CudaError(
                915,
                "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
                "cuDevSmResourceSplitByCount: insufficient",
            )

        @staticmethod
        def unassigned(device: int) -> Any:
            return None


def test_a_driver_failure_placing_a_partition_falls_back_and_is_logged(sched, monkeypatch, caplog):
    from pygpukit.backend import select

    online = guaranteed(sched)
    monkeypatch.setattr(select, "backend", lambda: _FakeCudaBackend())
    monkeypatch.setattr(select, "native", lambda: _SplitFails())
    with caplog.at_level("WARNING", logger="pygpukit.scheduler"):
        placed = S._resolve_compute(online, 0)
    assert placed.mode == "stream_priority"
    assert placed.stream == ("priority-stream", -5)  # Guaranteed: the highest priority
    assert "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION" in placed.reason
    assert any(
        "priority stream" in r.getMessage() and "online" in r.getMessage() for r in caplog.records
    )

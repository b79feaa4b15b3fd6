"""gp.scheduler on the GPU: green-context partitions, pacing of real kernels, memory isolation."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import scheduler as S
from pygpukit.backend.select import native
from pygpukit.errors import OutOfMemoryError

pytestmark = pytest.mark.gpu

MIB = 1 << 20
GIB = 1 << 30


@pytest.fixture(autouse=True)
def leave_the_device_as_found():
    """Every test gives back what it allocated, cached blocks included.

    Later tests and subprocesses (the demo, the benchmark) need the memory: a test
    that filled the device must not leave the pool holding it.
    """
    try:
        yield
    finally:
        gc.collect()
        gp.memory.empty_cache()


def device_scheduler(workers: int = 1) -> S.Scheduler:
    info = gp.get_device_info()
    return S.Scheduler(int(info["total_memory"]), total_sms=int(info["sm_count"]), workers=workers)


def green_support() -> dict:
    return dict(native().green_context_support(gp.get_device()))


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def test_green_context_support_is_reported():
    support = green_support()
    if support["supported"]:
        assert support["sm_count"] == gp.get_device_info()["sm_count"]
        assert support["granularity"] >= 1
        assert 0 <= support["unassigned"] <= support["sm_count"]
    else:
        assert support["reason"], "an unsupported driver says why"


def test_partition_streams_run_kernels_correctly_with_their_sm_counts(make):
    support = green_support()
    a, b = make((512, 384), "float32"), make((384, 256), "float32")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    with device_scheduler() as sched:
        online = sched.create_partition(
            "gpu-online", "Online", S.PartitionLimits().memory(256 * MIB).compute(0.25)
        )
        batch = sched.create_partition("gpu-batch")
        if support["supported"]:
            assert online.compute_mode == "green_context", online.compute_fallback_reason
            granule = support["granularity"]
            assert online.sm_count % granule == 0
            assert online.sm_count <= max(online.sms, granule)  # rounded down, one granule at least
            assert online.sms - online.sm_count < granule
            # The partition without a share runs on the SMs nobody holds.
            assert batch.compute_mode == "green_context"
            assert batch.sm_count == green_support()["unassigned"]
            assert batch.sm_count + online.sm_count <= support["sm_count"]
        else:
            assert online.compute_mode == batch.compute_mode == "stream_priority"
            least, greatest = gp.Stream.priority_range()
            assert online.stream.priority == greatest and batch.stream.priority == least
        outs = {}
        for p in (online, batch):
            with p:
                assert gp.current_stream() == p.stream
                x, y = gp.from_numpy(a), gp.from_numpy(b)
                outs[p.id] = (x @ y).to_numpy()
                assert S.partition_of(x) is p
        for out in outs.values():
            assert rel_error(out, ref) < 1e-5


def test_green_contexts_of_two_partitions_hold_disjoint_sms():
    support = green_support()
    if not support["supported"]:
        pytest.skip(f"no green contexts: {support['reason']}")
    with device_scheduler() as sched:
        first = sched.create_partition("gpu-a", "A", S.PartitionLimits().sms(16))
        second = sched.create_partition("gpu-b", "B", S.PartitionLimits().sms(16))
        assert first.compute_mode == second.compute_mode == "green_context"
        total = first.sm_count + second.sm_count
        assert total <= support["sm_count"]
        # Both are carved out of the device's SMs at once: what is left excludes both.
        assert green_support()["unassigned"] <= support["sm_count"] - total


def test_guaranteed_never_runs_out_while_best_effort_allocates_to_oom():
    gp.memory.empty_cache()
    with device_scheduler() as sched:
        online = sched.create_partition(
            "gpu-guaranteed", "Guaranteed", S.PartitionLimits().memory(2 * GIB).compute(0.25)
        )
        batch = sched.create_partition("gpu-best-effort")
        stop = threading.Event()
        seen: list[BaseException] = []

        def hog() -> None:
            held: list[gp.GPUArray] = []
            with batch:
                while not stop.is_set():
                    try:
                        held.append(gp.empty((256 * MIB,), dtype="uint8"))
                    except OutOfMemoryError as exc:
                        seen.append(exc)
                        held = held[len(held) // 4 :]  # give some back, grab again

        thread = threading.Thread(target=hog)
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)  # BestEffort has filled the device
            assert seen, "BestEffort never ran out: the device is larger than expected"
            with online:
                for _ in range(20):  # its whole request, again and again
                    work = [gp.empty((256 * MIB,), dtype="uint8") for _ in range(8)]
                    for w in work:
                        w.fill(7)
                    del work, w  # `w` would keep the last block: 2 GiB + 256 MiB next round
        finally:
            stop.set()
            thread.join()  # the hog's arrays die with its thread
            gp.memory.empty_cache()
        assert all(getattr(e, "partition", None) == "gpu-best-effort" for e in seen)


def test_pacing_holds_best_effort_launches_while_guaranteed_work_is_pending(make):
    a = make((2048, 2048), "bfloat16")
    with device_scheduler(workers=2) as sched:
        online = sched.create_partition(
            "gpu-paced-online", "Online", S.PartitionLimits().memory(512 * MIB).compute(0.5)
        )
        batch = sched.create_partition("gpu-paced-batch")
        assert batch.pacing_active and not online.pacing_active
        with online:
            x = gp.from_numpy(a)
        stop = threading.Event()

        def saturate() -> None:
            with batch:
                y = gp.from_numpy(a)
                while not stop.is_set():
                    y @ y
                    gp.Event().record().synchronize()

        thread = threading.Thread(target=saturate)
        thread.start()
        try:
            with online:
                for _ in range(200):
                    x @ x
                    time.sleep(0.0005)
                gp.current_stream().synchronize()
        finally:
            stop.set()
            thread.join()
        stats = S.pacing_stats()["partitions"]
        assert stats[online.numeric_id]["launched"] >= 200
        assert stats[online.numeric_id]["held"] == 0
        assert stats[batch.numeric_id]["held"] > 0
        assert stats[online.numeric_id]["measured_ms"] > 0


def test_with_partition_charges_its_limit_on_the_gpu():
    with device_scheduler() as sched:
        small = sched.create_partition(
            "gpu-small", "Small", S.PartitionLimits().memory(64 * MIB).compute(0.1)
        )
        with small:
            kept = gp.empty((48 * MIB,), dtype="uint8")
            with pytest.raises(OutOfMemoryError) as info:
                gp.empty((32 * MIB,), dtype="uint8")
        assert info.value.partition == "gpu-small"
        assert small.usage()["memory_allocated"] >= 48 * MIB
        del kept


def test_deleting_a_partition_gives_its_cached_memory_back():
    gp.memory.empty_cache()
    before = gp.memory.stats()["reserved_bytes"]
    with device_scheduler() as sched:
        batch = sched.create_partition("gpu-cached")
        with batch:
            blocks = [gp.empty((64 * MIB,), dtype="uint8") for _ in range(8)]
            for b in blocks:
                b.fill(1)
        del blocks, b  # freed into the pool's cache, still held from the device
        assert gp.memory.stats()["reserved_bytes"] >= before + 8 * 64 * MIB
        sched.delete_partition(batch)
        # Other live arrays may share a segment with the partition's blocks: one block of slack.
        assert gp.memory.stats()["reserved_bytes"] <= before + 64 * MIB

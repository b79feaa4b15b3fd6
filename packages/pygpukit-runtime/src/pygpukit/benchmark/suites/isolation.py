"""isolation: a Guaranteed partition's latency next to a saturating BestEffort one.

A latency-critical loop (a ``LAT_N`` x ``LAT_N`` bf16 matmul issued every
``PERIOD_S``, each iteration's latency the event time from its issue to its
completion) runs for ``DURATION_S`` in a Guaranteed partition (memory reserved,
half the SMs), first alone, then while a BestEffort partition saturates the GPU
from another thread with back-to-back ``BE_N`` x ``BE_N`` bf16 matmuls (at most
``BE_DEPTH`` in flight, so that its launch queue never blocks the host).

Rows (time column: the Guaranteed loop's p99 latency while shared):

- ``guaranteed_latency mode=partitions``: the pair in partitions (green context
  for the Guaranteed share where the driver has them, stream priorities
  otherwise, kernel pacing in the dispatch controller);
- ``guaranteed_latency mode=plain``: the same pair on two ordinary streams, for
  contrast.

Metrics under the table: p50/p99 alone and shared, ``p99_ratio`` (acceptance:
<= 1.25 with partitions), BestEffort matmuls/s solo and shared and
``be_kept`` (acceptance: >= 0.40), the Guaranteed partition's compute mode and
SM count, and how often pacing held BestEffort launches. GPU only: on the CPU
backend the rows are skipped (there is no device to share).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..case import Case, Skip, Timed, unavailable
from ..checks import check_close
from ..peers import Library
from ..registry import Suite, SuiteContext

NAME = "isolation"
LAT_N = 4096
BE_N = 8192
PERIOD_S = 0.002
DURATION_S = 2.0
BE_DEPTH = 4
GUARANTEED_MEMORY = 1 << 30
GUARANTEED_COMPUTE = 0.5
P99_LIMIT = 1.25
BE_KEPT_MIN = 0.40
SAMPLE = 64
NOT_TORCH = "partitions are PyGPUkit's scheduler; PyTorch has no equivalent"


@dataclass
class Workload:
    """The operands of both loops, resident on the device."""

    gp: Any
    lat: tuple[Any, Any, Any]
    be: tuple[Any, Any, Any]


@dataclass
class PairResult:
    """What one run of the pair measured."""

    alone_ms: list[float]
    shared_ms: list[float]
    be_solo_per_s: float
    be_shared_per_s: float
    extra: dict[str, float | str] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def latency_loop(w: Workload, place: Any, duration_s: float, period_s: float) -> list[float]:
    """Issue the latency matmul every ``period_s``; each iteration's milliseconds.

    ``place`` is a context manager: a partition or a stream.
    """
    gp = w.gp
    a, b, c = w.lat
    count = max(2, int(duration_s / period_s))
    events = [(gp.Event(timing=True), gp.Event(timing=True)) for _ in range(count)]
    with place:
        start = time.perf_counter()
        for k, (issue, done) in enumerate(events):
            delay = start + k * period_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            issue.record()
            gp.matmul(a, b, out=c)
            done.record()
        events[-1][1].synchronize()
    return [issue.elapsed_time(done) for issue, done in events]


def saturate(w: Workload, place: Any, stop: threading.Event) -> tuple[int, float]:
    """Back-to-back BestEffort matmuls until ``stop``; returns (count, seconds)."""
    gp = w.gp
    a, b, c = w.be
    marks: list[Any] = []
    done = 0
    with place:
        start = time.perf_counter()
        while not stop.is_set():
            if len(marks) >= BE_DEPTH:
                marks.pop(0).synchronize()  # releases the GIL while it waits
            gp.matmul(a, b, out=c)
            marks.append(gp.Event().record())
            done += 1
        for mark in marks:
            mark.synchronize()
        elapsed = time.perf_counter() - start
    return done, elapsed


def be_throughput(w: Workload, place: Any, duration_s: float) -> float:
    """BestEffort matmuls per second with the device to itself."""
    stop = threading.Event()
    timer = threading.Timer(duration_s, stop.set)
    timer.start()
    count, elapsed = saturate(w, place, stop)
    timer.join()
    return count / elapsed


def run_pair(
    w: Workload, g_place: Any, be_place: Any, duration_s: float, period_s: float
) -> PairResult:
    """Guaranteed alone, BestEffort solo, then both at once."""
    latency_loop(w, g_place, min(0.2, duration_s), period_s)  # warm-up (kernels, streams)
    alone = latency_loop(w, g_place, duration_s, period_s)
    solo = be_throughput(w, be_place, duration_s)
    stop = threading.Event()
    box: dict[str, tuple[int, float]] = {}
    thread = threading.Thread(target=lambda: box.update(be=saturate(w, be_place, stop)))
    thread.start()
    try:
        time.sleep(min(0.2, duration_s / 4))  # let BestEffort fill the device first
        shared = latency_loop(w, g_place, duration_s, period_s)
    finally:
        stop.set()
        thread.join()
    count, elapsed = box["be"]
    return PairResult(alone, shared, solo, count / elapsed)


def summary(r: PairResult) -> dict[str, float | str]:
    """The metrics of one pair, acceptance ratios included."""
    p99_alone, p99_shared = percentile(r.alone_ms, 99), percentile(r.shared_ms, 99)
    out: dict[str, float | str] = {
        "p50_alone_ms": percentile(r.alone_ms, 50),
        "p99_alone_ms": p99_alone,
        "p50_shared_ms": percentile(r.shared_ms, 50),
        "p99_shared_ms": p99_shared,
        "p99_ratio": p99_shared / p99_alone,
        "be_solo_per_s": r.be_solo_per_s,
        "be_shared_per_s": r.be_shared_per_s,
        "be_kept": r.be_shared_per_s / r.be_solo_per_s,
    }
    out.update(r.extra)
    return out


def workload(gp: Any, ctx: SuiteContext, lat_n: int, be_n: int) -> tuple[Workload, Any]:
    """Operands on the device, and the latency matmul's float64 reference on a sample."""
    a, b = ctx.data.get((lat_n, lat_n), "bfloat16", 0), ctx.data.get((lat_n, lat_n), "bfloat16", 1)
    x, y = ctx.data.get((be_n, be_n), "bfloat16", 2), ctx.data.get((be_n, be_n), "bfloat16", 3)
    up = gp.from_numpy
    lat = (up(a), up(b), gp.empty((lat_n, lat_n), dtype=gp.bfloat16))
    be = (up(x), up(y), gp.empty((be_n, be_n), dtype=gp.bfloat16))
    rows = np.sort(ctx.rng.choice(lat_n, size=min(SAMPLE, lat_n), replace=False))
    ref = (rows, a[rows].astype(np.float64) @ b.astype(np.float64))
    return Workload(gp, lat, be), ref


def partitioned(gp: Any, w: Workload, duration_s: float, period_s: float) -> PairResult:
    """The pair in a Guaranteed and a BestEffort partition of a fresh scheduler."""
    from pygpukit.scheduler import PartitionLimits, Scheduler, pacing_stats

    info = gp.get_device_info()
    total = int(info["total_memory"])
    sms = int(info["sm_count"]) if info.get("backend") == "cuda" else None
    with Scheduler(total, total_sms=sms, workers=1) as sched:
        limits = PartitionLimits().memory(GUARANTEED_MEMORY).compute(GUARANTEED_COMPUTE)
        online = sched.create_partition("isolation-online", "Online", limits.priority(10))
        batch = sched.create_partition("isolation-batch", "Batch")
        try:
            r = run_pair(w, online, batch, duration_s, period_s)
            held = pacing_stats()["partitions"].get(batch.numeric_id) or {}
            r.extra = {
                "compute_mode": online.compute_mode,
                "guaranteed_sms": float(online.sm_count or 0),
                "best_effort_mode": batch.compute_mode,
                "best_effort_sms": float(batch.sm_count or 0),
                "fallback_reason": online.compute_fallback_reason or "-",
                "be_launches_held": float(held.get("held", 0)),
                "be_launches_forced": float(held.get("forced", 0)),
            }
        finally:
            sched.delete_partition(batch)
            sched.delete_partition(online)
    return r


def plain(gp: Any, w: Workload, duration_s: float, period_s: float) -> PairResult:
    """The same pair on two ordinary streams of equal priority."""
    return run_pair(w, gp.Stream(), gp.Stream(), duration_s, period_s)


def pair_case(ctx: SuiteContext, mode: str) -> Case:
    """One ``guaranteed_latency`` row: ``mode`` is ``partitions`` or ``plain``."""
    duration = DURATION_S / 4 if ctx.quick else DURATION_S

    def setup(lib: Library, copies: int) -> Timed:
        if not lib.on_gpu:
            raise Skip("isolation needs a CUDA GPU to share (CPU backend)")
        gp = lib.module
        w, (rows, ref) = workload(gp, ctx, LAT_N, BE_N)
        runs: list[dict[str, float | str]] = []

        def run(i: int) -> Any:
            gp.matmul(*w.lat[:2], out=w.lat[2])
            return w.lat[2]

        def check(out: Any) -> float:
            got = lib.download(out)[rows]
            return check_close(got, ref, "bfloat16", "latency matmul", 4.0)

        def measure(i: int) -> float:
            r = (partitioned if mode == "partitions" else plain)(gp, w, duration, PERIOD_S)
            runs.append(summary(r))
            return float(runs[-1]["p99_shared_ms"])

        def metrics() -> dict[str, float | str]:
            # The median run by p99 ratio: one coherent set of numbers, not a mix.
            ordered = sorted(runs, key=lambda m: float(m["p99_ratio"]))
            out = dict(ordered[len(ordered) // 2])
            out["runs"] = float(len(runs))
            if mode == "partitions":
                ok = float(out["p99_ratio"]) <= P99_LIMIT and float(out["be_kept"]) >= BE_KEPT_MIN
                out["acceptance"] = "met" if ok else "NOT met"
            return out

        return Timed(run=run, check=check, measure=measure, metrics=metrics)

    return Case(
        NAME,
        "guaranteed_latency",
        {"mode": mode, "n": LAT_N, "period_ms": PERIOD_S * 1e3, "be_n": BE_N},
        {"pygpukit": setup, "torch": unavailable(NOT_TORCH), "cupy": unavailable(NOT_TORCH)},
        timing="wall",
        requires=("matmul", "scheduler", "Event", "Stream"),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """The pair in partitions, then without, for contrast."""
    yield pair_case(ctx, "partitions")
    yield pair_case(ctx, "plain")


SUITE = Suite(NAME, "Guaranteed latency next to a saturating BestEffort partition", cases)

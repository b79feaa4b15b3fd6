"""How one case is measured on one library: check, warm up, time, take the median.

For each library the harness

1. skips it when PyGPUkit lacks an attribute the case requires, or the library
   lacks the case's dtype;
2. calls the case's setup, with several input sets when the problem fits in
   L2 (so repeated calls do not measure the cache);
3. runs the operation once and checks the result against the reference: a
   wrong result marks the measurement ``failed`` and fails the run;
4. warms up (module loads, run-time compiles, allocator growth stay out of the
   numbers) and estimates the time of one call;
5. times repetitions of ``inner`` back-to-back calls, ``inner`` chosen so one
   repetition lasts about ``target_rep_ms``, as many repetitions as fit in
   ``budget_s`` (between ``min_reps`` and ``max_reps``), and keeps them all;
   the report uses the median.

A case with ``interleave`` set runs steps 1-4 for every library first, then
alternates their repetitions (library A, library B, A, B, ...), so that a
change of conditions during the row (another process taking the CPU, clocks)
falls on all of them alike.
"""

from __future__ import annotations

import gc
import itertools
import math
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from .case import Case, CorrectnessError, Skip, Timed
from .peers import Library, PyGPUkitLibrary
from .results import LibResult, Row

__all__ = ["HarnessConfig", "copies_for", "measure", "run_case"]


@dataclass
class HarnessConfig:
    """Timing policy of a run (``--quick`` and ``--iterations`` adjust it)."""

    max_reps: int = 30
    min_reps: int = 5
    budget_s: float = 1.0
    warmup_s: float = 0.1
    target_rep_ms: float = 1.0
    #: L2 size of the device; 0 turns input rotation off (CPU backend).
    l2_bytes: int = 0


def copies_for(working_set: int, l2_bytes: int, limit: int = 64) -> int:
    """How many input sets to rotate through so repeated calls miss in L2.

    One set when the working set is at least twice the L2 size (or either is
    unknown); otherwise enough sets to cover three L2 sizes, at most ``limit``.
    """
    if l2_bytes <= 0 or working_set <= 0 or working_set >= 2 * l2_bytes:
        return 1
    return max(1, min(limit, math.ceil(3 * l2_bytes / working_set)))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def measure(case: Case, lib: Library, cfg: HarnessConfig) -> LibResult:
    """Check and time ``case`` on ``lib``; never raises for the library's own errors."""
    try:
        timed, copies, check_error = _prepare(case, lib, cfg)
        times, inner = _time(timed, lib, case, cfg)
        metrics = timed.metrics() if timed.metrics is not None else {}
    except Exception as exc:
        return _failure(exc)
    return LibResult(
        "ok",
        times_ms=times,
        inner=inner,
        copies=copies,
        check_error=check_error,
        metrics=metrics,
    )


def _prepare(case: Case, lib: Library, cfg: HarnessConfig) -> tuple[Timed, int, float | None]:
    """Steps 1-3 of the module doc: the set-up case on ``lib``, its copies, its check error.

    Raises ``Skip`` when the library cannot run the case, and whatever the setup, the run or
    the check raise (:func:`_failure` turns each into the library's result).
    """
    setup = case.setups.get(lib.name)
    if setup is None:
        raise Skip(f"no {lib.name} equivalent")
    if isinstance(lib, PyGPUkitLibrary):
        for name in case.requires:
            lib.require(name)
    dtype = case.params.get("dtype")
    if isinstance(dtype, str):
        why = lib.unsupported(dtype)
        if why:
            raise Skip(why)
    copies = copies_for(case.working_set, cfg.l2_bytes) if case.timing == "device" else 1
    timed = setup(lib, copies)
    out = timed.run(0)
    lib.synchronize()
    check_error = timed.check(out)
    del out
    return timed, copies, check_error


def _failure(exc: BaseException) -> LibResult:
    """The result of a library whose preparation or timing raised ``exc``."""
    if isinstance(exc, Skip):
        return LibResult("skipped", str(exc))
    if isinstance(exc, NotImplementedError):
        return LibResult("skipped", f"not implemented: {exc}" if str(exc) else "not implemented")
    if isinstance(exc, CorrectnessError):
        return LibResult("failed", f"wrong result: {exc}")
    detail = traceback.format_exc(limit=-3)
    return LibResult("failed", f"{_describe(exc)}\n{detail}")


class _Timing:
    """One library's warmed-up timing state: its call, timer and calls per repetition."""

    def __init__(self, timed: Timed, lib: Library, case: Case, cfg: HarnessConfig) -> None:
        self.timer = lib.timer(case.timing)
        counter = itertools.count(1)
        self.call = lambda: timed.run(next(counter))
        # Warm-up: at least two calls, then until warmup_s has passed.
        estimate = math.inf
        start = time.perf_counter()
        calls = 0
        while calls < 2 or (time.perf_counter() - start < cfg.warmup_s and calls < 1000):
            estimate = min(estimate, self.timer.measure(self.call, 1))
            calls += 1
        self.estimate = max(estimate, 1e-6)
        self.inner = max(1, min(10_000, math.ceil(cfg.target_rep_ms / self.estimate)))

    def rep(self) -> float:
        """Milliseconds per call over one repetition of ``inner`` calls."""
        return self.timer.measure(self.call, self.inner)


def measure_interleaved(
    case: Case, libraries: Iterable[Library], cfg: HarnessConfig
) -> dict[str, LibResult]:
    """Check every library, then time them in alternating repetitions (``Case.interleave``).

    The repetition count is what fits every library's calls in ``budget_s`` together (between
    ``min_reps`` and ``max_reps``). A library that fails or skips leaves the others timed.
    """
    results: dict[str, LibResult] = {}
    ready: dict[str, tuple[Timed, int, float | None, _Timing]] = {}
    for lib in libraries:
        try:
            timed, copies, err = _prepare(case, lib, cfg)
            if timed.measure is not None:  # a case with its own clock is not interleaved
                own, inner = _time(timed, lib, case, cfg)
                metrics = timed.metrics() if timed.metrics is not None else {}
                results[lib.name] = LibResult(
                    "ok", times_ms=own, inner=inner, copies=copies, check_error=err,
                    metrics=metrics,
                )  # fmt: skip
                continue
            ready[lib.name] = (timed, copies, err, _Timing(timed, lib, case, cfg))
        except Exception as exc:
            results[lib.name] = _failure(exc)
    if ready:
        per_round = sum(t.estimate * t.inner for *_, t in ready.values())
        reps = max(cfg.min_reps, min(cfg.max_reps, int(cfg.budget_s * 1e3 / per_round)))
        times: dict[str, list[float]] = {name: [] for name in ready}
        failed: set[str] = set()
        for _ in range(reps):
            for name, (*_, timing) in ready.items():
                if name in failed:
                    continue
                try:
                    times[name].append(timing.rep())
                except Exception as exc:
                    results[name] = _failure(exc)
                    failed.add(name)
        for name, (timed, copies, err, timing) in ready.items():
            if name in failed:
                continue
            try:
                metrics = timed.metrics() if timed.metrics is not None else {}
            except Exception as exc:
                results[name] = _failure(exc)
                continue
            results[name] = LibResult(
                "ok", times_ms=times[name], inner=timing.inner, copies=copies,
                check_error=err, metrics=metrics,
            )  # fmt: skip
    return results


def _time(timed: Timed, lib: Library, case: Case, cfg: HarnessConfig) -> tuple[list[float], int]:
    if timed.measure is not None:
        reps = cfg.min_reps
        return [timed.measure(i + 1) for i in range(reps)], 1
    timing = _Timing(timed, lib, case, cfg)
    reps = int(cfg.budget_s * 1e3 / (timing.estimate * timing.inner))
    reps = max(cfg.min_reps, min(cfg.max_reps, reps))
    return [timing.rep() for _ in range(reps)], timing.inner


def run_case(
    case: Case,
    libraries: Iterable[Library],
    cfg: HarnessConfig,
    peer_cache: dict[tuple[str, str], LibResult],
) -> Row:
    """Measure ``case`` on every library; peers' results are shared through ``peer_cache``."""
    row = Row(
        key=case.key,
        suite=case.suite,
        op=case.op,
        params=dict(case.params),
        timing=case.timing,
        bytes_moved=case.bytes_moved,
        flops=case.flops,
        ceiling=case.ceiling,
    )
    libraries = list(libraries)
    if case.interleave and not case.skip and len(libraries) > 1:
        row.libs.update(measure_interleaved(case, libraries, cfg))
        gc.collect()
        return row
    for lib in libraries:
        if case.skip:
            row.libs[lib.name] = LibResult("skipped", case.skip)
            continue
        cache_key = (case.peer_key, lib.name) if case.peer_key else None
        if cache_key and lib.name != "pygpukit" and cache_key in peer_cache:
            row.libs[lib.name] = peer_cache[cache_key]
            continue
        result = measure(case, lib, cfg)
        row.libs[lib.name] = result
        if cache_key and lib.name != "pygpukit":
            peer_cache[cache_key] = result
    gc.collect()  # this case's inputs go back to the pools before the next case
    return row

"""The ``asr`` benchmark suite runs end to end on the CPU backend (one small case)."""

from __future__ import annotations

from pygpukit.asr import benchmarks
from pygpukit.benchmark.data import DataCache
from pygpukit.benchmark.harness import HarnessConfig, measure
from pygpukit.benchmark.peers import PyGPUkitLibrary
from pygpukit.benchmark.registry import SuiteContext


def test_suite_cases_run(rng):
    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    cfg = HarnessConfig(min_reps=1, max_reps=1, budget_s=0.0, warmup_s=0.0)
    cases = list(benchmarks.SUITE.cases(ctx))
    assert [c.op for c in cases] == ["window"]
    result = measure(cases[0], PyGPUkitLibrary(), cfg)
    assert result.status == "ok", result.reason
    assert result.metrics["realtime"] > 0

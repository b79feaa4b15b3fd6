"""The ``tts`` benchmark suite runs end to end on the CPU backend's tiny shape."""

from __future__ import annotations

from pygpukit.benchmark.data import DataCache
from pygpukit.benchmark.harness import HarnessConfig, measure
from pygpukit.benchmark.peers import PyGPUkitLibrary
from pygpukit.benchmark.registry import SuiteContext
from pygpukit.tts import benchmarks


def test_suite_cases_run(rng):
    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(min_reps=2, max_reps=2, budget_s=0.0, warmup_s=0.0)
    ops = []
    for case in benchmarks.SUITE.cases(ctx):
        result = measure(case, lib, cfg)
        assert result.status == "ok", result.reason
        assert all(t > 0 for t in result.times_ms)
        ops.append(case.op)
        if case.op.startswith("synthesize"):
            assert result.metrics["audio_s_per_s"] > 0
    assert ops == ["synthesize", "synthesize_batch", "stream_first_chunk"]

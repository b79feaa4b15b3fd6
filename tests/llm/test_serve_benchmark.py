"""The ``serve`` benchmark suite runs end to end on the CPU backend (tiny shape): a server
subprocess, the startup row and the load rows with their latency metrics."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from pygpukit.benchmark.data import DataCache
from pygpukit.benchmark.harness import HarnessConfig, measure
from pygpukit.benchmark.peers import PyGPUkitLibrary
from pygpukit.benchmark.registry import SuiteContext
from pygpukit.llm import benchmarks as llm_benchmarks
from pygpukit.llm.serve import benchmarks


def test_serve_suite_cases_run(tmp_path, monkeypatch, rng):
    monkeypatch.setenv(llm_benchmarks.BENCH_DIR_ENV, str(tmp_path))
    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(min_reps=1, max_reps=1, budget_s=0.0, warmup_s=0.0)
    rows = []
    try:
        for case in benchmarks.SUITE.cases(ctx):
            result = measure(case, lib, cfg)
            assert result.status == "ok", result.reason
            assert all(t > 0 for t in result.times_ms)
            rows.append((case.op, case.params.get("clients")))
            if case.op == "load":
                m = result.metrics
                assert m["output_tok_s"] > 0 and m["ttft_p99_ms"] >= m["ttft_p50_ms"] > 0
    finally:
        benchmarks._stop_all()
    assert rows == [("startup", None), ("load", 1), ("load", 4)]

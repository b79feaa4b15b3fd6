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
                assert m["itl_p99_ms"] >= m["itl_p50_ms"] >= 0
                assert m["wave_tok_s"] > 0 and m["wave_ttft_p99_ms"] >= m["wave_ttft_p50_ms"] > 0
    finally:
        benchmarks._stop_all()
    assert rows == [("load", 1), ("load", 4), ("startup", None)]


def test_a_server_that_cannot_start_shows_its_stderr(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(RuntimeError, match="exited with status") as info:
        benchmarks._start([f"m={missing}"])
    assert str(missing) in str(info.value)  # the server's own error message came through


def test_models_variable_picks_the_shapes_and_gpu_rows(monkeypatch, rng):
    monkeypatch.setenv(benchmarks.MODELS_ENV, "smollm2-135m")
    ctx = SuiteContext(backend="cuda", quick=True, data=DataCache(rng), rng=rng)
    cases = list(benchmarks.SUITE.cases(ctx))
    assert {c.params["model"] for c in cases if "model" in c.params} == {"smollm2-135m"}
    assert [c.params.get("clients") for c in cases if c.op == "load"] == [1, 16, 64]
    assert all(c.params["requests"] > 1 for c in cases if c.op == "load")  # steady state
    monkeypatch.setenv(benchmarks.CLIENTS_ENV, "64")
    picked = [c.params for c in benchmarks.SUITE.cases(ctx) if c.op == "load"]
    assert [p["clients"] for p in picked] == [64]
    monkeypatch.delenv(benchmarks.CLIENTS_ENV)
    monkeypatch.setenv(benchmarks.PROMPTS_ENV, "1024")
    assert not [c for c in benchmarks.SUITE.cases(ctx) if c.op == "load"]  # --quick: 128 only
    monkeypatch.setenv(benchmarks.PROMPTS_ENV, "128")
    assert len([c for c in benchmarks.SUITE.cases(ctx) if c.op == "load"]) == 3
    monkeypatch.delenv(benchmarks.PROMPTS_ENV)
    iso = [c.params for c in cases if c.op == "isolation"]
    assert iso == [{"guaranteed": "smollm2-135m", "besteffort": "qwen2.5-0.5b"}]
    monkeypatch.delenv(benchmarks.MODELS_ENV)
    full = list(benchmarks.SUITE.cases(SuiteContext(backend="cuda", quick=False,
                                                    data=DataCache(rng), rng=rng)))  # fmt: skip
    loads = {(c.params["prompt"], c.params["clients"]) for c in full if c.op == "load"}
    assert loads == {(p, n) for p in (128, 1024) for n in (1, 16, 64)}
    monkeypatch.setenv(benchmarks.PROMPTS_ENV, "1024")
    monkeypatch.setenv(benchmarks.CLIENTS_ENV, "64")
    one = [c.params for c in benchmarks.SUITE.cases(SuiteContext(
        backend="cuda", quick=False, data=DataCache(rng), rng=rng)) if c.op == "load"]  # fmt: skip
    assert [(p["prompt"], p["clients"]) for p in one] == [(1024, 64)]
    assert {c.params["model"] for c in full if c.op == "startup"} == {"llama-3.1-8b"}


def test_prefill_chunk_variable_reaches_the_servers_arguments(monkeypatch):
    monkeypatch.setattr(benchmarks, "_checkpoint", lambda shape: f"/ckpt/{shape}")
    monkeypatch.delenv(benchmarks.PREFILL_CHUNK_ENV, raising=False)
    plain = benchmarks._serve_args("llama-3.1-8b", 320)
    assert "--prefill-chunk" not in plain and plain[0] == "llama-3.1-8b=/ckpt/llama-3.1-8b"
    monkeypatch.setenv(benchmarks.PREFILL_CHUNK_ENV, "192")
    assert benchmarks._serve_args("llama-3.1-8b", 320) == [*plain, "--prefill-chunk", "192"]
    monkeypatch.setenv(benchmarks.PREFILL_CHUNK_ENV, "-5")
    with pytest.raises(ValueError):
        benchmarks._serve_args("llama-3.1-8b", 320)

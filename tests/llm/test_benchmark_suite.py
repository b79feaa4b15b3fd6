"""The ``llm`` benchmark suite runs end to end (the CPU backend's tiny shape) and writes a
checkpoint that both pygpukit and transformers' safetensors layout accept."""

from __future__ import annotations

import numpy as np

from pygpukit.benchmark.data import DataCache
from pygpukit.benchmark.harness import HarnessConfig, measure
from pygpukit.benchmark.peers import PyGPUkitLibrary
from pygpukit.benchmark.registry import SuiteContext
from pygpukit.llm import benchmarks


def test_suite_cases_run(tmp_path, monkeypatch, rng):
    monkeypatch.setenv(benchmarks.BENCH_DIR_ENV, str(tmp_path))
    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(min_reps=2, max_reps=2, budget_s=0.0, warmup_s=0.0)
    ops = []
    for case in benchmarks.SUITE.cases(ctx):
        result = measure(case, lib, cfg)
        assert result.status == "ok", result.reason
        assert all(t > 0 for t in result.times_ms)
        ops.append(case.op)
        if case.op == "decode":
            assert case.bytes_moved > 0 and result.metrics["tokens_per_s"] > 0
    assert ops == ["load", "ttft", "decode"]


def test_checkpoint_matches_config(tmp_path):
    from pygpukit.llm.loading import open_checkpoint

    folder = benchmarks.write_random_checkpoint(tmp_path / "m", benchmarks.SHAPES["tiny"], seed=3)
    with open_checkpoint(folder) as ckpt:
        w = ckpt.load("float32", progress=False)
    embed = w["model.embed_tokens.weight"].to_numpy()
    assert embed.shape == (512, 128) and 0.01 < embed.std() < 0.03
    assert np.all(w["model.norm.weight"].to_numpy() == 1)
    again = benchmarks.write_random_checkpoint(tmp_path / "m", benchmarks.SHAPES["tiny"], seed=3)
    assert again == folder  # reused, not rewritten

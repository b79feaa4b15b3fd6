"""The ``llm`` benchmark suite runs end to end (the CPU backend's tiny shape) and writes a
checkpoint that both pygpukit and transformers' safetensors layout accept."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.benchmark.data import DataCache
from pygpukit.benchmark.harness import HarnessConfig, measure
from pygpukit.benchmark.peers import Library, PyGPUkitLibrary
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
        ops.append(case.op)
        assert result.status == "ok", result.reason
        assert all(t > 0 for t in result.times_ms)
        if case.op.startswith("decode"):
            assert case.bytes_moved > 0 and result.metrics["tokens_per_s"] > 0
    assert ops == ["load", "ttft", "decode", "decode", "ttft_hf", "decode_hf"]


def test_models_variable_picks_shapes(monkeypatch, rng):
    monkeypatch.setenv(benchmarks.MODELS_ENV, "tiny")
    ctx = SuiteContext(backend="cuda", quick=True, data=DataCache(rng), rng=rng)
    models = {case.params["model"] for case in benchmarks.SUITE.cases(ctx)}
    assert models == {"tiny"}
    rows = [
        (c.op, c.params.get("prompt"), c.params.get("batch")) for c in benchmarks.SUITE.cases(ctx)
    ]
    assert ("ttft", 128, None) in rows and ("ttft", 1024, None) in rows
    assert ("decode", 32, 1) in rows and ("decode", 32, 16) in rows


class _TorchOnCPU(Library):
    """The torch column with CPU tensors: the anchor's rows without a GPU."""

    name, on_gpu, version = "torch", False, "cpu"

    def __init__(self, torch):
        self.module, self.device = torch, torch.device("cpu")

    def upload(self, host, dtype):
        return self.module.from_numpy(host)

    def download(self, array):
        return np.asarray(array)

    def synchronize(self):
        pass

    def device_timer(self):
        raise NotImplementedError


def test_anchor_rows_run_on_cpu_tensors(tmp_path, monkeypatch, rng):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv(benchmarks.BENCH_DIR_ENV, str(tmp_path))
    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    lib = _TorchOnCPU(torch)
    cfg = HarnessConfig(min_reps=2, max_reps=2, budget_s=0.0, warmup_s=0.0)
    ran = []
    for case in benchmarks.SUITE.cases(ctx):
        if case.op not in ("ttft", "decode"):
            continue
        result = measure(case, lib, cfg)
        assert result.status == "ok", result.reason
        assert all(t > 0 for t in result.times_ms)
        ran.append((case.op, case.params.get("batch")))
        if case.op == "decode":
            assert result.metrics["tokens_per_s"] > 0
    assert ran == [("ttft", None), ("decode", 1), ("decode", 2)]


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

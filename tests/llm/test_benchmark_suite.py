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


@pytest.mark.parametrize("shape", ["llama-3.1-8b", "qwen2.5-0.5b", "tiny"])
def test_ttft_rows_count_the_prefill_gemm_flops(shape):
    """A ttft row's FLOPs are 2 x prompt x (every layer's linear weights) plus the head's one
    row, counted here from the checkpoint's tensor list; its ceiling is the bf16 GEMM rate."""
    from pygpukit.llm.config import ModelConfig
    from pygpukit.llm.models.llama import checkpoint_tensors

    cfg = ModelConfig.from_dict(benchmarks.SHAPES[shape])
    layer_weights = sum(
        int(np.prod(s)) for name, s, kind in checkpoint_tensors(cfg)
        if kind == "linear" and name.startswith("model.layers.")
    )  # fmt: skip
    head = cfg.vocab_size * cfg.hidden_size
    for prompt in (128, 1024):
        assert benchmarks._prefill_flops(shape, prompt) == 2 * prompt * layer_weights + 2 * head
    if shape == "llama-3.1-8b":  # 6.98e9 weights in the layers: ~14.3 TFLOP for 1024 tokens
        assert 14.2e12 < benchmarks._prefill_flops(shape, 1024) < 14.4e12
    rng = np.random.default_rng(0)
    ctx = SuiteContext(backend="cuda", quick=True, data=DataCache(rng), rng=rng)
    ttft = [c for c in benchmarks.SUITE.cases(ctx) if c.op == "ttft"]
    assert ttft and all(c.ceiling == "gemm_bfloat16" and c.flops > 0 for c in ttft)


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


def test_rows_variable_picks_row_kinds(monkeypatch, rng):
    monkeypatch.setenv(benchmarks.MODELS_ENV, "tiny")
    monkeypatch.setenv(benchmarks.ROWS_ENV, "ttft,decode_hf")
    ctx = SuiteContext(backend="cuda", quick=True, data=DataCache(rng), rng=rng)
    ops = [c.op for c in benchmarks.SUITE.cases(ctx)]
    assert ops == ["ttft", "ttft", "decode_hf"]
    monkeypatch.setenv(benchmarks.ROWS_ENV, "prefill")
    with pytest.raises(ValueError, match="prefill"):
        list(benchmarks.SUITE.cases(ctx))


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

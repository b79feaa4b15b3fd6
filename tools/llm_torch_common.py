"""What the llm tools that time PyGPUkit beside PyTorch share (imported by them, not run).

Random bfloat16 weights drawn by PyTorch on the GPU (shared with PyGPUkit through DLPack, no
checkpoint on disk, so the 8B shape is ready in a second), a model shape's PyGPUkit model and
PyTorch anchor over those weights, the prefill's weight-GEMM shapes and their time alone, and
wall-clock timing of prompt-to-first-token cases in interleaved rounds. Used by
``prefill_ttft.py``, ``prefill_profile.py`` and ``engine_batch_decode.py``. Needs torch with
CUDA.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.models.llama import checkpoint_tensors
from pygpukit.llm.torch_anchor import TorchAnchor
from pygpukit.ops.linear import linear


def prefill_arguments(description: str, rounds: int = 5) -> argparse.ArgumentParser:
    """A parser with the prefill tools' shared options: --shape, --layers, --prompt, --rounds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    parser.add_argument("--layers", type=int, default=0, help="cut the model (0: all layers)")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def random_weights(cfg: ModelConfig) -> dict[str, Any]:
    """bfloat16 torch tensors on the GPU under their Hugging Face names (norms are ones).

    Drawn from one seeded generator, so every tool (and every run) gets the same weights.
    """
    out = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, shape, kind in checkpoint_tensors(cfg):
        if kind == "norm":
            out[name] = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float32, device="cuda") * 0.02
            out[name] = t.to(torch.bfloat16)
            del t
    torch.cuda.synchronize()
    return out


def shape_config(shape: str, layers: int = 0) -> ModelConfig:
    """The config of a :data:`~pygpukit.llm.benchmarks.SHAPES` entry, cut to ``layers`` (0: all)."""
    conf = dict(SHAPES[shape])
    if layers:
        conf["num_hidden_layers"] = layers
    return ModelConfig.from_dict(conf)


class PrefillPair(NamedTuple):
    """A shape's PyGPUkit model and PyTorch anchor over the same weights (``weights``: torch's)."""

    cfg: ModelConfig
    weights: dict[str, Any]
    model: CausalLM
    anchor: TorchAnchor


def prefill_pair(shape: str, layers: int, prompt: int) -> PrefillPair:
    """Build both libraries' models of ``shape`` for prompts of up to ``prompt`` tokens."""
    cfg = shape_config(shape, layers)
    tw = random_weights(cfg)
    arrays = {k: gp.from_dlpack(v) for k, v in tw.items()}
    model = CausalLM(cfg, arrays, max_seq_len=prompt + 16)
    anchor = TorchAnchor(cfg, tw, max_batch=1, max_seq_len=prompt + 16)
    return PrefillPair(cfg, tw, model, anchor)


def gemm_shapes(cfg: ModelConfig, rows: int) -> list[tuple[int, int, int, int]]:
    """``(count, M, N, K)`` of a prefill's weight GEMMs (the head's last row included)."""
    h, layers = cfg.hidden_size, cfg.num_layers
    qkv = cfg.q_size + 2 * cfg.kv_size
    return [
        (layers, rows, qkv, h),
        (layers, rows, h, cfg.q_size),
        (layers, rows, 2 * cfg.intermediate_size, h),
        (layers, rows, h, cfg.intermediate_size),
        (1, 1, cfg.vocab_size, h),
    ]


def event_ms(fn: Callable[[], object], reps: int, lib: str) -> float:
    """Median GPU milliseconds per call over ``reps`` calls, each bracketed by ``lib``'s events.

    PyGPUkit and PyTorch run on different streams: each is timed with its own stream's events.
    One call first, untimed (plans, allocator).
    """
    fn()
    times = []
    for _ in range(reps):
        if lib == "torch":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        else:
            start, end = gp.Event(timing=True), gp.Event(timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return statistics.median(times)


def matmul_ms(cfg: ModelConfig, rows: int, lib: str, reps: int = 10) -> dict[str, float]:
    """Milliseconds of each prefill GEMM shape (times its count), in ``lib`` (torch/pygpukit).

    Keyed ``"MxNxK"``; their sum is the time the prefill's matmuls take alone.
    """
    out = {}
    for count, m, n, k in gemm_shapes(cfg, rows):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        if lib == "torch":
            fn: Callable[[], object] = functools.partial(torch.matmul, a, w.T)
        else:
            fn = functools.partial(linear, gp.from_dlpack(a), gp.from_dlpack(w))
        torch.cuda.synchronize()
        out[f"{m}x{n}x{k}"] = count * event_ms(fn, reps, lib)
    return out


def wall_ms(fn: Callable[[], object]) -> float:
    """Milliseconds of one call on the host, both libraries' GPU work drained first.

    ``fn`` returns once its result is on the host (a first token): no wait after it.
    """
    torch.cuda.synchronize()
    gp.synchronize()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def interleaved_ms(
    cases: dict[str, Callable[[], object]], rounds: int
) -> tuple[dict[str, object], dict[str, list[float]]]:
    """``(first results, wall milliseconds per round)`` of each case, timed in turn.

    Each case runs twice untimed first (plans, graphs, the allocator; the first results are
    returned to be compared), then once per round, the cases interleaved so that a slow
    stretch of the machine touches them all alike.
    """
    first = {name: fn() for name, fn in cases.items()}
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            times[name].append(wall_ms(fn))
    return first, times

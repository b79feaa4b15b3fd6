"""Where the GPU time of the serving engine's batched decode step goes, kernel by kernel.

usage: python tools/decode_step_profile.py [SHAPE] [--batch 64] [--split]

Needs a GPU and torch (its profiler reads the kernel times through CUPTI). Random bfloat16
weights of ``SHAPE`` (``pygpukit.llm.benchmarks.SHAPES``, default ``llama-3.1-8b``) are drawn on
the GPU as in ``tools/engine_batch_decode.py``; the engine decodes ``--batch`` sequences of
32-token prompts (64 new tokens each), and the CUDA graph of its largest decode step is replayed
alone: its milliseconds, then a per-kernel table (calls, total and mean microseconds per step) of
three profiled replays.
``--split`` profiles the step with q/k/v split by copies, rotated by ``ops.apply_rope`` and
written by ``ops.paged_kv_cache_write`` (the path before ``ops.rope_kv_paged_write``), for an
A/B on the same machine.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable

import engine_batch_decode as ebd
import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.engine import Engine, RequestParams, decode_graphs
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes

REPLAYS = 3


def decoded_engine(model: CausalLM, b: int) -> Engine:
    """An engine that has decoded ``b`` random 32-token prompts (its step graphs captured)."""
    rng = np.random.default_rng(0)
    blocks = b * -(-(ebd.PROMPT + ebd.NEW) // BLOCK_SIZE)
    engine = Engine(
        model, max_batch=b, max_batched_tokens=b * ebd.PROMPT, prefix_caching=False,
        kv_memory=blocks * block_bytes(model.config, model.decoder.model.dtype),
    )  # fmt: skip
    params = RequestParams(max_tokens=ebd.NEW, ignore_eos=True)
    for row in rng.integers(3, model.config.vocab_size, (b, ebd.PROMPT)).tolist():
        engine.submit(row, params, lambda _out: None)
    while engine.step() or engine.has_work():
        pass
    gp.synchronize()
    return engine


def replay_ms(replay: Callable[[], object], reps: int = 20) -> float:
    """Milliseconds per ``replay()`` (after three warm-up calls)."""
    for _ in range(3):
        replay()
    gp.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        replay()
    gp.synchronize()
    return (time.perf_counter() - start) * 1e3 / reps


def kernel_table(
    replay: Callable[[], object], replays: int = REPLAYS
) -> list[tuple[str, int, float]]:
    """``(kernel, calls per step, microseconds per step)`` of ``replay()``, slowest first."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
        gp.synchronize()
    calls: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type.name == "CUDA":
            calls[event.name] += 1
            micros[event.name] += event.device_time
    rows = [(name, calls[name] // replays, micros[name] / replays) for name in calls]
    return sorted(rows, key=lambda row: -row[2])


def main() -> None:
    """Print the step's time and its kernel table for the requested shape and batch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", nargs="?", default="llama-3.1-8b", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=64, help="sequences decoded together")
    parser.add_argument("--split", action="store_true", help="the unfused q/k/v path (A/B)")
    args = parser.parse_args()
    if args.split:
        del decode_graphs._PagedAttend.from_projection  # hidden_states then splits and rotates
    cfg = ModelConfig.from_dict(SHAPES[args.shape])
    weights = ebd.random_weights(cfg)  # kept alive: the model's arrays share their memory
    arrays = {name: gp.from_dlpack(t) for name, t in weights.items()}
    model = CausalLM(cfg, arrays, max_seq_len=ebd.PROMPT + ebd.NEW + 16)
    engine = decoded_engine(model, args.batch)
    captured = [s for s in engine.decode._shapes.values() if s.graph is not None]
    if not captured:
        raise SystemExit("no decode step was captured as a CUDA graph (see the log)")
    shape = max(captured, key=lambda s: s.bucket)
    print(f"device: {torch.cuda.get_device_name()}; {args.shape} batch {args.batch} (bucket "
          f"{shape.bucket}, table width {shape.width}){' split q/k/v' if args.split else ''}: "
          f"graph alone {replay_ms(shape.graph.replay):.3f} ms/step")  # fmt: skip
    rows = kernel_table(shape.graph.replay)
    total = sum(r[2] for r in rows)
    print(f"{sum(r[1] for r in rows)} kernels, {total:.1f} us of kernel time per step")
    print(f"{'kernel':<64} {'calls':>6} {'us/step':>9} {'us/call':>8} {'share':>6}")
    for name, n, us in rows:
        print(f"{name[:64]:<64} {n:>6} {us:>9.1f} {us / max(n, 1):>8.2f} {us / total:>6.1%}")


if __name__ == "__main__":
    main()

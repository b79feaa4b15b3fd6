"""Batched decode through the serving engine vs the PyTorch anchor, random weights in memory.

usage: python tools/engine_batch_decode.py SHAPE [SHAPE ...]  (pygpukit.llm.benchmarks.SHAPES)

Needs a GPU and torch. Weights are drawn by torch on the GPU and shared with PyGPUkit through
DLPack (no checkpoint on disk, so the 8B shape is ready in a second). For each batch of 1, 4,
16 and 64 sequences (32-token prompts, 64 new tokens): the engine's milliseconds per decode
step with the sampled ids read back every step (as a server steps), the CUDA graph of its
step replayed alone (the GPU's time, no host work), and the PyTorch anchor's graph replays.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from typing import Any, NamedTuple

import numpy as np
import torch
from llm_torch_common import random_weights

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes
from pygpukit.llm.torch_anchor import TorchAnchor

PROMPT, NEW = 32, 64
BATCHES = (1, 4, 16, 64)


def _collect(into: list[int], output: Any) -> None:
    """Engine sink: append a step's new token ids of one request to ``into``."""
    into.extend(output.token_ids)


class DecodeRun(NamedTuple):
    """One timed engine run.

    Milliseconds per decode step, per graph replay alone, the engine's decode shapes
    ``(bucket, width, captured)`` and every request's generated tokens.
    """

    ms: float
    gpu_ms: float
    shapes: list[tuple[int, int, bool]]
    tokens: list[list[int]]


def engine_decode(
    model: CausalLM, ids: list[list[int]], *, batch_invariant: bool = False
) -> DecodeRun:
    """Time the engine decoding ``NEW`` tokens for each prompt of ``ids`` (one batch).

    The engine steps as a server does (the sampled ids read back every step); the first run
    captures the graphs, the second is timed. ``batch_invariant``: the engine's
    batch-invariant mode.
    """
    b = len(ids)
    blocks = b * -(-(len(ids[0]) + NEW) // BLOCK_SIZE)
    engine = Engine(
        model, max_batch=b, max_batched_tokens=b * len(ids[0]), prefix_caching=False,
        kv_memory=blocks * block_bytes(model.config, model.decoder.model.dtype),
        batch_invariant=batch_invariant,
    )  # fmt: skip
    params = RequestParams(max_tokens=NEW, ignore_eos=True)

    def decode_steps() -> int:
        return engine.decode.replays + engine.decode.eager_steps

    def once() -> tuple[float, list[list[int]]]:
        toks: list[list[int]] = [[] for _ in range(b)]
        for row, t in zip(ids, toks, strict=True):
            engine.submit(row, params, functools.partial(_collect, t))
        while min(len(t) for t in toks) < 1:
            engine.step()
        gp.synchronize()
        before, start = decode_steps(), time.perf_counter()
        while engine.step() or engine.has_work():
            pass
        return (time.perf_counter() - start) * 1e3 / (decode_steps() - before), toks

    once()  # captures the graphs
    ms, toks = once()
    captured = [s for s in engine.decode._shapes.values() if s.graph is not None]
    gpu_ms = float("nan")
    if captured:
        shape = max(captured, key=lambda s: s.bucket)
        for _ in range(3):
            shape.graph.replay()
        gp.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            shape.graph.replay()
        gp.synchronize()
        gpu_ms = (time.perf_counter() - start) * 1e3 / 20
    return DecodeRun(ms, gpu_ms, engine.decode.shapes(), toks)


def anchor_decode(anchor: TorchAnchor, b: int, rng: np.random.Generator, vocab: int) -> float:
    """The anchor's milliseconds per graph-replayed decode step at batch b."""
    ids = rng.integers(3, vocab, (b, PROMPT))
    anchor.generate(ids, NEW)
    anchor.prefill(ids)
    torch.cuda.synchronize()
    start = time.perf_counter()
    anchor.decode(b, NEW - 1)
    anchor.tokens(b, PROMPT, NEW)
    return (time.perf_counter() - start) * 1e3 / (NEW - 1)


def main() -> None:
    """Print one line per library and batch for every shape named on the command line."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)  # capture failures show
    print(f"device: {torch.cuda.get_device_name()}")
    rng = np.random.default_rng(0)
    for name in sys.argv[1:] or ["qwen2.5-0.5b"]:
        cfg = ModelConfig.from_dict(SHAPES[name])
        start = time.perf_counter()
        tw = random_weights(cfg)
        arrays = {k: gp.from_dlpack(v) for k, v in tw.items()}
        model = CausalLM(cfg, arrays, max_seq_len=PROMPT + NEW + 16)
        print(f"== {name}: weights ready in {time.perf_counter() - start:.1f} s")
        for b in BATCHES:
            prompts = rng.integers(3, cfg.vocab_size, (b, PROMPT)).tolist()
            ms, gpu_ms, shapes, _ = engine_decode(model, prompts)
            print(f"pygpukit engine b={b}: {ms:.3f} ms/step = {b * 1e3 / ms:.0f} tok/s; "
                  f"graph alone {gpu_ms:.3f} ms; shapes {shapes}", flush=True)  # fmt: skip
        anchor = TorchAnchor(cfg, tw, max_batch=max(BATCHES), max_seq_len=PROMPT + NEW + 8)
        for b in BATCHES:
            ms = anchor_decode(anchor, b, rng, cfg.vocab_size)
            print(f"torch anchor b={b}: {ms:.3f} ms/step = {b * 1e3 / ms:.0f} tok/s", flush=True)
        del anchor, model, arrays, tw
        torch.cuda.empty_cache()
        gp.synchronize()
        gp.memory.empty_cache()


if __name__ == "__main__":
    main()

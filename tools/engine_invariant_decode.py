"""The cost of batch-invariant decode: the engine's decode step with and without it.

usage: python tools/engine_invariant_decode.py SHAPE [SHAPE ...]  (pygpukit.llm.benchmarks.SHAPES)

Needs a GPU and torch (random weights drawn on the GPU, as tools/engine_batch_decode.py does).
For batches of 1, 16 and 64 sequences (32-token prompts, 64 new tokens), in the default engine
and in ``Engine(batch_invariant=True)``: milliseconds per decode step as the engine steps (the
sampled ids read back every step), and the CUDA graph of the largest bucket replayed alone.
Also checks that the invariant engine's greedy answers at batch 16 equal those at batch 1.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import time
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from engine_batch_decode import random_weights

PROMPT, NEW = 32, 64
BATCHES = (1, 16, 64)


def _collect(into: list[int], output: Any) -> None:
    into.extend(output.token_ids)


def run(model: CausalLM, ids: list[list[int]], invariant: bool) -> tuple[float, float, list]:
    """``(ms per decode step, ms per graph replay alone, tokens per request)``."""
    b = len(ids)
    blocks = b * -(-(PROMPT + NEW) // BLOCK_SIZE)
    engine = Engine(
        model, max_batch=b, max_batched_tokens=b * PROMPT, prefix_caching=False,
        kv_memory=blocks * block_bytes(model.config, model.decoder.model.dtype),
        batch_invariant=invariant,
    )  # fmt: skip
    params = RequestParams(max_tokens=NEW, ignore_eos=True)

    def steps() -> int:
        return engine.decode.replays + engine.decode.eager_steps

    def once() -> tuple[float, list[list[int]]]:
        toks: list[list[int]] = [[] for _ in range(b)]
        for row, t in zip(ids, toks, strict=True):
            engine.submit(row, params, functools.partial(_collect, t))
        while min(len(t) for t in toks) < 1:
            engine.step()
        gp.synchronize()
        before, start = steps(), time.perf_counter()
        while engine.step() or engine.has_work():
            pass
        return (time.perf_counter() - start) * 1e3 / (steps() - before), toks

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
    return ms, gpu_ms, toks


def main() -> None:
    """One line per shape, mode and batch."""
    print(f"device: {gp.get_device_info(0)['name']}")
    rng = np.random.default_rng(0)
    for name in sys.argv[1:] or ["qwen2.5-0.5b"]:
        cfg = ModelConfig.from_dict(SHAPES[name])
        tw = random_weights(cfg)
        arrays = {k: gp.from_dlpack(v) for k, v in tw.items()}
        model = CausalLM(cfg, arrays, max_seq_len=PROMPT + NEW + 16)
        ids = rng.integers(3, cfg.vocab_size, (max(BATCHES), PROMPT)).tolist()
        answers: dict[int, list] = {}
        for invariant in (False, True):
            for b in BATCHES:
                ms, gpu_ms, toks = run(model, ids[:b], invariant)
                if invariant:
                    answers[b] = toks
                mode = "invariant" if invariant else "default"
                print(f"{name} {mode} b={b}: {ms:.3f} ms/step = {b * 1e3 / ms:.0f} tok/s; "
                      f"graph alone {gpu_ms:.3f} ms", flush=True)  # fmt: skip
        same = all(answers[b][: BATCHES[0]] == answers[BATCHES[0]] for b in BATCHES)
        # generate stops at an EOS id where the engine (ignore_eos) goes on: compare up to it.
        alone = [model.generate(row, max_new_tokens=NEW).token_ids for row in ids[:4]]
        equal = all(a == t[: len(a)] for a, t in zip(alone, answers[64], strict=False))
        print(
            f"{name} invariant: batch-1 answer equal in every batch: {same}; first 4 answers "
            f"of batch 64 equal generate: {equal}",
            flush=True,
        )
        del model, arrays, tw
        gp.synchronize()
        gp.memory.empty_cache()


if __name__ == "__main__":
    main()

"""The cost of batch-invariant decode: the engine's decode step with and without it.

usage: python tools/engine_invariant_decode.py SHAPE [SHAPE ...]  (pygpukit.llm.benchmarks.SHAPES)

Needs a GPU and torch (random weights drawn on the GPU, as tools/engine_batch_decode.py does).
For batches of 1, 16 and 64 sequences (32-token prompts, 64 new tokens), in the default engine
and in ``Engine(batch_invariant=True)``: milliseconds per decode step as the engine steps (the
sampled ids read back every step), and the CUDA graph of the largest bucket replayed alone
(both timed by ``engine_batch_decode.engine_decode``).
Also checks that the invariant engine's greedy answers at batch 16 equal those at batch 1.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from engine_batch_decode import NEW, PROMPT, engine_decode, random_weights

BATCHES = (1, 16, 64)


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
                ms, gpu_ms, _, toks = engine_decode(model, ids[:b], batch_invariant=invariant)
                if invariant:
                    answers[b] = toks
                mode = "invariant" if invariant else "default"
                print(f"{name} {mode} b={b}: {ms:.3f} ms/step = {b * 1e3 / ms:.0f} tok/s; "
                      f"graph alone {gpu_ms:.3f} ms", flush=True)  # fmt: skip
        same = all(answers[b][: BATCHES[0]] == answers[BATCHES[0]] for b in BATCHES)
        # generate stops at an EOS id where the engine (ignore_eos) goes on: compare up to it.
        alone = [model.generate(row, max_new_tokens=NEW).token_ids for row in ids[:4]]
        first_diff = [next((i for i, (x, y) in enumerate(zip(a, t, strict=False)) if x != y), None)
                      for a, t in zip(alone, answers[64], strict=False)]  # fmt: skip
        print(f"{name} invariant: batch-1 answer equal in every batch: {same}; first 4 answers "
              f"of batch 64 vs generate, first differing token (None: equal): {first_diff}",
              flush=True)  # fmt: skip
        del model, arrays, tw
        gp.synchronize()
        gp.memory.empty_cache()


if __name__ == "__main__":
    main()

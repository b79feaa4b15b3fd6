"""One round of the serve benchmark's 64-client row through the engine alone, no HTTP.

usage: python tools/engine_serve_round.py [SHAPE] [--profile]   (default llama-3.1-8b)

Needs a GPU and torch (random bf16 weights drawn on the GPU, shared through DLPack). 64
requests of 128 prompt tokens and 128 new, ``max_batched_tokens`` 2048 as the benchmark's
server: the prefill wall time (until every request has its first token), decode ms per step
with and without lookahead, whether both give the same tokens, and the decode graph replayed
alone. ``--profile``: then a host profile (cProfile) of the prefill steps.
"""

import cProfile
import functools
import io
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, "tools")
import engine_batch_decode as ebd

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes

B, PROMPT, NEW = 64, 128, 128
args = [a for a in sys.argv[1:] if not a.startswith("--")]
name = args[0] if args else "llama-3.1-8b"
cfg = ModelConfig.from_dict(SHAPES[name])
tw = ebd.random_weights(cfg)
model = CausalLM(cfg, {k: gp.from_dlpack(v) for k, v in tw.items()}, max_seq_len=PROMPT + NEW + 16)
rng = np.random.default_rng(0)
ids = rng.integers(3, cfg.vocab_size, (B, PROMPT)).tolist()
blocks = B * -(-(PROMPT + NEW) // BLOCK_SIZE)


def engine(lookahead: bool) -> Engine:
    """An engine over the shared model, its KV cache sized for the round."""
    return Engine(
        model,
        max_batch=B,
        max_batched_tokens=2048,
        prefix_caching=False,
        lookahead=lookahead,
        kv_memory=blocks * block_bytes(cfg, model.decoder.model.dtype),
    )


def run(
    e: Engine, profile: cProfile.Profile | None = None
) -> tuple[list[list[int]], float, float, int]:
    """One round: ``(tokens per request, prefill ms, decode ms per step, decode steps)``."""
    toks: list[list[int]] = [[] for _ in range(B)]
    params = RequestParams(max_tokens=NEW, ignore_eos=True)
    t0 = time.perf_counter()
    for row, t in zip(ids, toks, strict=True):
        e.submit(row, params, functools.partial(ebd._collect, t))
    if profile:
        profile.enable()
    while min(len(t) for t in toks) < 1:
        e.step()
    if profile:
        profile.disable()
    gp.synchronize()
    t1 = time.perf_counter()
    s0 = e.decode.replays + e.decode.eager_steps
    while e.step() or e.has_work():
        pass
    t2 = time.perf_counter()
    steps = e.decode.replays + e.decode.eager_steps - s0
    return toks, (t1 - t0) * 1e3, (t2 - t1) * 1e3 / max(steps, 1), steps


results = {}
for la in (True, False):
    e = engine(la)
    run(e)  # captures
    toks, pre, ms, steps = run(e)
    results[la] = toks
    print(
        f"lookahead={la}: prefill of {B}x{PROMPT} {pre:.1f} ms; decode {ms:.3f} ms/step over "
        f"{steps} steps = {B * 1e3 / ms:.0f} tok/s; lookahead steps {e.lookahead_steps}; "
        f"total {pre + ms * steps:.0f} ms for {B * NEW} tokens",
        flush=True,
    )
print("same tokens with and without lookahead:", results[True] == results[False])
shape = max((s for s in e.decode._shapes.values() if s.graph is not None), key=lambda s: s.bucket)
for _ in range(3):
    shape.graph.replay()
gp.synchronize()
t = time.perf_counter()
for _ in range(20):
    shape.graph.replay()
gp.synchronize()
print(
    f"graph alone (bucket {shape.bucket}, width {shape.width}): "
    f"{(time.perf_counter() - t) * 1e3 / 20:.3f} ms",
    flush=True,
)
if "--profile" in sys.argv:
    pr = cProfile.Profile()
    run(engine(True), pr)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print("### host profile of the prefill steps (first step: eager)\n" + s.getvalue())

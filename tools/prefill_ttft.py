"""Time to first token of a model shape against the PyTorch anchor, interleaved, on one GPU.

    python tools/prefill_ttft.py [--shape llama-3.1-8b] [--layers 32] [--prompt 1024]

Random bfloat16 weights are made on the GPU by PyTorch once and shared (DLPack, no copy) by
``pygpukit.llm.CausalLM`` and the PyTorch anchor (``pygpukit.llm.torch_anchor``: eager prefill
with SDPA). Each round times, in turn: PyGPUkit's prefill (``generate(max_new_tokens=1)``,
prompt to the first token on the host), the same with the projection split and transposed by
copies (the path before prefill attention read q/k/v in place; ``--no-old`` skips it) and the
anchor's eager prefill. Prints the medians, and the time the model's matmuls take in PyTorch
(each weight's GEMM of the prompt rows, timed alone, summed over the layers, plus the head's
last row): the acceptance compares TTFT with that matmul time. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm.benchmarks import SHAPES
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.models import llama
from pygpukit.llm.models.llama import checkpoint_tensors
from pygpukit.llm.torch_anchor import TorchAnchor


def random_weights(cfg: ModelConfig) -> dict[str, Any]:
    """bfloat16 torch tensors on the GPU under their Hugging Face names (norms are ones)."""
    out = {}
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, shape, kind in checkpoint_tensors(cfg):
        if kind == "norm":
            out[name] = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float32, device="cuda") * 0.02
            out[name] = t.to(torch.bfloat16)
    torch.cuda.synchronize()
    return out


def matmul_ms(cfg: ModelConfig, rows: int, reps: int = 20) -> float:
    """Milliseconds PyTorch takes for the prefill's weight GEMMs.

    Every layer's four GEMMs of the prompt rows, each timed alone, and the head's last row.
    """
    h = cfg.hidden_size
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    shapes = [(rows, h, qkv), (rows, cfg.q_size, h), (rows, h, 2 * cfg.intermediate_size)]
    shapes.append((rows, cfg.intermediate_size, h))
    total = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        total += cfg.num_layers * _torch_ms(functools.partial(torch.matmul, a, w.T), reps)
    a = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cfg.vocab_size, h, device="cuda", dtype=torch.bfloat16)
    return total + _torch_ms(lambda: a @ w.T, reps)


def _torch_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / reps


def _wall_ms(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    gp.synchronize()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    """Parse the arguments, build both models, time them in interleaved rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    parser.add_argument("--layers", type=int, default=0, help="cut the model (0: all layers)")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-old", action="store_true", help="skip the copying path")
    args = parser.parse_args()
    conf = dict(SHAPES[args.shape])
    if args.layers:
        conf["num_hidden_layers"] = args.layers
    cfg = ModelConfig.from_dict(conf)
    tw = random_weights(cfg)
    arrays = {k: gp.from_dlpack(v) for k, v in tw.items()}
    model = CausalLM(cfg, arrays, max_seq_len=args.prompt + 16)
    anchor = TorchAnchor(cfg, tw, max_batch=1, max_seq_len=args.prompt + 16)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, cfg.vocab_size, (1, args.prompt))
    prompt = ids[0].tolist()
    split = llama._UncachedAttend.from_projection

    def ours() -> object:
        return model.generate(prompt, max_new_tokens=1).token_ids

    def old() -> object:
        llama._UncachedAttend.from_projection = None  # type: ignore[assignment,method-assign]
        try:
            return model.generate(prompt, max_new_tokens=1).token_ids
        finally:
            llama._UncachedAttend.from_projection = split  # type: ignore[method-assign]

    def theirs() -> object:
        anchor.prefill(ids)
        return anchor.tokens(1, args.prompt, 1)

    cases = {"pygpukit": ours, "anchor (torch eager)": theirs}
    if not args.no_old:
        cases["pygpukit, copies"] = old
    first = {name: fn() for name, fn in cases.items()}  # warm-up: plans, graphs, allocator
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            times[name].append(_wall_ms(fn))
    mm = matmul_ms(cfg, args.prompt)
    base = statistics.median(times["anchor (torch eager)"])
    print(f"{args.shape} ({cfg.num_layers} layers), {args.prompt}-token prompt, bf16")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:22s} {med:8.2f} ms  x{base / med:.3f} vs anchor  "
            f"{med / mm:.3f}x the matmul time  (range {min(ts):.2f}-{max(ts):.2f})"
        )
    print(f"  matmuls alone (torch)  {mm:8.2f} ms")
    if not args.no_old:
        same = np.array_equal(np.asarray(first["pygpukit"]), np.asarray(first["pygpukit, copies"]))
        print(f"  first token equal with and without the copies: {same}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

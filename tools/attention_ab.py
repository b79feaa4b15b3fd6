"""Interleaved A/B timing of the attention kernels against PyTorch on one GPU.

    python tools/attention_ab.py [--rounds 3] [--calls 50]

Prefill (B=4, H=32, S=4096, D=128, bf16, causal and not) with each Hopper prefill kernel and
decode (B=8, 32/8 heads, 8192 cached tokens, D=128, bf16, contiguous and paged; PyTorch's row
is always the contiguous cache) with each tensor-core decode kernel: every variant and PyTorch
timed in turn, ``--rounds`` times over, so clock and power drift hit all of them alike (one
suite row after another does not). Prints the median GPU time per call of each and its ratio
to PyTorch's. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import numpy as np
import torch

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config


def _gp_us(fn: Callable[[], object], calls: int) -> float:
    start, end = gp.Event(timing=True), gp.Event(timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


def _torch_us(fn: Callable[[], object], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


#: A case: (knob, value) of ops.config to set first (None for PyTorch), and the call to time.
Case = tuple[tuple[str, str] | None, Callable[[], object]]


def _interleave(cases: dict[str, Case], rounds: int, calls: int) -> None:
    """Time every case once per round (after a warm-up call); print the medians.

    A knob change drops the cached plans, so each case sets its knob and plans in the warm-up
    call, outside the timing.
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (knob, fn) in cases.items():
            if knob is not None:
                config.set(**{knob[0]: knob[1]})
            fn()
            timer = _torch_us if knob is None else _gp_us
            times[name].append(timer(fn, calls))
    config.reload()
    base = statistics.median(times["torch"])
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = f"{min(ts):8.1f}-{max(ts):8.1f}"
        print(f"  {name:16s} {med:9.1f} us  x{base / med:.3f}  (range {spread})", flush=True)


def prefill(rounds: int, calls: int) -> None:
    """Causal and non-causal prefill at the suite's shape."""
    b, h, s, d = 4, 32, 4096, 128
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3)]
    tq = [torch.from_numpy(x).to("cuda", torch.bfloat16) for x in hosts]
    g = [gp.from_numpy(x.astype(gp.bfloat16)) for x in hosts]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for causal in (True, False):
        print(f"prefill B={b} H={h} S={s} D={d} bf16 causal={causal}")

        def theirs(c: bool = causal) -> object:
            return sdpa(*tq, is_causal=c)

        def ours(c: bool = causal) -> object:
            return ops.scaled_dot_product_attention(*g, is_causal=c)

        cases: dict[str, Case] = {"torch": (None, theirs)}
        for kernel in ("wgmma_tma", "wgmma_persist"):
            cases[kernel] = (("attention_kernel", kernel), ours)
        _interleave(cases, rounds, calls)


def decode(rounds: int, calls: int) -> None:
    """Decode over a contiguous and a paged (16-token blocks, shuffled) cache."""
    b, hq, hkv, n, d, block = 8, 32, 8, 8192, 128, 16
    rng = np.random.default_rng(1)
    qh = rng.standard_normal((b, hq, d)).astype(np.float32)
    kh, vh = (rng.standard_normal((b, hkv, n, d)).astype(np.float32) for _ in "kv")
    tq = torch.from_numpy(qh).to("cuda", torch.bfloat16).reshape(b, hq, 1, d)
    tk, tv = (torch.from_numpy(x).to("cuda", torch.bfloat16) for x in (kh, vh))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = gp.from_numpy(qh.astype(gp.bfloat16))
    lens = gp.from_numpy(np.full(b, n, np.int32))
    nb = n // block
    perm = rng.permutation(b * nb).astype(np.int32)

    def page(x: np.ndarray) -> np.ndarray:
        blocks = x.reshape(b, hkv, nb, block, d).transpose(0, 2, 1, 3, 4)
        out = np.empty_like(blocks.reshape(b * nb, hkv, block, d))
        out[perm] = blocks.reshape(b * nb, hkv, block, d)
        return out

    caches = {
        "contiguous": ((gp.from_numpy(x.astype(gp.bfloat16)) for x in (kh, vh)), None),
        "paged": (
            (gp.from_numpy(page(x).astype(gp.bfloat16)) for x in (kh, vh)),
            gp.from_numpy(perm.reshape(b, nb)),
        ),
    }
    for label, (kv, table) in caches.items():
        kc, vc = kv
        print(f"decode B={b} Hq={hq} Hkv={hkv} ctx={n} D={d} bf16 {label}")
        cases: dict[str, Case] = {"torch": (None, lambda: sdpa(tq, tk, tv, enable_gqa=True))}
        for kernel in ("mma2", "bulk2"):

            def fn(
                kc: gp.GPUArray = kc, vc: gp.GPUArray = vc, t: gp.GPUArray | None = table
            ) -> object:
                return ops.decode_attention(q, kc, vc, lens, block_table=t)

            cases[kernel] = (("decode_kernel", kernel), fn)
        _interleave(cases, rounds, calls)


def main() -> None:
    """Parse the arguments and run both A/B tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--only", choices=["prefill", "decode"])
    args = parser.parse_args()
    if args.only != "decode":
        prefill(args.rounds, args.calls)
    if args.only != "prefill":
        decode(args.rounds, args.calls * 4)


if __name__ == "__main__":
    main()

"""Interleaved A/B timing of the attention kernels against PyTorch on one GPU.

    python tools/attention_ab.py [--rounds 3] [--calls 50]

Prefill (B=4, H=32, S=4096, D=128, bf16, causal and not) with each Hopper prefill kernel; the
Llama-3.1-8B prefill shape (B=1, 32/8 heads, S=1024, causal) with q/k/v contiguous and as the
strided views the model passes (q a transposed [1, S, H, D] projection, k/v the first S slots of
a longer cache); decode (B=8, 32/8 heads, 8192 cached tokens, D=128, bf16, contiguous and
paged; PyTorch's row is always the contiguous cache) with each tensor-core decode kernel, its
splits merged in the kernel (fused) or by a second kernel, launched dependent or plainly; and
batch-1 decode over 32768 cached tokens (many splits): every variant and PyTorch timed in turn,
``--rounds`` times over, so clock and power drift hit all of them alike (one suite row after
another does not). Prints the median GPU time per call of each and its ratio to PyTorch's.
Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import attention, config


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


#: A case: the ops.config knobs to set first (None for PyTorch), and the call to time. The key
#: "schedule" sets the persistent prefill kernel's (item overhead, heads per group) instead.
Case = tuple[dict[str, Any] | None, Callable[[], object]]
#: The persistent prefill schedule's defaults (attention._prefill_schedule); "per_sm" sets the
#: bulk2 decode split's CTAs per SM.
_SCHEDULE = (attention._ITEM_OVERHEAD, attention._HEAD_GROUP)
_PER_SM = attention._DECODE_CTAS_PER_SM["bulk2"]


def _interleave(cases: dict[str, Case], rounds: int, calls: int) -> None:
    """Time every case once per round (after a warm-up call); print the medians.

    A knob change drops the cached plans, so each case sets its knobs and plans in the warm-up
    call, outside the timing.
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (knobs, fn) in cases.items():
            if knobs is not None:
                knobs = dict(knobs)
                overhead, group = knobs.pop("schedule", _SCHEDULE)
                attention._ITEM_OVERHEAD, attention._HEAD_GROUP = float(overhead), int(group)
                attention._DECODE_CTAS_PER_SM["bulk2"] = int(knobs.pop("per_sm", _PER_SM))
                config.reload()
                config.set(**knobs)
                attention.PREFILL_PLANS.clear()  # the warm-up call below plans again
                attention.DECODE_PLANS.clear()
            fn()
            timer = _torch_us if knobs is None else _gp_us
            times[name].append(timer(fn, calls))
    attention._ITEM_OVERHEAD, attention._HEAD_GROUP = _SCHEDULE
    attention._DECODE_CTAS_PER_SM["bulk2"] = _PER_SM
    config.reload()
    base = statistics.median(times["torch"])
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = f"{min(ts):8.1f}-{max(ts):8.1f}"
        print(f"  {name:24s} {med:9.1f} us  x{base / med:.3f}  (range {spread})", flush=True)


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
            cases[kernel] = ({"attention_kernel": kernel}, ours)
        if causal:  # schedules of the persistent kernel: (item overhead, heads per group)
            for sched in ((0.25, 8), (1.0, 8), (0.5, 6), (0.5, 12)):
                knobs = {"attention_kernel": "wgmma_persist", "schedule": sched}
                cases[f"persist ovh={sched[0]} grp={sched[1]}"] = (knobs, ours)
        _interleave(cases, rounds, calls)


def prefill_llama(rounds: int, calls: int) -> None:
    """The 8B model's prefill attention: contiguous inputs against the model's strided views."""
    s, hq, hkv, d, cap = 1024, 32, 8, 128, 4096
    rng = np.random.default_rng(2)
    qh = rng.standard_normal((1, s, hq, d)).astype(np.float32)
    kh, vh = (rng.standard_normal((1, hkv, cap, d)).astype(np.float32) for _ in "kv")
    tq = torch.from_numpy(qh).to("cuda", torch.bfloat16).transpose(1, 2).contiguous()
    tk, tv = (torch.from_numpy(x[:, :, :s]).to("cuda", torch.bfloat16) for x in (kh, vh))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q_tok = gp.from_numpy(qh.astype(gp.bfloat16))  # [1, S, H, D], as the projection leaves it
    kc, vc = (gp.from_numpy(x.astype(gp.bfloat16)) for x in (kh, vh))
    views = (q_tok.transpose(0, 2, 1, 3), kc[:, :, :s], vc[:, :, :s])
    packed = tuple(x.contiguous() for x in views)
    print(f"prefill B=1 Hq={hq} Hkv={hkv} S={s} D={d} bf16 causal (the 8B model's attention)")
    cases: dict[str, Case] = {
        "torch": (None, lambda: sdpa(tq, tk, tv, is_causal=True, enable_gqa=True)),
        "contiguous": ({}, lambda: ops.scaled_dot_product_attention(*packed, is_causal=True)),
        "strided views": ({}, lambda: ops.scaled_dot_product_attention(*views, is_causal=True)),
        "views + copies": (
            {},
            lambda: ops.scaled_dot_product_attention(
                *(x.contiguous() for x in views), is_causal=True
            ),
        ),
    }
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

        def fn(kc: gp.GPUArray = kc, vc: gp.GPUArray = vc, t: gp.GPUArray | None = table) -> object:
            return ops.decode_attention(q, kc, vc, lens, block_table=t)

        for kernel, combine, dep in DECODE_VARIANTS:
            knobs = {"decode_kernel": kernel, "decode_combine": combine, "dependent_launch": dep}
            cases[f"{kernel} {combine} pdl={dep}"] = (knobs, fn)
        for per_sm in (1, 3):  # bulk2's split: CTAs per SM (2 by default)
            cases[f"bulk2 fused per_sm={per_sm}"] = (
                {"decode_kernel": "bulk2", "per_sm": per_sm},
                fn,
            )
        _interleave(cases, rounds, calls)


#: Decode variants timed: (decode_kernel, decode_combine, dependent_launch).
DECODE_VARIANTS = [
    ("bulk2", "fused", "on"),
    ("bulk2", "fused", "off"),
    ("bulk2", "kernel", "on"),
    ("bulk2", "kernel", "off"),
    ("mma2", "fused", "on"),
]


def decode_long(rounds: int, calls: int) -> None:
    """Batch-1 decode over 32K cached tokens: dozens of splits for the merge."""
    b, hq, hkv, n, d = 1, 32, 8, 32768, 128
    rng = np.random.default_rng(3)
    qh = rng.standard_normal((b, hq, d)).astype(np.float32)
    kh, vh = (rng.standard_normal((b, hkv, n, d)).astype(np.float32) for _ in "kv")
    tq = torch.from_numpy(qh).to("cuda", torch.bfloat16).reshape(b, hq, 1, d)
    tk, tv = (torch.from_numpy(x).to("cuda", torch.bfloat16) for x in (kh, vh))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = gp.from_numpy(qh.astype(gp.bfloat16))
    kc, vc = (gp.from_numpy(x.astype(gp.bfloat16)) for x in (kh, vh))
    lens = gp.from_numpy(np.full(b, n, np.int32))
    print(f"decode B={b} Hq={hq} Hkv={hkv} ctx={n} D={d} bf16 contiguous")
    cases: dict[str, Case] = {"torch": (None, lambda: sdpa(tq, tk, tv, enable_gqa=True))}
    for kernel, combine, dep in DECODE_VARIANTS[:4]:
        knobs = {"decode_kernel": kernel, "decode_combine": combine, "dependent_launch": dep}
        cases[f"{kernel} {combine} pdl={dep}"] = (
            knobs,
            lambda: ops.decode_attention(q, kc, vc, lens),
        )
    _interleave(cases, rounds, calls)


def main() -> None:
    """Parse the arguments and run both A/B tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--only", choices=["prefill", "llama", "decode"])
    args = parser.parse_args()
    if args.only in (None, "prefill"):
        prefill(args.rounds, args.calls)
    if args.only in (None, "llama"):
        prefill_llama(args.rounds, args.calls * 4)
    if args.only in (None, "decode"):
        decode(args.rounds, args.calls * 4)
        decode_long(args.rounds, args.calls * 4)


if __name__ == "__main__":
    main()

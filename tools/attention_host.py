"""Host time per call of ``ops.decode_attention``, stage by stage, against PyTorch's decode.

    python tools/attention_host.py [--batch 8] [--ctx 8192] [--paged] [--reps 7] [--calls 100]

Why a decode row of the ``ops_attention`` suite can be slower than the kernel: the suite times
``inner`` back-to-back calls (about 1 ms of them, so ~8 at 8K) between two events on an idle
GPU, and the first call's host time before its launch sits between the start event and the
first kernel. Each library's row is its GPU time per call plus that latency over ``inner``.
This prints, for PyGPUkit and PyTorch at the suite's decode shape (32/8 heads, D=128, bf16):

- ``host``: host microseconds per call with the GPU left to run behind;
- ``latency``: one call between two events (best of ``reps`` x 20) minus the GPU time per call
  of ``calls`` back-to-back calls: what the start event waits for before the first kernel;
- ``suite-like``: 8 calls between two events, median of 30 repetitions, the two interleaved
  (what the suite's row measures), and their ratio;
- PyGPUkit's stages: the argument checks, the output allocation, the plan lookup, the plan's
  call with every array given (its launch included), and the kernel launch alone.

``--before MODULE`` also times the full call of another copy of the attention module (e.g.
``pygpukit.ops._attention_before``, an older ``attention.py`` copied into the package), to
compare two versions in one process. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from attention_ab import gp_us, host_us, random_cache, torch_us

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import attention

#: GPU microseconds per call of ``calls`` calls between two events (as the suite times).
Timer = Callable[[Callable[[], object], int], float]


def _host_us(fn: Callable[[], object], sync: Callable[[], None], calls: int, reps: int) -> float:
    """Median over ``reps`` of the host microseconds per call of ``calls`` calls (GPU behind)."""
    return statistics.median(host_us(fn, sync, calls) for _ in range(reps))


def _latency(timer: Timer, fn: Callable[[], object], calls: int, reps: int) -> str:
    """One call's time between two events (best of many) minus the steady GPU time per call."""
    single = min(timer(fn, 1) for _ in range(reps * 20))
    steady = statistics.median(timer(fn, calls) for _ in range(reps))
    return f"{single - steady:6.1f} us (one call {single:6.1f}, steady {steady:6.1f})"


def main() -> None:
    """Set up the decode shape, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=8192, help="a multiple of 1024")
    parser.add_argument("--paged", action="store_true", help="16-token blocks, shuffled")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--before", default="", help="another attention module to time too")
    args = parser.parse_args()
    b, hq, hkv, n, d, block = args.batch, 32, 8, args.ctx, 128, 16
    rng = np.random.default_rng(0)
    qh = rng.standard_normal((b, hq, d)).astype(gp.bfloat16)
    # 1024 random tokens repeated (long caches build fast; the values do not change the time).
    kh, vh = (random_cache(rng, b, hkv, n, d) for _ in "kv")
    q, lens = gp.from_numpy(qh), gp.from_numpy(np.full(b, n, np.int32))
    table = None
    if args.paged:
        nb = n // block
        perm = rng.permutation(b * nb).astype(np.int32)

        def page(x: np.ndarray) -> np.ndarray:
            blocks = x.reshape(b, hkv, nb, block, d).transpose(0, 2, 1, 3, 4)
            out = np.empty_like(blocks.reshape(b * nb, hkv, block, d))
            out[perm] = blocks.reshape(b * nb, hkv, block, d)
            return out

        kc, vc = gp.from_numpy(page(kh)), gp.from_numpy(page(vh))
        table = gp.from_numpy(perm.reshape(b, nb))
    else:
        kc, vc = gp.from_numpy(kh), gp.from_numpy(vh)
    tq = torch.from_numpy(qh.astype(np.float32)).to("cuda", torch.bfloat16).reshape(b, hq, 1, d)
    tk = torch.from_numpy(kh.astype(np.float32)).to("cuda", torch.bfloat16)
    tv = torch.from_numpy(vh.astype(np.float32)).to("cuda", torch.bfloat16)
    del kh, vh
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def theirs() -> object:
        return sdpa(tq, tk, tv, enable_gqa=True)

    def ours() -> object:
        return ops.decode_attention(q, kc, vc, lens, block_table=table)

    layout = "paged" if args.paged else "contiguous"
    print(f"decode B={b} Hq={hq} Hkv={hkv} ctx={n} D={d} bf16 {layout}")
    for fn in (ours, theirs):  # plans, compiles, allocator growth
        for _ in range(3):
            fn()
    gp.synchronize()
    torch.cuda.synchronize()
    calls, reps = args.calls, args.reps
    gsync, tsync = gp.synchronize, torch.cuda.synchronize

    fns: dict[str, tuple[Callable[[], object], Callable[[], None], Timer]] = {
        "pygpukit": (ours, gsync, gp_us),
        "torch": (theirs, tsync, torch_us),
    }
    if args.before:
        try:
            old = importlib.import_module(args.before)
        except ImportError as exc:  # a diagnostic: report and time the rest
            print(f"  --before {args.before}: not importable ({exc})")
        else:

            def before() -> object:
                return old.decode_attention(q, kc, vc, lens, block_table=table)

            for _ in range(3):
                before()
            fns["pygpukit before"] = (before, gsync, gp_us)
    for name, (fn, sync, _) in fns.items():
        print(f"  host {name:18s} {_host_us(fn, sync, calls, reps):6.1f} us per call")
    for name, (fn, _, timer) in fns.items():
        print(f"  latency {name:15s} {_latency(timer, fn, calls, reps)}")
    suite: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(30):
        for name, (fn, _, timer) in fns.items():
            suite[name].append(timer(fn, 8))
    base = statistics.median(suite["torch"])
    for name, ts in suite.items():
        med = statistics.median(ts)
        print(f"  suite-like {name:12s} {med:6.1f} us per call (8 a repetition)  x{base / med:.3f}")

    # PyGPUkit's stages, each alone.
    _stages(q, kc, vc, lens, table, calls, reps)


def _stages(
    q: gp.GPUArray,
    kc: gp.GPUArray,
    vc: gp.GPUArray,
    lens: gp.GPUArray,
    table: gp.GPUArray | None,
    calls: int,
    reps: int,
) -> None:
    """Host time of each stage of ``ops.decode_attention`` alone."""
    max_blocks, capacity, scale = attention.check_decode(q, kc, vc, lens, table, None)
    plan = attention.decode_plan(q, kc, max_blocks, capacity)
    out = gp.empty(tuple(q.shape), q.dtype)
    shape, dtype = tuple(q.shape), q.dtype
    stages: dict[str, Callable[[], object]] = {
        "checks": lambda: attention.check_decode(q, kc, vc, lens, table, None),
        "gp.empty (output)": lambda: gp.empty(shape, dtype),
        "plan lookup": lambda: attention.decode_plan(q, kc, max_blocks, capacity),
        "plan call (launch)": lambda: plan(q, kc, vc, lens, table, out, scale),
        "full op, out given": lambda: ops.decode_attention(
            q, kc, vc, lens, block_table=table, out=out
        ),
        "current_stream": gp.current_stream,
        "torch.empty (output)": lambda: torch.empty(shape, device="cuda", dtype=torch.bfloat16),
    }
    if isinstance(plan, attention.DecodePlan):
        stages["kernel launch alone"] = _launch_only(plan, q, kc, vc, lens, table, out, scale)
    stages.update(_empty_launches())
    for name, fn in stages.items():
        us = _host_us(fn, gp.synchronize, calls, reps)
        print(f"  stage {name:22s} {us:6.2f} us per call")


def _empty_launches() -> dict[str, Callable[[], object]]:
    """Launches of an empty kernel with 1 and 12 array arguments (the packing cost per array)."""
    params = ", ".join(f"float* a{i}" for i in range(12))
    src = (
        'extern "C" __global__ void noop1(float* a0, int n) {}\n'
        f'extern "C" __global__ void noop12({params}, int n) {{}}\n'
    )
    module = gp.jit_module(src, ["noop1", "noop12"])
    x = gp.empty((256,), gp.float32)
    one, twelve = (x, 1), (*([x] * 12), 1)
    k1, k12 = module["noop1"], module["noop12"]
    return {
        "empty kernel, 1 array": lambda: k1.launch(1, 32, one),
        "empty kernel, 12 arrays": lambda: k12.launch(1, 32, twelve),
    }


def _launch_only(
    plan: attention.DecodePlan,
    q: gp.GPUArray,
    kc: gp.GPUArray,
    vc: gp.GPUArray,
    lens: gp.GPUArray,
    table: gp.GPUArray | None,
    out: gp.GPUArray,
    scale: float,
) -> Callable[[], object]:
    """The plan's main kernel launch with its arguments packed once.

    In DecodePlan.__call__'s order: the floor of the op's host time, the native launch alone.
    """
    o_part, lse = plan.workspace()  # (0, 0) unsplit
    counters = gp.zeros((plan.fused,), np.int32) if plan.fused else 0  # the kernel leaves zeros
    args: tuple[Any, ...] = (
        q, kc, vc, lens, table if table is not None else 0, out, o_part, lse, counters,
        *plan.tail, scale, plan.early,
    )  # fmt: skip
    if plan.box:
        args += (plan._tensor_map(kc, q.shape[2]), plan._tensor_map(vc, q.shape[2]))
    main = plan.launch

    def launch() -> None:
        main.kernel.launch(
            main.grid, main.block, args, shared_mem=main.shared_mem, dependent=plan.dependent
        )

    return launch


if __name__ == "__main__":
    main()

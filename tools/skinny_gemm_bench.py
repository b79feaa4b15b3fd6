"""Skinny-M linear vs cuBLASLt and PyTorch at the Llama-3.1-8B decode shapes, on one GPU.

    python tools/skinny_gemm_bench.py [--rows 1,16,64] [--rounds 3] [--calls 20] [--splits]

For each weight shape of the 8B model (q/k/v fused [6144, 4096], o_proj [4096, 4096], gate/up
fused [28672, 4096], down [4096, 14336], lm_head [128256, 4096]; bfloat16) and each M:
``ops.skinny_linear`` (its automatic split), cuBLASLt (``gp.linalg.matmul_nt``, what
``ops.linear`` runs above 8 rows without the skinny kernel), ``ops.linear`` for M <= 8 (its GEMV
kernels), and ``torch.nn.functional.linear``. Every call reads a
different copy of the weight (as many copies as exceed the L2 cache twice over), so the weight
comes from DRAM as it does inside a decode step, where each layer's weights are read once. Each
variant is timed in turn, ``--rounds`` times over (clock drift hits all alike); the table gives
the median time per call, the weight's bytes per second, that rate as a share of a device copy
timed in the same run (``torch`` ``dst.copy_(src)`` of 1 GiB: read + written bytes over time),
and the speedup over cuBLASLt and over torch. ``--splits`` adds one row per forced split of K.
Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial

import torch

import pygpukit as gp
from pygpukit.linalg import matmul_nt
from pygpukit.ops.linear import GEMV_MAX_ROWS, linear
from pygpukit.ops.skinny_linear import plan_skinny, skinny_linear

SHAPES = {
    "qkv": (6144, 4096),
    "o_proj": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}


def _gp_us(fn: Callable[[int], object], calls: int, copies: int) -> float:
    fn(0)
    gp.synchronize()
    start, end = gp.Event(timing=True), gp.Event(timing=True)
    start.record()
    for i in range(calls):
        fn(i % copies)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


def _torch_us(fn: Callable[[int], object], calls: int, copies: int) -> float:
    fn(0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fn(i % copies)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


def copy_bandwidth(rounds: int) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + written), best of rounds."""
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    best = min(_torch_us(lambda _i: dst.copy_(src), 10, 1) for _ in range(rounds))
    return 2 * src.numel() * 2 / (best * 1e-6)


def main() -> None:
    """Print the timing table (markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,16,64")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--splits", action="store_true", help="also time each forced split of K")
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    info = gp.get_device_info(gp.get_device())
    l2 = int(info.get("l2_cache_bytes") or 50 << 20)
    copy = copy_bandwidth(args.rounds)
    print(f"device: {info['name']}; copy (1 GiB, read + write) {copy / 1e12:.3f} TB/s\n")
    print("| shape | M | variant | split | us | TB/s | % copy | vs cuBLASLt | vs torch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        copies = max(1, -(-2 * l2 // (n * k * 2)))
        tw = [torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(copies)]
        torch.cuda.synchronize()
        for m in rows:
            _time_shape(name, m, tw, args, copy)
        del tw
        torch.cuda.empty_cache()


def _skinny_split(
    gx: gp.GPUArray, gw: list[gp.GPUArray], gy: gp.GPUArray, s: int, i: int
) -> object:
    return skinny_linear(gx, gw[i], out=gy, splits=s)


def _time_shape(
    name: str, m: int, tw: list[torch.Tensor], args: argparse.Namespace, copy: float
) -> None:
    """Time every variant at ``[m, K] x [N, K]^T`` over the weight copies; print the rows."""
    n, k = tw[0].shape
    copies, nbytes = len(tw), n * k * 2
    gw = [gp.from_dlpack(w) for w in tw]
    tx = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    torch.cuda.synchronize()
    gx = gp.from_dlpack(tx)
    gy = gp.empty((m, n), gp.bfloat16)
    ref = torch.nn.functional.linear(tx.float(), tw[0].float())
    got = torch.from_dlpack(skinny_linear(gx, gw[0])).float()
    gp.synchronize()
    err = float((got - ref).norm() / ref.norm())
    variants: dict[str, tuple[str, Callable[[int], object]]] = {
        "skinny": ("gp", lambda i: skinny_linear(gx, gw[i], out=gy)),
        "cuBLASLt": ("gp", lambda i: matmul_nt(gx, gw[i], gy)),
        "torch": ("torch", lambda i: torch.nn.functional.linear(tx, tw[i])),
    }
    if m <= GEMV_MAX_ROWS:  # ops.linear's own GEMV kernels
        variants["ops.linear"] = ("gp", lambda i: linear(gx, gw[i], out=gy))
    if args.splits:
        for s in (1, 2, 4, 8):
            variants[f"skinny s={s}"] = (
                "gp",
                partial(_skinny_split, gx, gw, gy, s),
            )
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v, (lib, fn) in variants.items():
            timer = _gp_us if lib == "gp" else _torch_us
            times[v].append(timer(fn, args.calls, copies))
    med = {v: statistics.median(t) for v, t in times.items()}
    split = plan_skinny(m, n, k, gp.bfloat16).splits
    for v, us in med.items():
        rate = nbytes / (us * 1e-6)
        sp = str(split) if v == "skinny" else (v.split("=")[1] if "=" in v else "")
        print(
            f"| {name} [{n},{k}] | {m} | {v} | {sp} | {us:.1f} | {rate / 1e12:.3f} | "
            f"{100 * rate / copy:.1f}% | {med['cuBLASLt'] / us:.3f}x | "
            f"{med['torch'] / us:.3f}x |"
        )
    print(f"|  | {m} | skinny rel. error vs fp32 | | {err:.2e} | | | | |")


if __name__ == "__main__":
    main()

"""ops_linear: GEMV (``y = x @ W.T``, few rows of x) against ``torch.nn.functional.linear``.

The decode-time shape of a 8B-class MLP projection: x [M, 4096] times
W [14336, 4096] in bfloat16, M = 1, 4, 8. A GEMV reads W once, so it is bound by
memory bandwidth: bytes moved are W + x + y, and the ceiling is the card's copy
bandwidth. ``--sizes`` sets N (K stays 4096); ``--dtypes`` float16/bfloat16.
Results are checked against a float64 product. On the GPU, with the ``gemv_variant``
knob of ``pygpukit.ops.config`` at ``auto`` (``PYGPUKIT_GEMV_VARIANT`` unset), PyGPUkit is
timed once per vector kernel variant (``kernel=simt`` and ``kernel=mma``, see
``pygpukit.ops.linear.GEMV_VARIANTS``; PyTorch once per shape); with it pinned, only that
variant runs. Unpinned, ``ops.gemv`` uses simt for M = 1 and mma above.

``linear`` rows: ``ops.linear`` of x [M, 4096] and W [4096, 4096] without a bias for M = 16,
128 (prefill chunks, batched decode) and 1024 (a prompt), the GEMM path (cuBLASLt), against
``F.linear``; derived rate TFLOP/s against the ``gemm_<dtype>`` ceiling. GPU time of
back-to-back calls, so at the small M the host's cost per call is what is measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed, case_key
from pygpukit.benchmark.checks import check_close
from pygpukit.benchmark.data import storage_dtype
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_linear"
SUPPORTED = ("float16", "bfloat16")
ROWS = (1, 4, 8)
#: Rows of the ``linear`` (GEMM path) cases.
LINEAR_ROWS = (16, 128, 1024)
#: fp32 accumulation over K = 4096 products, rounded once to the storage dtype.
ACCUMULATION_FACTOR = 1.0


def _product(lib: Library) -> Any:
    if lib.name == "pygpukit":
        try:
            from pygpukit import ops
        except ImportError as exc:  # pragma: no cover - the suite ships inside pygpukit-ops
            raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
        return ops.gemv
    if lib.name == "torch":
        return lib.module.nn.functional.linear
    raise Skip(f"{lib.name} has no linear layer")


def _timed_product(
    ctx: SuiteContext,
    lib: Library,
    copies: int,
    product: Any,
    shape: tuple[int, int, int, str],
    label: str,
) -> Timed:
    """Time ``product(x, w)`` of x [m, k] and W [n, k] over ``copies`` input sets.

    The result is checked against the float64 ``x @ W.T`` of the first set.
    """
    m, n, k, dtype = shape
    xs = [ctx.data.get((m, k), dtype, 2 * i) for i in range(copies)]
    ws = [ctx.data.get((n, k), dtype, 2 * i + 1) for i in range(copies)]
    sets = [(lib.upload(x, dtype), lib.upload(w, dtype)) for x, w in zip(xs, ws, strict=True)]
    ref = xs[0].astype(np.float64) @ ws[0].astype(np.float64).T

    def check(out: Any) -> float:
        got = lib.download(out).astype(np.float64).reshape(m, n)
        return check_close(got, ref, dtype, f"{label} ({lib.name})", ACCUMULATION_FACTOR)

    return Timed(run=lambda i: product(*sets[i % copies]), check=check)


def gemv_case(
    ctx: SuiteContext, m: int, n: int, k: int, dtype: str, kernel: str | None = None
) -> Case:
    """The product of x [m, k] and W[n, k].T in ``dtype``; ``kernel`` sets PyGPUkit's variant."""
    params: dict[str, int | float | str] = {"m": m, "n": n, "k": k, "dtype": dtype}
    peer_key = case_key(NAME, "gemv", params)
    if kernel is not None:
        params["kernel"] = kernel
    if dtype not in SUPPORTED:
        return Case(NAME, "gemv", params, {}, skip=f"{dtype}: the GEMV kernel is fp16/bf16")
    item = storage_dtype(dtype).itemsize
    nbytes = (n * k + m * k + m * n) * item

    def setup(lib: Library, copies: int) -> Timed:
        product = _product(lib)
        if kernel is not None and lib.name == "pygpukit":
            from pygpukit.ops import config

            config.set(gemv_variant=kernel)  # in force while the case runs; cases() restores it
        return _timed_product(ctx, lib, copies, product, (m, n, k, dtype), "gemv")

    return Case(
        NAME,
        "gemv",
        params,
        dict.fromkeys(("pygpukit", "torch"), setup),
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        peer_key=peer_key,
    )


def _linear(lib: Library) -> Any:
    if lib.name == "pygpukit":
        try:
            from pygpukit import ops
        except ImportError as exc:  # pragma: no cover - the suite ships inside pygpukit-ops
            raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
        return ops.linear
    return _product(lib)


def linear_case(ctx: SuiteContext, m: int, n: int, k: int, dtype: str) -> Case:
    """``ops.linear`` of x [m, k] and W [n, k] (no bias) in ``dtype``: the GEMM path."""
    params: dict[str, int | float | str] = {"m": m, "n": n, "k": k, "dtype": dtype}
    item = storage_dtype(dtype).itemsize
    working_set = (n * k + m * k + m * n) * item

    def setup(lib: Library, copies: int) -> Timed:
        product = _linear(lib)
        return _timed_product(ctx, lib, copies, product, (m, n, k, dtype), "linear")

    return Case(
        NAME,
        "linear",
        params,
        dict.fromkeys(("pygpukit", "torch"), setup),
        flops=2 * m * n * k,
        working_set=working_set,
        ceiling=f"gemm_{dtype}",
    )


def _kernels(ctx: SuiteContext) -> list[str | None]:
    """Every variant on the GPU unless the configuration pins one; None: whatever is set."""
    from pygpukit.ops import config

    if not ctx.on_gpu or config.get().gemv_variant != "auto":
        return [None]
    from pygpukit.ops.linear import GEMV_VARIANTS

    return list(GEMV_VARIANTS)


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """GEMV and linear rows.

    GEMV for M in 1, 4, 8 at the default (or ``--sizes``) N, per kernel variant on the GPU;
    then ``linear`` for M in 16, 128, 1024 at N = K (16 and 128 on the CPU).
    """
    k = 4096 if ctx.on_gpu else 256
    sizes = ctx.pick_sizes(gpu=[14336], gpu_quick=[14336], cpu=[1024], cpu_quick=[256])
    from pygpukit.ops import config

    kernels = _kernels(ctx)
    saved = config.get()
    try:
        for dtype in ctx.pick_dtypes(gpu=["bfloat16"], cpu=["bfloat16"]):
            for n in sizes:
                for m in ROWS:
                    for kernel in kernels:
                        yield gemv_case(ctx, m, n, k, dtype, kernel)
    finally:
        config.set(**dataclasses.asdict(saved))
    for dtype in ctx.pick_dtypes(gpu=["bfloat16"], cpu=["bfloat16"]):
        for m in LINEAR_ROWS if ctx.on_gpu else LINEAR_ROWS[:2]:
            yield linear_case(ctx, m, k, k, dtype)


SUITE = Suite(NAME, "GEMV and small-M linear layers vs torch.nn.functional.linear", cases)

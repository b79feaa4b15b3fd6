"""elementwise: bandwidth of ``a + b``, ``a * b`` and ``exp(a)`` on contiguous arrays.

Sizes are element counts (default 1M, 16M and 256M: 256M float32 elements are
1 GiB per array); dtypes default to float32 and bfloat16 on the GPU. Bytes
moved are the inputs read plus the output written; the ceiling is the card's
copy bandwidth. Results are checked on a random sample of elements against
float64 NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..case import Case, Timed
from ..checks import check_close, sample_indices
from ..data import storage_dtype
from ..footprint import Footprint
from ..peers import Library
from ..registry import Suite, SuiteContext
from ..units import format_count

NAME = "elementwise"
M = 1 << 20
SUPPORTED = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Op:
    """An elementwise op: how every library spells it and its float64 reference."""

    name: str
    arity: int
    call: Callable[..., Any]  # (module, *arrays) -> array, same spelling in every library
    reference: Callable[..., np.ndarray]
    requires: tuple[str, ...]


OPS = (
    Op("add", 2, lambda m, a, b: a + b, np.add, ("GPUArray.__add__",)),
    Op("mul", 2, lambda m, a, b: a * b, np.multiply, ("GPUArray.__mul__",)),
    Op("exp", 1, lambda m, a: m.exp(a), np.exp, ("exp",)),
)


def elementwise_case(ctx: SuiteContext, op: Op, n: int, dtype: str) -> Case:
    """``op`` over ``n`` elements of ``dtype``."""
    params: dict[str, int | float | str] = {"n": format_count(n), "dtype": dtype}
    if dtype not in SUPPORTED:
        return Case(NAME, op.name, params, {}, skip=f"{dtype} is not an elementwise dtype")
    nbytes = (op.arity + 1) * n * storage_dtype(dtype).itemsize

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [
            [ctx.data.get((n,), dtype, k * op.arity + j) for j in range(op.arity)]
            for k in range(copies)
        ]
        sets = [[lib.upload(h, dtype) for h in hs] for hs in hosts]
        module, call = lib.module, op.call
        idx = sample_indices(ctx.rng, n)
        ref = op.reference(*(h[idx].astype(np.float64) for h in hosts[0]))

        def check(out: Any) -> float:
            got = lib.download(out).reshape(-1)
            return check_close(got[idx], ref, dtype, f"{op.name} ({lib.name})")

        return Timed(run=lambda i: call(module, *sets[i % copies]), check=check)

    setups = dict.fromkeys(("pygpukit", "torch", "cupy"), setup)
    return Case(
        NAME,
        op.name,
        params,
        setups,
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        requires=("from_numpy", *op.requires),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Every op for every dtype and size."""
    sizes = ctx.pick_sizes(
        gpu=[M, 16 * M, 256 * M], gpu_quick=[M, 16 * M], cpu=[64 * 1024, M], cpu_quick=[4096]
    )
    for dtype in ctx.pick_dtypes(gpu=["float32", "bfloat16"], cpu=["float32"]):
        for n in sizes:
            for op in OPS:
                yield elementwise_case(ctx, op, n, dtype)


def footprint(ctx: SuiteContext, n: int) -> Footprint:
    """A binary op of ``n`` elements: two inputs and the output, on the device and the host."""
    dtypes = ctx.pick_dtypes(gpu=["float32", "bfloat16"], cpu=["float32"])
    itemsize = max((storage_dtype(d).itemsize for d in dtypes if d in SUPPORTED), default=4)
    return Footprint(device=3 * n * itemsize, host=3 * n * itemsize)


SUITE = Suite(NAME, "bandwidth of binary and unary elementwise ops", cases, footprint)

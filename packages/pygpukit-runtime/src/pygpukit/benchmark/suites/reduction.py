"""reduction: ``sum`` and ``max`` over every element of a contiguous array.

Sizes are element counts (default 1M, 16M, 256M); dtype float32 unless
``--dtypes`` says otherwise. Bytes moved are the input read once; the ceiling
is the card's copy bandwidth (a reduction reads at most at that rate). ``sum``
is checked against a float64 sum, its error relative to the sum of absolute
values (the scale of rounding errors); ``max`` must be exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..case import Case, CorrectnessError, Timed
from ..checks import TOLERANCES, check_equal
from ..data import storage_dtype
from ..footprint import Footprint
from ..peers import Library
from ..registry import Suite, SuiteContext
from ..units import format_count

NAME = "reduction"
M = 1 << 20
SUPPORTED = ("float64", "float32", "float16", "bfloat16")


def _check_sum(got: np.ndarray, host: np.ndarray, dtype: str, what: str) -> float:
    ref = float(host.sum(dtype=np.float64))
    scale = float(np.abs(host.astype(np.float64)).sum()) or 1.0
    value = float(np.asarray(got, dtype=np.float64).reshape(-1)[0]) if got.size == 1 else np.nan
    err = abs(value - ref) / scale
    limit = TOLERANCES[dtype]
    if not err <= limit:
        raise CorrectnessError(
            f"{what}: sum is {value!r}, expected {ref!r} (error {err:.3g} of sum|a|,"
            f" limit {limit:.3g})"
        )
    return err


def _check_max(got: np.ndarray, host: np.ndarray, dtype: str, what: str) -> float:
    ref = np.asarray(host.max(), dtype=np.float64).reshape(1)
    return check_equal(np.asarray(got, dtype=np.float64).reshape(-1), ref, what)


@dataclass(frozen=True)
class Reduction:
    """A full reduction: its spelling (the same in every library) and its check."""

    name: str
    call: Callable[[Any, Any], Any]
    check: Callable[[np.ndarray, np.ndarray, str, str], float]


OPS = (
    Reduction("sum", lambda m, a: m.sum(a), _check_sum),
    Reduction("max", lambda m, a: m.max(a), _check_max),
)


def reduction_case(ctx: SuiteContext, op: Reduction, n: int, dtype: str) -> Case:
    """``op`` over all ``n`` elements of a ``dtype`` array."""
    params: dict[str, int | float | str] = {"n": format_count(n), "dtype": dtype}
    if dtype not in SUPPORTED:
        return Case(NAME, op.name, params, {}, skip=f"{dtype} is not a reduction dtype")
    nbytes = n * storage_dtype(dtype).itemsize

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [ctx.data.get((n,), dtype, k) for k in range(copies)]
        arrays = [lib.upload(h, dtype) for h in hosts]
        module, call = lib.module, op.call
        return Timed(
            run=lambda i: call(module, arrays[i % copies]),
            check=lambda out: op.check(
                lib.download(out), hosts[0], dtype, f"{op.name} ({lib.name})"
            ),
        )

    setups = dict.fromkeys(("pygpukit", "torch", "cupy"), setup)
    return Case(
        NAME,
        op.name,
        params,
        setups,
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        requires=("from_numpy", op.name),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Every reduction for every dtype and size."""
    sizes = ctx.pick_sizes(
        gpu=[M, 16 * M, 256 * M], gpu_quick=[M, 16 * M], cpu=[64 * 1024, M], cpu_quick=[4096]
    )
    for dtype in ctx.pick_dtypes(gpu=["float32"], cpu=["float32"]):
        for n in sizes:
            for op in OPS:
                yield reduction_case(ctx, op, n, dtype)


def footprint(ctx: SuiteContext, n: int) -> Footprint:
    """A reduction of ``n`` elements: the input on the device and its host copy."""
    dtypes = ctx.pick_dtypes(gpu=["float32"], cpu=["float32"])
    itemsize = max((storage_dtype(d).itemsize for d in dtypes if d in SUPPORTED), default=4)
    return Footprint(device=n * itemsize, host=n * itemsize)


SUITE = Suite(NAME, "bandwidth of full reductions (sum, max)", cases, footprint)

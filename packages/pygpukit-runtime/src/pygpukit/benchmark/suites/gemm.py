"""gemm: square matrix products ``C = A @ B``, dtypes x sizes x PyGPUkit's two backends.

Dtypes default to float32, tf32, float16 and bfloat16 on the GPU (tf32 is
float32 storage with ``gp.matmul(..., allow_tf32=True)``; PyTorch with
``torch.backends.cuda.matmul.allow_tf32``). Sizes are ``n`` for ``n x n x n``
(default 1024, 4096, 8192). PyGPUkit runs once per backend, selected through
``PYGPUKIT_GEMM_BACKEND`` (``own`` kernels, ``cublaslt``) set before each
case; when that variable is already set, only that backend runs. The peers run
once per shape and dtype. Derived rate: TFLOP/s (``2 n^3`` per product), as a
percentage of the best library rate of the same dtype (``gemm_<dtype>``).
Results are checked on a 32 x 32 sample of ``C`` against float64 products.
Up to ``INTERLEAVE_MAX_N`` each row times PyGPUkit and its peers in alternating
repetitions (a fresh peer measurement per row): those rows cost the host more
than the GPU, and conditions on the host change between rows.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..case import Case, Skip, Timed, case_key
from ..ceilings import CeilingSpec, register_ceiling
from ..checks import check_close
from ..data import storage_dtype
from ..footprint import Footprint
from ..peers import Library
from ..registry import Suite, SuiteContext

NAME = "gemm"
ENV = "PYGPUKIT_GEMM_BACKEND"
BACKENDS = ("own", "cublaslt")
SUPPORTED = ("float64", "float32", "tf32", "float16", "bfloat16")
SAMPLE = 32
#: Sizes up to this are timed with the peers in alternating repetitions (``Case.interleave``):
#: their time per call is mostly the host's (a few microseconds of GPU time up to 1024^3 on a
#: Hopper card), which another process on the machine can change between two rows.
INTERLEAVE_MAX_N = 2048
#: float32 products accumulate over n terms: a wider limit than elementwise float32.
ACCUMULATION_FACTOR = {"float32": 10.0, "float64": 10.0}


def _product(lib: Library, dtype: str, backend: str | None) -> Callable[[Any, Any], Any]:
    """How ``lib`` multiplies two matrices of ``dtype`` (flags set here, before timing)."""
    if lib.name == "pygpukit":
        if backend is not None:
            os.environ[ENV] = backend
        if dtype == "tf32":
            matmul = lib.require("matmul")
            if "allow_tf32" not in inspect.signature(matmul).parameters:
                raise Skip("gp.matmul has no allow_tf32 argument yet")
            return lambda a, b: matmul(a, b, allow_tf32=True)
        lib.require("GPUArray.__matmul__")
    elif lib.name == "torch":
        lib.module.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    elif dtype == "tf32":
        raise Skip("CuPy selects TF32 only through CUPY_TF32 at import")
    return lambda a, b: a @ b


def gemm_case(ctx: SuiteContext, n: int, dtype: str, backend: str | None) -> Case:
    """``n x n`` times ``n x n`` in ``dtype``; ``backend`` picks PyGPUkit's implementation."""
    params: dict[str, int | float | str] = {"n": n, "dtype": dtype}
    peer_key = case_key(NAME, "matmul", params)
    if backend is not None:
        params["backend"] = backend
    if dtype not in SUPPORTED:
        return Case(NAME, "matmul", params, {}, skip=f"{dtype} is not a matmul dtype")
    itemsize = storage_dtype(dtype).itemsize

    def setup(lib: Library, copies: int) -> Timed:
        product = _product(lib, dtype, backend)
        hosts = [
            (ctx.data.get((n, n), dtype, 2 * k), ctx.data.get((n, n), dtype, 2 * k + 1))
            for k in range(copies)
        ]
        sets = [(lib.upload(a, dtype), lib.upload(b, dtype)) for a, b in hosts]
        rows = np.sort(ctx.rng.choice(n, size=min(SAMPLE, n), replace=False))
        cols = np.sort(ctx.rng.choice(n, size=min(SAMPLE, n), replace=False))
        a0, b0 = hosts[0]
        ref = a0[rows].astype(np.float64) @ b0[:, cols].astype(np.float64)
        factor = ACCUMULATION_FACTOR.get(dtype, 1.0)

        def check(out: Any) -> float:
            got = lib.download(out)[np.ix_(rows, cols)]
            return check_close(got, ref, dtype, f"matmul ({lib.name})", factor)

        return Timed(run=lambda i: product(*sets[i % copies]), check=check)

    setups = dict.fromkeys(("pygpukit", "torch", "cupy"), setup)
    return Case(
        NAME,
        "matmul",
        params,
        setups,
        flops=2 * n**3,
        working_set=3 * n * n * itemsize,
        ceiling=f"gemm_{dtype}",
        requires=("from_numpy",),
        peer_key=peer_key,
        interleave=n <= INTERLEAVE_MAX_N,
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Every dtype x size x backend; restores the backend variable and TF32 flag afterwards."""
    sizes = ctx.pick_sizes(
        gpu=[1024, 4096, 8192], gpu_quick=[4096], cpu=[256, 512], cpu_quick=[128]
    )
    dtypes = ctx.pick_dtypes(gpu=["float32", "tf32", "float16", "bfloat16"], cpu=["float32"])
    saved = os.environ.get(ENV)
    backends: list[str | None] = [None]
    if ctx.on_gpu:
        backends = [saved] if saved else list(BACKENDS)
    try:
        for dtype in dtypes:
            for n in sizes:
                for backend in backends:
                    yield gemm_case(ctx, n, dtype, backend)
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved
        _reset_torch_tf32()


def _reset_torch_tf32() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False


def _ceiling_case(dtype: str) -> Callable[[SuiteContext], Case]:
    def build(ctx: SuiteContext) -> Case:
        n = (4096 if ctx.quick else 8192) if ctx.on_gpu else (256 if ctx.quick else 512)
        return gemm_case(ctx, n, dtype, None)

    return build


def _ceiling_at(dtype: str) -> Callable[[SuiteContext, Case], Case | None]:
    """The square product of a gemm row's own size (other suites' shapes: none)."""

    def build(ctx: SuiteContext, row: Case) -> Case | None:
        n = row.params.get("n")
        return gemm_case(ctx, n, dtype, None) if row.suite == NAME and isinstance(n, int) else None

    return build


for _dtype in SUPPORTED:
    register_ceiling(
        f"gemm_{_dtype}",
        CeilingSpec(
            "TFLOP/s",
            f"{_dtype} square matrix product",
            _ceiling_case(_dtype),
            _ceiling_at(_dtype),
        ),
    )


def footprint(ctx: SuiteContext, n: int) -> Footprint:
    """An n x n product: A, B and C on the device; A, B and C downloaded on the host."""
    dtypes = ctx.pick_dtypes(gpu=["float32", "tf32", "float16", "bfloat16"], cpu=["float32"])
    itemsize = max((storage_dtype(d).itemsize for d in dtypes if d in SUPPORTED), default=4)
    return Footprint(device=3 * n * n * itemsize, host=3 * n * n * itemsize)


SUITE = Suite(NAME, "matrix products: dtypes x sizes x own/cuBLASLt backends", cases, footprint)

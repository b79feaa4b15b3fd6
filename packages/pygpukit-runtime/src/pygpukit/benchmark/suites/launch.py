"""launch: host overhead per call, where small ops spend their time.

Rows (1K float32 elements; host time per call, nothing synchronized inside the
timed loop):

- ``add_1k``: ``a + b``, the smallest real op;
- ``empty_1k``: create an uninitialized 1K-element array;
- ``from_numpy_1k``: create a 1K-element array from a NumPy array (a copy);
- ``matmul``: ``a @ b`` of two n x n bfloat16 matrices (n = 256, 1024: small enough that the
  host, not the GPU, sets the pace);
- ``jit_launch_1k``: launch an already compiled ``gp.jit`` kernel (CuPy:
  ``RawKernel``; PyTorch has no run-time CUDA C++ kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..case import Case, CorrectnessError, Timed, unavailable
from ..checks import check_close, check_equal
from ..peers import Library
from ..registry import Suite, SuiteContext
from ..units import format_count
from .kernels import NO_TORCH_JIT, compile_scale, launch_scale

NAME = "launch"
N = 1024
DTYPE = "float32"
LIBS = ("pygpukit", "torch", "cupy")


def _params() -> dict[str, int | float | str]:
    return {"n": format_count(N), "dtype": DTYPE}


def add_case(ctx: SuiteContext) -> Case:
    """``a + b`` on 1K elements."""
    a, b = ctx.data.get((N,), DTYPE, 0), ctx.data.get((N,), DTYPE, 1)
    ref = a.astype(np.float64) + b

    def setup(lib: Library, copies: int) -> Timed:
        x, y = lib.upload(a, DTYPE), lib.upload(b, DTYPE)
        return Timed(
            run=lambda i: x + y,
            check=lambda out: check_close(lib.download(out), ref, DTYPE, "a + b"),
        )

    return Case(
        NAME,
        "add_1k",
        _params(),
        dict.fromkeys(LIBS, setup),
        timing="host",
        requires=("from_numpy", "GPUArray.__add__"),
    )


_EMPTY: dict[str, Callable[[Any], Any]] = {
    "pygpukit": lambda m: m.empty((N,), dtype=DTYPE),
    "torch": lambda m: m.empty(N, dtype=m.float32, device="cuda"),
    "cupy": lambda m: m.empty(N, dtype=m.float32),
}


def empty_case() -> Case:
    """Create an uninitialized 1K-element float32 array."""

    def setup(lib: Library, copies: int) -> Timed:
        make, module = _EMPTY[lib.name], lib.module

        def check(out: Any) -> None:
            if tuple(out.shape) != (N,):
                raise CorrectnessError(f"empty((1024,)) has shape {tuple(out.shape)}")

        return Timed(run=lambda i: make(module), check=check)

    return Case(
        NAME, "empty_1k", _params(), dict.fromkeys(LIBS, setup), timing="host", requires=("empty",)
    )


def from_numpy_case(ctx: SuiteContext) -> Case:
    """Create a 1K-element array from host data."""
    a = ctx.data.get((N,), DTYPE, 0)

    def setup(lib: Library, copies: int) -> Timed:
        return Timed(
            run=lambda i: lib.upload(a, DTYPE),
            check=lambda out: check_equal(lib.download(out), a, "from_numpy"),
        )

    return Case(
        NAME,
        "from_numpy_1k",
        _params(),
        dict.fromkeys(LIBS, setup),
        timing="host",
        requires=("from_numpy",),
    )


def matmul_case(ctx: SuiteContext, n: int) -> Case:
    """``a @ b`` of two n x n bfloat16 matrices: host time of one call."""
    dtype = "bfloat16"
    a, b = ctx.data.get((n, n), dtype, 0), ctx.data.get((n, n), dtype, 1)
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def setup(lib: Library, copies: int) -> Timed:
        x, y = lib.upload(a, dtype), lib.upload(b, dtype)
        return Timed(
            run=lambda i: x @ y,
            check=lambda out: check_close(
                lib.download(out).astype(np.float64), ref, dtype, "a @ b"
            ),
        )

    return Case(
        NAME,
        "matmul",
        {"n": n, "dtype": dtype},
        {"pygpukit": setup, "torch": setup},
        timing="host",
        requires=("from_numpy", "GPUArray.__matmul__"),
    )


def jit_launch_case(ctx: SuiteContext) -> Case:
    """Launch a compiled ``y = 2 x`` kernel over 1K elements."""
    a = ctx.data.get((N,), DTYPE, 0)
    ref = 2.0 * a.astype(np.float64)

    def setup(lib: Library, copies: int) -> Timed:
        kernel = compile_scale(lib)
        x, y = lib.upload(a, DTYPE), lib.upload(a, DTYPE)

        def run(i: int) -> Any:
            launch_scale(lib, kernel, x, y, 2.0, N)
            return y

        return Timed(
            run=run, check=lambda out: check_close(lib.download(out), ref, DTYPE, "kernel")
        )

    setups = {"pygpukit": setup, "cupy": setup, "torch": unavailable(NO_TORCH_JIT)}
    return Case(
        NAME, "jit_launch_1k", _params(), setups, timing="host", requires=("from_numpy", "jit")
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """The launch suite's rows (fixed sizes: host overhead hardly depends on them)."""
    yield add_case(ctx)
    yield empty_case()
    yield from_numpy_case(ctx)
    for n in (256, 1024) if ctx.on_gpu else (64,):
        yield matmul_case(ctx, n)
    yield jit_launch_case(ctx)


SUITE = Suite(NAME, "host overhead of small ops, array creation and kernel launches", cases)

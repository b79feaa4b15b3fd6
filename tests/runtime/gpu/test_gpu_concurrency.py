"""Thread stress tests of the runtime's op families: matmul, elementwise, reductions.

N threads (8 on the GPU) each launch ops on fresh random inputs of random shapes, either all
on the default stream or each on its own ``gp.Stream()``, and check every result against
NumPy in float64. Several checks stay pending per thread, so launches of different threads
interleave without a sync in between: state an op shares between calls (cached plans,
descriptors, workspaces, pool blocks) is used by several threads at once.

Not marked ``gpu``: on the CPU backend the same tests check the thread safety of the NumPy
path (fewer iterations); on the GPU machine they run with 8 threads and more iterations.
Matmul runs under both GEMM backends through the ``gemm`` fixture (cuBLASLt only on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp

STREAMS = ["shared", "separate"]
# Relative error limits ||out - ref|| / ||ref|| against float64 (docs/internals.md, Tests).
TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2, "float64": 1e-12, "int32": 0.0}

Check = Callable[[], "str | None"]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Fresh random values of ``dtype``: small nonzero integers, or normals around 0.5."""
    dt = gp.dtypes.normalize(dtype)
    if np.dtype(dt).kind in "iu":
        values = rng.integers(-9, 10, size=shape)
        values[values == 0] = 3
        return values.astype(dt)
    return (rng.standard_normal(shape) + 0.5).astype(dt)


def _compare(
    got: np.ndarray, ref: np.ndarray, tol: float, what: str, scale: np.ndarray | None = None
) -> str | None:
    """``None`` when ``got`` matches the float64 ``ref`` within ``tol``, else what differs.

    The error is relative to ``||ref||``, or to ``||scale||`` where given: a product's rounding
    is bounded by ``|a| @ |b|``, not by the result, which cancellation can make tiny (a 1 x 36
    dot product summing to ~0.1 from terms of ~1 rounds past 1e-5 of itself in float32).
    """
    if got.shape != ref.shape:
        return f"{what}: shape {got.shape}, expected {ref.shape}"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    if tol == 0.0:
        if np.array_equal(g, r):
            return None
        return f"{what}: {int((g != r).sum())} of {r.size} elements differ"
    norm = float(np.linalg.norm(r if scale is None else scale))
    err = float(np.linalg.norm(g - r)) / (norm if norm > 0 else 1.0)
    if err <= tol:
        return None
    return f"{what}: relative error {err:.3g} > {tol:g}, max abs error {np.abs(g - r).max():.3g}"


# ----------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("dtype", list(TOL))
def test_matmul_threads(
    hammer: Callable[..., None],
    gemm: str,
    streams: str,
    dtype: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random (batch,) m x k @ k x n products, sizes 1..63, some with a transposed operand."""
    monkeypatch.delenv("PYGPUKIT_ALLOW_TF32", raising=False)

    def launch(rng: np.random.Generator) -> Check:
        m, k, n = (int(v) for v in rng.integers(1, 64, 3))
        batch = int(rng.integers(1, 4)) if rng.random() < 0.3 else 0
        lead = (batch,) if batch else ()
        a = _data(rng, (*lead, m, k), dtype)
        transposed = rng.random() < 0.3
        b = _data(rng, (*lead, n, k) if transposed else (*lead, k, n), dtype)
        gb = gp.from_numpy(b)
        if transposed:  # a column-major operand, read in place
            gb, b = gb.swapaxes(-1, -2), b.swapaxes(-1, -2)
        c = gp.from_numpy(a) @ gb

        def check() -> str | None:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            shape = f"{lead}{m}x{k} @ {k}x{n}{' (b transposed)' if transposed else ''}"
            what = f"{dtype} matmul {shape} [{gemm}]"
            return _compare(c.to_numpy(), a64 @ b64, TOL[dtype], what, np.abs(a64) @ np.abs(b64))

        return check

    # fp32 through cuBLASLt went wrong about once in a thousand products under 8 threads on one
    # stream: 8 x 1000 of them make a miss of that rate all but impossible.
    iterations = 1000 if dtype == "float32" else 250
    hammer(launch, streams=streams, gpu_iterations=iterations)


# ----------------------------------------------------------------------------- elementwise

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum}
UNARY = {"exp": np.exp, "tanh": np.tanh, "negative": np.negative}


def _broadcast_shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two random shapes that broadcast together: 1-D up to 5000, or 2-3 dims of 1..40."""
    ndim = int(rng.integers(1, 4))
    full = tuple(int(v) for v in rng.integers(1, 5001 if ndim == 1 else 41, ndim))
    other = tuple(1 if rng.random() < 0.3 else d for d in full)
    return full, other[int(rng.integers(0, len(other))) :]


@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_elementwise_threads(hammer: Callable[..., None], streams: str, dtype: str) -> None:
    """Binary ops with broadcasting and unary math on random shapes."""
    is_int = dtype == "int32"

    def launch(rng: np.random.Generator) -> Check:
        shape_a, shape_b = _broadcast_shapes(rng)
        a, b = _data(rng, shape_a, dtype), _data(rng, shape_b, dtype)
        name = str(rng.choice(list(BINARY) + ([] if is_int else list(UNARY))))
        if name in BINARY:
            got = getattr(gp, name)(gp.from_numpy(a), gp.from_numpy(b))
            ref = BINARY[name](a.astype(np.float64), b.astype(np.float64))
        else:
            got = getattr(gp, name)(gp.from_numpy(a))
            ref = UNARY[name](a.astype(np.float64))
        # Integer results are exact; float ones are one rounding of the float64 value.
        tol = 0.0 if is_int else (1e-6 if dtype == "float32" else 1e-3)

        def check() -> str | None:
            return _compare(got.to_numpy(), ref, tol, f"{dtype} {name} {shape_a}, {shape_b}")

        return check

    hammer(launch, streams=streams, gpu_iterations=300)


# ----------------------------------------------------------------------------- reductions

REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "argmax": np.argmax}


@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions_threads(hammer: Callable[..., None], streams: str, dtype: str) -> None:
    """sum, mean, max and argmax over a random axis (or all) of random 1- to 3-D shapes."""

    def launch(rng: np.random.Generator) -> Check:
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(1, 2000 if ndim == 1 else 70, ndim))
        a = _data(rng, shape, dtype)
        name = str(rng.choice(list(REDUCTIONS)))
        axis = int(rng.integers(0, ndim)) if name == "argmax" or rng.random() < 0.7 else None
        got = getattr(gp, name)(gp.from_numpy(a), axis=axis)
        ref = REDUCTIONS[name](a.astype(np.float64), axis=axis)
        # Sums of float32 accumulate in float32 (in a fixed tree); argmax and max are exact.
        tol = {"float32": 1e-5, "float64": 1e-12, "int32": 0.0}[dtype]
        if name in ("argmax", "max"):
            tol = 0.0
        elif name == "mean" and dtype == "int32":
            tol = 1e-12

        def check() -> str | None:
            return _compare(
                np.asarray(got.to_numpy()),
                np.asarray(ref),
                tol,
                f"{dtype} {name} {shape} axis={axis}",
            )

        return check

    hammer(launch, streams=streams, gpu_iterations=300)

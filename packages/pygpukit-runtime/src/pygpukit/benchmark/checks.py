"""Correctness checks every measurement runs on its result before it is timed.

References are float64 NumPy on the host, on all elements for small outputs
and on a random sample for large ones. The limits catch *wrong* results (bad
indexing, unwritten outputs, silent TF32 in a float32 product); the precision
limits of docs/internals.md (Tests) are the tests' job, so these are a little looser.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .case import CorrectnessError

__all__ = ["TOLERANCES", "check_close", "check_equal", "rel_error", "sample_indices"]

#: Relative error ``||out - ref|| / ||ref||`` above which a result is wrong.
TOLERANCES: dict[str, float] = {
    "float64": 1e-10,
    "float32": 1e-5,
    "tf32": 2e-3,
    "float16": 5e-3,
    "bfloat16": 2e-2,
    "float8_e4m3fn": 1e-1,
    "float8_e5m2": 2e-1,
}

#: Sample size of :func:`sample_indices` for outputs too large to check whole.
SAMPLE = 1 << 16


def rel_error(out: Any, ref: Any) -> float:
    """``||out - ref|| / ||ref||`` in float64; ``inf`` when ``out`` has a NaN or a wrong shape."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape or not np.all(np.isfinite(o)):
        return float("inf")
    denom = float(np.linalg.norm(r.ravel()))
    num = float(np.linalg.norm((o - r).ravel()))
    return num / denom if denom > 0 else num


def check_close(out: Any, ref: Any, dtype: str, what: str, factor: float = 1.0) -> float:
    """Relative error of ``out`` against ``ref``; ``CorrectnessError`` above the dtype's limit.

    ``factor`` widens the limit for results with longer accumulation chains.
    """
    err = rel_error(out, ref)
    limit = TOLERANCES.get(dtype, 0.0) * factor
    if not err <= limit:
        raise CorrectnessError(
            f"{what}: relative error {err:.3g} exceeds {limit:.3g} for {dtype}"
            f" (shape {np.shape(out)} vs reference {np.shape(ref)})"
        )
    return err


def check_equal(out: Any, ref: Any, what: str) -> float:
    """Exact equality of ``out`` and ``ref`` (copies, integer results); returns 0.0."""
    o = np.asarray(out)
    r = np.asarray(ref)
    if o.shape != r.shape:
        raise CorrectnessError(f"{what}: shape {o.shape} differs from the expected {r.shape}")
    if o.dtype != r.dtype:
        # Compare bit patterns of same-size types (bfloat16 and friends).
        if o.dtype.itemsize == r.dtype.itemsize:
            o = o.view(f"u{o.dtype.itemsize}")
            r = r.view(f"u{r.dtype.itemsize}")
        else:
            raise CorrectnessError(f"{what}: dtype {o.dtype} differs from the expected {r.dtype}")
    mismatched = int(np.count_nonzero(o != r))
    if mismatched:
        raise CorrectnessError(f"{what}: {mismatched} of {o.size} elements differ")
    return 0.0


def sample_indices(rng: np.random.Generator, n: int, k: int = SAMPLE) -> np.ndarray:
    """Flat indices to check in an ``n``-element output: all of them, or ``k`` at random.

    The first and last elements are always included (tails catch size bugs).
    """
    if n <= k:
        return np.arange(n, dtype=np.int64)
    idx = rng.integers(0, n, size=k, dtype=np.int64)
    idx[0], idx[-1] = 0, n - 1
    return np.unique(idx)

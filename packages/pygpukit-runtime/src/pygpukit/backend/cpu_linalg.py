"""The CPU backend's matmul: NumPy into the output the caller allocated.

float16/bfloat16 are multiplied in float64 and rounded once (the GPU accumulates them in
fp32, so both are within the half type's own rounding of the exact product); float32 stays
float32 (``allow_tf32`` does not change CPU results); integers wrap as NumPy's do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_WIDEN = frozenset({"float16", "bfloat16"})


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, allow_tf32: bool) -> None:
    """``out[z] = a[z] @ b[z]`` for 3-D impls of one dtype; ``out`` is C-contiguous."""
    if a.dtype.name in _WIDEN:
        result: Any = np.matmul(a.astype(np.float64), b.astype(np.float64))
        out[...] = result.astype(out.dtype)
    else:
        np.matmul(a, b, out=out)

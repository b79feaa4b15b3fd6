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


def matmul_new(a: np.ndarray, b: np.ndarray, allow_tf32: bool) -> np.ndarray:
    """``a @ b`` of two 2-D arrays, or two 3-D arrays of one batch size, into a new array."""
    from .cpu import empty

    out = empty((*a.shape[:-1], b.shape[-1]), a.dtype.name, None, None)
    matmul(a, b, out, allow_tf32)
    return out


def matmul_nt(x: np.ndarray, w: np.ndarray, out: np.ndarray, allow_tf32: bool) -> None:
    """``out = x @ w.T`` for C-contiguous ``x`` [..., K] and ``out`` [..., N], ``w`` [N, K].

    Checks what the CUDA backend's native call checks (a ``ValueError`` for each).
    """
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError("matmul_nt takes x [..., K] and a 2-D weight [N, K]")
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("matmul_nt: x and out must be C-contiguous")
    n, k = w.shape
    m = int(np.prod(x.shape[:-1]))
    if out.size != m * n or out.dtype != x.dtype:
        raise ValueError("matmul_nt: out must hold M x N elements of x's dtype")
    matmul(x.reshape(m, k), w.T, out.reshape(m, n), allow_tf32)


def matmul_nt_new(x: np.ndarray, w: np.ndarray, allow_tf32: bool) -> np.ndarray:
    """``x @ w.T`` into a new C-contiguous ``[..., N]`` array (checks as :func:`matmul_nt`)."""
    from .cpu import empty

    if x.ndim < 1 or w.ndim != 2:
        raise ValueError("matmul_nt takes x [..., K] and a 2-D weight [N, K]")
    out = empty((*x.shape[:-1], w.shape[0]), x.dtype.name, None, None)
    matmul_nt(x, w, out, allow_tf32)
    return out

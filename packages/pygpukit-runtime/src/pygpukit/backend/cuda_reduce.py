"""The CUDA backend's reductions, scans, softmax and gather ops over ``_native``.

Each function is one ``_native`` call (kernels in ``native/kernels/reduce.cu``,
``softmax.cu``, ``scan.cu``, ``gather.cu``; dispatch in ``native/ops/reduce.cpp``).
The native side returns reductions in their accumulator type (float32 for half
types, int64 for integers, ...); the one conversion to the result dtype is a
cast kernel here. Contract: :mod:`.base`.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes
from .select import native

__all__ = ["cumsum", "reduce", "softmax", "take", "tri"]

_native: Any = native()

_TAKE_MODES = {"raise": 0, "wrap": 1, "clip": 2}


def reduce(op: str, a: Any, axes: tuple[int, ...], ddof: int) -> Any:
    """Reduce ``a`` over ``axes`` (sorted, non-negative; ``a`` not empty) with ``op``.

    Returns a new array without the reduced axes in the result dtype of
    :func:`pygpukit.reductions.result_dtype`.
    """
    from ..reductions import result_dtype

    want = dtypes.NAMES[result_dtype(op, dtypes.SUPPORTED[a.dtype])]
    res = _native.reduce(op, a, list(axes), int(ddof), None)
    return res if res.dtype == want else res.astype(want)


def softmax(a: Any, axis: int, log: bool) -> Any:
    """Softmax (log-softmax when ``log``) along ``axis`` in the input's (floating) dtype."""
    return _native.softmax(a, int(axis), bool(log), None)


def cumsum(a: Any, axis: int, out_dtype: str) -> Any:
    """Inclusive prefix sum along ``axis`` into a new ``out_dtype`` array."""
    res = _native.cumsum(a, int(axis), None)
    return res if res.dtype == out_dtype else res.astype(out_dtype)


def take(a: Any, indices: Any, axis: int, mode: str) -> Any:
    """Gather along ``axis`` at the 1-D int64 ``indices`` (mode ``raise``/``wrap``/``clip``)."""
    return _native.take(a, indices, int(axis), _TAKE_MODES[mode], None)


def tri(a: Any, k: int, upper: bool) -> Any:
    """``triu`` (``upper``) or ``tril`` of the last two axes into a new array."""
    return _native.tri(a, int(k), bool(upper), None)

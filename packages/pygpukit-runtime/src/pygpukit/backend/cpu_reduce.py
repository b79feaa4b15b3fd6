"""The CPU backend's reductions, scans, softmax and gather ops (NumPy).

Same contract as the CUDA backend's (see :mod:`.base`): every function takes
impls, returns a new impl allocated by :func:`.cpu._new` (the Rust host pool),
and computes what the GPU kernels compute: half types accumulate in float32,
float64 in float64, integers and bools in int64. The Python layer
(:mod:`pygpukit.reductions`, :mod:`pygpukit.shape_ops`) validates arguments,
handles empty inputs, ``keepdims`` and ``out=`` before calling these.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cpu import _new

__all__ = ["cumsum", "reduce", "softmax", "take", "tri"]

_HALF = ("float16", "bfloat16")


def _acc_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The accumulator type the kernels use for a sum-like reduction of ``dt``."""
    if dt.name in _HALF or dt == np.float32:
        return np.dtype(np.float32)
    if dt == np.float64:
        return dt
    return np.dtype(np.int64)


def _result(values: Any, dtype: Any) -> np.ndarray:
    arr = np.asarray(values)
    out = _new(arr.shape, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(out, arr, casting="unsafe")
    return out


def reduce(op: str, a: np.ndarray, axes: tuple[int, ...], ddof: int) -> np.ndarray:
    """Reduce ``a`` over ``axes`` (sorted, non-negative, non-empty input) with ``op``.

    ``op`` is one of ``sum prod mean var std max min argmax argmin all any``;
    ``argmax``/``argmin`` take exactly one axis (the caller flattens for
    ``axis=None``). The result has the reduced axes removed and the dtype of
    :func:`pygpukit.reductions.result_dtype`.
    """
    from ..reductions import result_dtype

    dt = a.dtype
    out_dt = result_dtype(op, dt)
    ax = tuple(axes)
    fn: Any
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if op in ("sum", "prod"):
            fn = np.sum if op == "sum" else np.prod
            acc = _acc_dtype(dt)
            return _result(fn(a, axis=ax, dtype=acc), out_dt)
        if op in ("mean", "var", "std"):
            work = np.float32 if out_dt.name in _HALF or out_dt == np.float32 else np.float64
            x = a.astype(work)
            if op == "mean":
                return _result(np.mean(x, axis=ax, dtype=work), out_dt)
            fn = np.var if op == "var" else np.std
            return _result(fn(x, axis=ax, ddof=ddof, dtype=work), out_dt)
        if op in ("max", "min"):
            fn = np.max if op == "max" else np.min
            x = a.astype(np.float32) if dt.name in _HALF else a
            return _result(fn(x, axis=ax), out_dt)
        if op in ("argmax", "argmin"):
            fn = np.argmax if op == "argmax" else np.argmin
            x = a.astype(np.float32) if dt.name in _HALF else a
            return _result(fn(x, axis=ax[0]), out_dt)
        if op in ("all", "any"):
            fn = np.all if op == "all" else np.any
            x = a.astype(np.float32) if dt.name in _HALF else a
            return _result(fn(x, axis=ax), out_dt)
    raise ValueError(f"unknown reduction {op!r}")


def softmax(a: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """Softmax (or log-softmax) along ``axis`` in float32 (float64 for float64), stable."""
    work = np.float64 if a.dtype == np.float64 else np.float32
    x = a.astype(work)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        if log:
            res = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        else:
            e = np.exp(shifted)
            res = e / np.sum(e, axis=axis, keepdims=True)
    return _result(res, a.dtype)


def cumsum(a: np.ndarray, axis: int, out_dtype: str) -> np.ndarray:
    """Inclusive prefix sum along ``axis``, accumulated as the kernels do, in ``out_dtype``."""
    acc = _acc_dtype(a.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return _result(np.cumsum(a, axis=axis, dtype=acc), out_dtype)


def take(a: np.ndarray, indices: np.ndarray, axis: int, mode: str) -> np.ndarray:
    """``a`` gathered along ``axis`` at the int64 ``indices`` (any shape).

    ``mode``: ``"raise"`` (indices already checked by the caller; negatives
    count from the end), ``"wrap"`` or ``"clip"`` as NumPy's ``take``.
    """
    res = np.take(a, np.asarray(indices, dtype=np.int64), axis=axis, mode=mode)  # type: ignore[call-overload]
    return _result(res, a.dtype)


def tri(a: np.ndarray, k: int, upper: bool) -> np.ndarray:
    """``triu`` (upper) or ``tril`` of the last two axes, a new C-contiguous array."""
    res = np.triu(a, k) if upper else np.tril(a, k)
    return _result(res, a.dtype)

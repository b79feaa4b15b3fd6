"""Reductions, softmax and cumsum: ``gp.sum(a, axis=...)`` and friends.

NumPy's semantics, with these choices (the same on every backend):

- **Accumulation**: float16/bfloat16 accumulate in float32 and return their own
  dtype; float32 in float32; float64 in float64; integers and bools in int64.
- **Result dtypes**: ``sum``/``prod`` of bools and integers are int64 (NumPy
  gives uint64 for uint8; PyGPUkit has no uint64); ``mean``/``var``/``std`` of
  integers and bools are float64; ``argmax``/``argmin`` int64; ``all``/``any``
  bool; everything else keeps the input dtype.
- **Determinism**: on the GPU every reduction is a fixed tree for a given
  shape and device (per-block partials, then a final pass; no atomics), so the
  same input gives bitwise the same result every time.
- **NaN**: ``max``/``min`` propagate NaN; ``argmax``/``argmin`` return the
  index of the first NaN.
- **Empty inputs**: ``sum`` gives 0, ``prod`` 1, ``mean`` NaN; ``max``/``min``/
  ``argmax``/``argmin`` of an empty reduction raise ``ValueError``.

``axis`` is ``None`` (every axis), an int or a tuple of ints (negative counts
from the end; a list is a ``TypeError``, as in NumPy); ``keepdims`` (``True`` or
``False``, nothing else) keeps reduced axes with size 1; ``out`` receives the
result (any strides, its shape must match; values are cast to its dtype).
``dtype`` (``sum``/``prod``/``mean``/``var``/``std``/``cumsum``) is the result's
dtype, as in NumPy: the input is converted to it and the result returned in it
(integer sums and products wrap around exactly as NumPy's do; the accumulation
itself stays as above, so an integer ``mean``/``var`` whose NumPy accumulator
would overflow differs). Every argument is checked before any work starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _indexing
from . import validation as _v
from .array import GPUArray, _wrap
from .dtypes import NAMES, SUPPORTED

__all__ = [
    "all",
    "any",
    "argmax",
    "argmin",
    "cumsum",
    "log_softmax",
    "max",
    "mean",
    "min",
    "prod",
    "result_dtype",
    "softmax",
    "std",
    "sum",
    "var",
]

_FLOAT_NAMES = ("float64", "float32", "float16", "bfloat16")


def result_dtype(op: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype reduction ``op`` returns for an input of ``dtype`` (see the module doc)."""
    floating = NAMES.get(dtype) in _FLOAT_NAMES
    if op in ("sum", "prod", "cumsum"):
        return dtype if floating else SUPPORTED["int64"]
    if op in ("mean", "var", "std"):
        return dtype if floating else SUPPORTED["float64"]
    if op in ("argmax", "argmin"):
        return SUPPORTED["int64"]
    if op in ("all", "any"):
        return SUPPORTED["bool"]
    return dtype


def _check(a: Any, name: str) -> GPUArray:
    return _v.array(a, "a", name)


def normalize_axes(axis: Any, ndim: int, op: str = "") -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as sorted non-negative axes.

    Raises NumPy's ``AxisError`` (an ``IndexError`` and a ``ValueError``) for an axis out
    of range, ``ValueError`` for a repeated axis and ``TypeError`` for a non-integer or a list.
    """
    return _v.axes(axis, ndim, "axis", op)


def _host_empty(op: str, a: GPUArray, axes: tuple[int, ...], ddof: int) -> np.ndarray:
    """The result of ``op`` on an empty input, computed by NumPy (constant values or an error)."""
    dt = a.dtype
    probe = np.zeros(a.shape, dtype=np.float32 if dt.name == "bfloat16" else dt)
    with np.errstate(all="ignore"):
        if op in ("argmax", "argmin"):
            try:
                res = getattr(np, op)(probe, axis=axes[0])
            except ValueError as exc:
                raise ValueError(
                    f"{op}: attempt to get {op} of an empty sequence ({exc})"
                ) from None
        elif op in ("var", "std"):
            res = getattr(np, op)(probe, axis=axes, ddof=ddof)
        else:
            try:
                res = getattr(np, op)(probe, axis=axes)
            except ValueError as exc:
                raise ValueError(
                    f"{op}: zero-size array to reduction operation {op} which has no identity"
                ) from exc
    return np.asarray(res).astype(result_dtype(op, dt))


def _finish(
    res: GPUArray, a_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool, out: Any
) -> GPUArray:
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(a_shape))
        res = res.reshape(shape)
    if out is None:
        return res
    _v.out_array(out)
    if out.shape != res.shape:
        raise ValueError(f"out has shape {out.shape}, the result has shape {res.shape}")
    out._backend.copy_into(out._impl, res._impl)
    return out


def _reduce(
    op: str,
    a: Any,
    axis: Any,
    keepdims: bool,
    out: Any,
    dtype: Any = None,
    ddof: int = 0,
) -> GPUArray:
    a = _check(a, op)
    if out is not None:
        _v.out_array(out, op)
    keepdims = _v.boolean(keepdims, "keepdims", op)
    want = None if dtype is None else _v.dtype(dtype, "dtype", op)
    axes = normalize_axes(axis, a.ndim, op)
    if op in ("var", "std"):
        ddof = _v.index(ddof, "ddof", op)
    if want is not None:
        a = a.astype(want, copy=False)
    backend = a._backend
    if a.size == 0:
        from .creation import from_numpy

        res = from_numpy(_host_empty(op, a, axes, ddof))
    elif not axes:
        # Nothing to reduce: the elementwise identity of the reduction, in its result dtype.
        res = _wrap(backend.reduce(op, a.reshape((*a.shape, 1))._impl, (a.ndim,), ddof), backend)
    else:
        res = _wrap(backend.reduce(op, a._impl, axes, int(ddof)), backend)
    if want is not None and res.dtype != want:
        res = res.astype(want)  # NumPy returns the requested dtype
    return _finish(res, a.shape, axes, keepdims, out)


def sum(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
) -> GPUArray:
    """Sum over ``axis`` (halves accumulate in float32; ints and bools give int64)."""
    return _reduce("sum", a, axis, keepdims, out, dtype)


def prod(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
) -> GPUArray:
    """Product over ``axis`` (ints wrap around in int64 like NumPy)."""
    return _reduce("prod", a, axis, keepdims, out, dtype)


def mean(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
) -> GPUArray:
    """Arithmetic mean over ``axis`` (ints and bools give float64)."""
    return _reduce("mean", a, axis, keepdims, out, dtype)


def var(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: int = 0,
    keepdims: bool = False,
) -> GPUArray:
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom.

    Two passes: the mean, then the sum of squared deviations from it.
    """
    return _reduce("var", a, axis, keepdims, out, dtype, ddof)


def std(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: int = 0,
    keepdims: bool = False,
) -> GPUArray:
    """Standard deviation over ``axis`` (``sqrt(var)``)."""
    return _reduce("std", a, axis, keepdims, out, dtype, ddof)


def max(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Maximum over ``axis``; NaN propagates; an empty reduction is a ``ValueError``."""
    return _reduce("max", a, axis, keepdims, out)


def min(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Minimum over ``axis``; NaN propagates; an empty reduction is a ``ValueError``."""
    return _reduce("min", a, axis, keepdims, out)


def all(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Whether every element over ``axis`` is nonzero (NaN counts as true)."""
    return _reduce("all", a, axis, keepdims, out)


def any(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Whether some element over ``axis`` is nonzero (NaN counts as true)."""
    return _reduce("any", a, axis, keepdims, out)


def _arg(op: str, a: Any, axis: Any, out: Any, keepdims: bool) -> GPUArray:
    a = _check(a, op)
    if out is not None:
        _v.out_array(out, op)
    keepdims = _v.boolean(keepdims, "keepdims", op)
    if axis is None:
        flat = a.reshape(-1)
        res = _reduce(op, flat, 0, False, None)
        if keepdims:
            res = res.reshape((1,) * a.ndim)
        return _finish(res, res.shape, (), False, out)
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{op}: axis must be an int or None, got {_v.describe(axis)}")
    return _reduce(op, a, axis, keepdims, out)


def argmax(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Index of the maximum along ``axis`` (of the flattened array when None).

    The first one on ties; the first NaN when there is one.
    """
    return _arg("argmax", a, axis, out, keepdims)


def argmin(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
    """Index of the minimum along ``axis`` (of the flattened array when None).

    The first one on ties; the first NaN when there is one.
    """
    return _arg("argmin", a, axis, out, keepdims)


def _float_input(a: GPUArray) -> GPUArray:
    if NAMES[a.dtype] in _FLOAT_NAMES:
        return a
    return a.astype(SUPPORTED["float64"])


def _softmax(a: Any, axis: int, log: bool) -> GPUArray:
    name = "log_softmax" if log else "softmax"
    a = _float_input(_check(a, name))
    if a.ndim == 0:
        return _softmax(a.reshape(1), 0, log).reshape(())
    ax = _indexing.normalize_axis(axis, a.ndim)
    if a.size == 0:
        return a.copy()
    return _wrap(a._backend.softmax(a._impl, ax, log), a._backend)


def softmax(a: Any, axis: int = -1) -> GPUArray:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (numerically stable).

    Accumulated in float32 (float64 for float64), returned in the input dtype
    (integers and bools give float64).
    """
    return _softmax(a, axis, False)


def log_softmax(a: Any, axis: int = -1) -> GPUArray:
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (numerically stable).

    Accumulated in float32 (float64 for float64), returned in the input dtype
    (integers and bools give float64).
    """
    return _softmax(a, axis, True)


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> GPUArray:
    """Inclusive prefix sum along ``axis`` (of the flattened array when None).

    Accumulates like ``sum`` (halves in float32 returning their dtype, ints and
    bools in int64); ``dtype`` is the result's dtype, as in NumPy.
    """
    a = _check(a, "cumsum")
    if out is not None:
        _v.out_array(out, "cumsum")
    want = None if dtype is None else _v.dtype(dtype, "dtype", "cumsum")
    ax = 0 if axis is None else _indexing.normalize_axis(axis, a.ndim)
    if want is not None:
        a = a.astype(want, copy=False)
    if axis is None:
        a = a.reshape(-1)
    out_dt = result_dtype("cumsum", a.dtype) if want is None else want
    if a.size == 0:
        from .creation import empty

        res = empty(a.shape, dtype=out_dt)
    else:
        acc_dt = result_dtype("cumsum", a.dtype)
        res = _wrap(a._backend.cumsum(a._impl, ax, NAMES[acc_dt]), a._backend)
        if acc_dt != out_dt:
            res = res.astype(out_dt)  # NumPy returns the requested dtype
    return _finish(res, res.shape, (), False, out)

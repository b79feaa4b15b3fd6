"""The CUDA backend's reductions, scans, softmax and gather ops over ``_native``.

Each function is one ``_native`` call (kernels in ``native/kernels/reduce.cu``,
``softmax.cu``, ``gather.cu``; dispatch in ``native/ops/reduce.cpp``). The
native side returns reductions in their accumulator type (float32 for half
types, int64 for integers, ...); the one conversion to the result dtype is a
cast kernel here. Contract: :mod:`.base`.

A ``_native`` built before these ops existed (a stale development build) runs
them through the CPU backend with a host round trip instead of failing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from .select import native

__all__ = ["cumsum", "reduce", "softmax", "take", "tri"]

_native: Any = native()

_TAKE_MODES = {"raise": 0, "wrap": 1, "clip": 2}


def _to_host(x: Any) -> Any:
    if not isinstance(x, _native.Array):
        return x
    host = np.empty(x.shape, dtypes.SUPPORTED[x.dtype])
    x.copy_to_host(host)
    return host


def _on_host(name: str, a: Any, *args: Any) -> Any:
    """The CPU backend's ``name`` through a host round trip, the result on ``a``'s device."""
    from . import cpu_reduce

    res = getattr(cpu_reduce, name)(_to_host(a), *[_to_host(x) for x in args])
    out = _native.Array.empty(res.shape, dtypes.NAMES[res.dtype], a.device, None)
    out.copy_from_host(res)
    return out


def reduce(op: str, a: Any, axes: tuple[int, ...], ddof: int) -> Any:
    """Reduce ``a`` over ``axes`` (sorted, non-negative; ``a`` not empty) with ``op``.

    Returns a new array without the reduced axes in the result dtype of
    :func:`pygpukit.reductions.result_dtype`.
    """
    from ..reductions import result_dtype

    if not hasattr(_native, "reduce"):
        return _host_reduce(op, a, axes, ddof)
    want = dtypes.NAMES[result_dtype(op, dtypes.SUPPORTED[a.dtype])]
    res = _native.reduce(op, a, list(axes), int(ddof), None)
    return res if res.dtype == want else res.astype(want)


def _host_reduce(op: str, a: Any, axes: tuple[int, ...], ddof: int) -> Any:
    """``reduce`` through the CPU backend (its first argument is the op, not an array)."""
    from . import cpu_reduce

    res = cpu_reduce.reduce(op, _to_host(a), axes, ddof)
    out = _native.Array.empty(res.shape, dtypes.NAMES[res.dtype], a.device, None)
    out.copy_from_host(res)
    return out


def softmax(a: Any, axis: int, log: bool) -> Any:
    """Softmax (log-softmax when ``log``) along ``axis`` in the input's (floating) dtype."""
    if not hasattr(_native, "softmax"):
        return _on_host("softmax", a, axis, log)
    return _native.softmax(a, int(axis), bool(log), None)


def cumsum(a: Any, axis: int, out_dtype: str) -> Any:
    """Inclusive prefix sum along ``axis`` into a new ``out_dtype`` array."""
    if not hasattr(_native, "cumsum"):
        return _on_host("cumsum", a, axis, out_dtype)
    res = _native.cumsum(a, int(axis), None)
    return res if res.dtype == out_dtype else res.astype(out_dtype)


def take(a: Any, indices: Any, axis: int, mode: str) -> Any:
    """Gather along ``axis`` at the 1-D int64 ``indices`` (mode ``raise``/``wrap``/``clip``)."""
    if not hasattr(_native, "take"):
        return _on_host("take", a, indices, axis, mode)
    return _native.take(a, indices, int(axis), _TAKE_MODES[mode], None)


def tri(a: Any, k: int, upper: bool) -> Any:
    """``triu`` (``upper``) or ``tril`` of the last two axes into a new array."""
    if not hasattr(_native, "tri"):
        return _on_host("tri", a, k, upper)
    return _native.tri(a, int(k), bool(upper), None)

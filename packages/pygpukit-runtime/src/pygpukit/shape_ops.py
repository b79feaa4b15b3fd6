"""Shape ops: concatenate, stack, split, tile, repeat, take, triu/tril, flip.

Most are built from views and one strided copy per piece (``copy_into``), so
they work the same on every backend and launch no new kernel: ``split`` and
``flip`` return views (``flip`` with negative strides), ``concatenate``/
``stack`` copy each input into a slice of one new array, ``tile`` and
``repeat`` with one count copy a broadcast view. ``take`` (a gather kernel),
``repeat`` with per-element counts (a gather with host-built indices) and
``triu``/``tril`` (a masking kernel) go to the backend.

Index checking in ``take``: indices given as NumPy arrays, lists or ints are
checked on the host before anything runs (``IndexError`` like NumPy). A
GPUArray of indices with ``mode="raise"`` is copied to the host to be checked
(a sync point); pass ``mode="wrap"`` or ``mode="clip"`` to stay asynchronous.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _indexing
from .array import GPUArray, _wrap
from .dtypes import SUPPORTED, promote_types
from .validation import choice, describe, index, out_array

__all__ = [
    "array_split",
    "concatenate",
    "flip",
    "repeat",
    "split",
    "stack",
    "take",
    "tile",
    "tril",
    "triu",
]


def _check(a: Any, name: str) -> GPUArray:
    if not isinstance(a, GPUArray):
        raise TypeError(f"{name}() expects a GPUArray, got {describe(a)}")
    return a


def _common_dtype(arrays: Sequence[GPUArray]) -> np.dtype[Any]:
    return functools.reduce(promote_types, (x.dtype for x in arrays))


def concatenate(arrays: Sequence[Any], axis: int | None = 0, out: Any = None) -> GPUArray:
    """Join arrays along an existing ``axis`` (flattening them first when ``axis`` is None).

    Shapes must agree except along ``axis``; the result dtype is NumPy's
    promotion of the inputs' dtypes (or ``out``'s dtype when given).
    """
    if isinstance(arrays, GPUArray) or not isinstance(arrays, (list, tuple)):
        raise TypeError("concatenate() expects a sequence of GPUArrays")
    arrs = [_check(x, "concatenate") for x in arrays]
    if not arrs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        arrs = [x.reshape(-1) for x in arrs]
        axis = 0
    first = arrs[0]
    if first.ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = _indexing.normalize_axis(axis, first.ndim)
    for i, x in enumerate(arrs[1:], 1):
        if x.ndim != first.ndim:
            raise ValueError(
                f"concatenate: array 0 has {first.ndim} dimensions, array {i} has {x.ndim}"
            )
        for d in range(first.ndim):
            if d != ax and x.shape[d] != first.shape[d]:
                raise ValueError(
                    f"concatenate: along dimension {d}, array 0 has size {first.shape[d]} "
                    f"and array {i} has size {x.shape[d]}"
                )
    shape = list(first.shape)
    shape[ax] = sum(x.shape[ax] for x in arrs)
    if out is None:
        from .creation import empty

        result = empty(tuple(shape), dtype=_common_dtype(arrs))
    else:
        result = out_array(out, "concatenate")
        if result.shape != tuple(shape):
            raise ValueError(f"out has shape {result.shape}, the result has shape {tuple(shape)}")
    start = 0
    index: list[Any] = [slice(None)] * first.ndim
    for x in arrs:
        n = x.shape[ax]
        if n:
            index[ax] = slice(start, start + n)
            target = result[tuple(index)]
            result._backend.copy_into(target._impl, x._impl)
        start += n
    return result


def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None) -> GPUArray:
    """Join same-shape arrays along a new ``axis``."""
    if isinstance(arrays, GPUArray) or not isinstance(arrays, (list, tuple)):
        raise TypeError("stack() expects a sequence of GPUArrays")
    arrs = [_check(x, "stack") for x in arrays]
    if not arrs:
        raise ValueError("need at least one array to stack")
    shape = arrs[0].shape
    for i, x in enumerate(arrs[1:], 1):
        if x.shape != shape:
            raise ValueError(f"stack: array 0 has shape {shape}, array {i} has shape {x.shape}")
    ax = _indexing.normalize_axis(axis, len(shape) + 1)
    return concatenate([x.expand_dims(ax) for x in arrs], axis=ax, out=out)


def _split_points(n: int, sections: Any, exact: bool) -> list[int]:
    if isinstance(sections, (int, np.integer)) and not isinstance(sections, bool):
        k = index(sections, "indices_or_sections", "split")
        if k <= 0:
            raise ValueError("number of sections must be larger than 0")
        if exact and n % k:
            raise ValueError("array split does not result in an equal division")
        base, extra = divmod(n, k)
        points, pos = [], 0
        for i in range(k - 1):
            pos += base + (1 if i < extra else 0)
            points.append(pos)
        return points
    try:
        return [operator.index(i) for i in sections]
    except TypeError:
        raise TypeError("indices_or_sections must be an int or a sequence of ints") from None


def _split(a: Any, indices_or_sections: Any, axis: int, exact: bool, name: str) -> list[GPUArray]:
    a = _check(a, name)
    if a.ndim == 0:
        raise ValueError(f"{name}: a 0-d array cannot be split")
    ax = _indexing.normalize_axis(axis, a.ndim)
    n = a.shape[ax]
    points = _split_points(n, indices_or_sections, exact)
    bounds = [0, *points, n]
    index: list[Any] = [slice(None)] * a.ndim
    pieces = []
    for lo, hi in itertools.pairwise(bounds):
        index[ax] = slice(lo, hi)
        pieces.append(a[tuple(index)])
    return pieces


def split(a: Any, indices_or_sections: Any, axis: int = 0) -> list[GPUArray]:
    """Views of ``a`` cut along ``axis`` into N equal sections or at the given indices.

    N sections that do not divide the axis are a ``ValueError``.
    """
    return _split(a, indices_or_sections, axis, True, "split")


def array_split(a: Any, indices_or_sections: Any, axis: int = 0) -> list[GPUArray]:
    """As :func:`split`, but N sections need not be equal (the first ones get one more)."""
    return _split(a, indices_or_sections, axis, False, "array_split")


def tile(a: Any, reps: Any) -> GPUArray:
    """Repeat the whole array ``reps`` times along each axis (a broadcast view, one copy)."""
    a = _check(a, "tile")
    reps_t = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    try:
        reps_t = tuple(operator.index(r) for r in reps_t)
    except TypeError:
        raise TypeError("tile: reps must be an int or a sequence of ints") from None
    if any(r < 0 for r in reps_t):
        raise ValueError("tile: negative repetitions")
    nd = max(a.ndim, len(reps_t))
    reps_t = (1,) * (nd - len(reps_t)) + reps_t
    x = a.reshape((1,) * (nd - a.ndim) + a.shape)
    # (r0, s0, r1, s1, ...) broadcast, then merged to (r0*s0, r1*s1, ...).
    expanded = x.reshape(tuple(v for s in x.shape for v in (1, s)))
    target = tuple(v for r, s in zip(reps_t, x.shape, strict=False) for v in (r, s))
    final = tuple(r * s for r, s in zip(reps_t, x.shape, strict=False))
    return expanded.broadcast_to(target).copy().reshape(final)


def repeat(a: Any, repeats: Any, axis: int | None = None) -> GPUArray:
    """Repeat each element ``repeats`` times along ``axis`` (the flattened array when None).

    ``repeats`` is an int (a broadcast view and one copy) or one count per
    element along the axis (a gather; a GPUArray of counts is read on the host,
    a sync point, because the result's shape depends on it).
    """
    a = _check(a, "repeat")
    if axis is None:
        a = a.reshape(-1)
        ax = 0
    else:
        ax = _indexing.normalize_axis(axis, a.ndim)
    if isinstance(repeats, GPUArray):
        repeats = repeats.to_numpy()
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iub":
        raise TypeError(f"repeat: repeats must be integers, got {describe(repeats)}")
    if (counts < 0).any():
        raise ValueError("repeat: negative repetitions")
    n = a.shape[ax]
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0]) if counts.size else 0
        if counts.ndim > 1 or (counts.ndim == 1 and counts.size != 1):
            raise ValueError(f"repeat: {counts.size} counts for an axis of size {n}")
        x = a.expand_dims(ax + 1)
        shape = (*a.shape[: ax + 1], r, *a.shape[ax + 1 :])
        final = (*a.shape[:ax], n * r, *a.shape[ax + 1 :])
        return x.broadcast_to(shape).copy().reshape(final)
    if counts.ndim != 1 or counts.size != n:
        raise ValueError(f"repeat: {counts.size} counts for an axis of size {n}")
    indices = np.repeat(np.arange(n, dtype=np.int64), counts.astype(np.int64))
    return _take(a, indices, ax, "raise")


def take(
    a: Any, indices: Any, axis: int | None = None, out: Any = None, mode: str = "raise"
) -> GPUArray:
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array when None).

    The result's shape is ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``.
    ``mode``: ``"raise"`` (out-of-range is an ``IndexError``; negatives count from
    the end), ``"wrap"`` or ``"clip"`` as NumPy; ``out`` receives the result (cast
    to its dtype). See the module doc for where indices are checked.
    """
    res = _take(a, indices, axis, mode)
    if out is None:
        return res
    out = out_array(out, "take")
    if out.shape != res.shape:
        raise ValueError(f"out has shape {out.shape}, the result has shape {res.shape}")
    out._backend.copy_into(out._impl, res._impl)
    return out


def _take(a: Any, indices: Any, axis: int | None, mode: str) -> GPUArray:
    a = _check(a, "take")
    choice(mode, ("raise", "wrap", "clip"), "mode", "take")
    if axis is None:
        a = a.reshape(-1)
        ax = 0
    else:
        ax = _indexing.normalize_axis(axis, a.ndim)
    n = a.shape[ax]
    if isinstance(indices, GPUArray):
        if indices.dtype.kind not in "iu":
            raise IndexError(f"take: indices must be integers, got {indices.dtype}")
        idx_arr = indices
        host = indices.to_numpy() if mode == "raise" else None
    else:
        host = np.asarray(indices)
        if host.dtype.kind not in "iu" and not (host.dtype.kind == "f" and host.size == 0):
            raise IndexError(f"take: indices must be integers, got {host.dtype}")
        idx_arr = None
    if host is not None and mode == "raise" and host.size:
        lo, hi = int(host.min()), int(host.max())
        if lo < -n or hi >= n:
            bad = lo if lo < -n else hi
            raise IndexError(f"take: index {bad} is out of bounds for axis {ax} with size {n}")
    if n == 0 and mode != "raise" and (host.size if host is not None else indices.size):
        raise IndexError("take: cannot do a non-empty take from an empty axis")
    idx_shape = tuple(host.shape) if host is not None else tuple(indices.shape)
    out_shape = a.shape[:ax] + idx_shape + a.shape[ax + 1 :]
    if a.size == 0 or any(s == 0 for s in out_shape):
        from .creation import empty

        return empty(out_shape, dtype=a.dtype)
    if idx_arr is None:
        from .creation import from_numpy

        assert host is not None  # indices from the host
        idx_arr = from_numpy(np.ascontiguousarray(host.reshape(-1), dtype=np.int64))
    else:
        # stays on the device: a cast kernel when needed, no host round trip
        idx_arr = idx_arr.astype(SUPPORTED["int64"], copy=False).reshape(-1)
    res = _wrap(a._backend.take(a._impl, idx_arr._impl, ax, mode), a._backend)
    return res.reshape(out_shape)


def _tri(a: Any, k: int, upper: bool) -> GPUArray:
    name = "triu" if upper else "tril"
    a = _check(a, name)
    k = index(k, "k", name)
    if a.ndim < 2:
        if a.ndim == 1:
            # NumPy treats a 1-D input as the rows of a square matrix
            n = a.shape[0]
            return _tri(a.reshape(1, n).broadcast_to((n, n)), k, upper)
        raise ValueError(f"{name}: the input must have at least 1 dimension")
    if a.size == 0:
        return a.copy()
    return _wrap(a._backend.tri(a._impl, k, upper), a._backend)


def triu(a: Any, k: int = 0) -> GPUArray:
    """Copy with the elements below the ``k``-th diagonal of the last two axes zeroed."""
    return _tri(a, k, True)


def tril(a: Any, k: int = 0) -> GPUArray:
    """Copy with the elements above the ``k``-th diagonal of the last two axes zeroed."""
    return _tri(a, k, False)


def flip(a: Any, axis: Any = None) -> GPUArray:
    """Reverse the elements along ``axis`` (every axis when None); a view, negative strides."""
    from .reductions import normalize_axes

    a = _check(a, "flip")
    axes = normalize_axes(tuple(axis) if isinstance(axis, list) else axis, a.ndim, "flip")
    index = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(a.ndim))
    return a[index] if a.ndim else a

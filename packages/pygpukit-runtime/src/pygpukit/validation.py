"""Argument validation shared by every public entry point: one checker per kind of argument.

The runtime, ``pygpukit.ops`` and any package built on them validate through these, so a
kind of argument (a flag, an axis, a size, a stream, a seed, an output array) is checked the
same way, with the same message, everywhere. Each checker takes the value, the argument's
name and the operation's (for the message), returns the value normalised, and raises before
any work is enqueued:

- ``TypeError`` when the argument has the wrong type (a string where a size goes, a list where
  an axis goes, a non-bool flag, a non-GPUArray array, a non-Stream stream);
- ``ValueError`` when the type is right but the value is not (a negative size, a seed out of
  range, a shape whose byte size no device could hold); an axis out of range is NumPy's
  ``AxisError`` (both a ``ValueError`` and an ``IndexError``);
- :class:`~pygpukit.errors.ReadOnlyArrayError` when an output is read-only.

Messages name the argument and say what was expected; they show an array by its shape and
dtype, never by its repr (which could print a whole array).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .array import GPUArray, check_writeable

__all__ = [
    "INDEX_MAX",
    "array",
    "axes",
    "axis",
    "boolean",
    "byte_size",
    "choice",
    "describe",
    "dtype",
    "index",
    "out_array",
    "real",
    "seed",
    "size",
    "stream",
]

#: The largest element count or byte size a shape may reach: sizes are 64-bit signed in C++.
INDEX_MAX = 2**63 - 1

AxisError = np.exceptions.AxisError


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message: never a whole array's repr."""
    if isinstance(value, GPUArray):
        return f"a GPUArray of shape {tuple(value.shape)} and dtype {value.dtype.name}"
    if isinstance(value, np.ndarray):
        return f"a numpy.ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (bool, int, float, complex, np.generic)) or value is None:
        text = repr(value)
        kind = type(value).__name__
        return f"{kind} {text}" if len(text) <= 40 else f"{kind} {text[:37]}..."
    if isinstance(value, str):
        text = repr(value)
        return f"str {text}" if len(text) <= 40 else f"str {text[:37]}..."
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a value of type {type(value).__name__}"


def _where(op: str, name: str) -> str:
    return f"{op}: {name}" if op else name


def array(value: Any, name: str, op: str) -> GPUArray:
    """``value`` when it is a GPUArray, else ``TypeError`` naming ``name`` of ``op``."""
    if not isinstance(value, GPUArray):
        raise TypeError(f"{_where(op, name)} must be a GPUArray, got {describe(value)}")
    return value


def out_array(value: Any, op: str | None = None, name: str = "out") -> GPUArray:
    """An ``out=`` argument: a writeable GPUArray (``TypeError`` / ``ReadOnlyArrayError``)."""
    label = _where(op or "", name)
    if not isinstance(value, GPUArray):
        raise TypeError(f"{label} must be a GPUArray, got {describe(value)}")
    check_writeable(value, label)
    return value


def boolean(value: Any, name: str, op: str = "") -> bool:
    """A flag: ``True``/``False`` (or a NumPy bool); anything else is a ``TypeError``.

    Truthiness is not accepted: ``keepdims="no"`` is a mistake, not ``True``.
    """
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{_where(op, name)} must be True or False, got {describe(value)}")


def index(value: Any, name: str, op: str = "") -> int:
    """An integer (Python int, NumPy integer, or anything with ``__index__``; not a bool)."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{_where(op, name)} must be an integer, got {describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{_where(op, name)} must be an integer, got {describe(value)}") from None


def size(value: Any, name: str, op: str = "", minimum: int = 0) -> int:
    """A count or size: an integer of at least ``minimum`` and at most :data:`INDEX_MAX`.

    Strings are refused (``TypeError``), as are floats, even integral ones.
    """
    n = index(value, name, op)
    if n < minimum:
        want = "non-negative" if minimum == 0 else f"at least {minimum}"
        raise ValueError(f"{_where(op, name)} must be {want}, got {n}")
    if n > INDEX_MAX:
        raise ValueError(f"{_where(op, name)} = {n} is above 2**63 - 1, the largest size")
    return n


def real(value: Any, name: str, op: str = "", *, finite: bool = False) -> float:
    """A real number (int, float or NumPy scalar; not a bool or a string) as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{_where(op, name)} must be a real number, got {describe(value)}")
    if isinstance(value, (complex, np.complexfloating)):
        raise TypeError(f"{_where(op, name)} must be a real number, got {describe(value)}")
    number = float(value)
    if finite and not math.isfinite(number):
        raise ValueError(f"{_where(op, name)} must be finite, got {number}")
    return number


def byte_size(shape: tuple[int, ...], itemsize: int, op: str = "") -> int:
    """The bytes of a ``shape`` of ``itemsize``-byte elements; ``ValueError`` past 2**63 - 1.

    Caught here, a shape such as ``(2**40, 2**40)`` gets a message naming it instead of an
    ``OverflowError`` from the conversion to a C size.
    """
    total = itemsize
    for d in shape:
        total *= d
    if total > INDEX_MAX:
        raise ValueError(
            f"{_where(op, 'shape')} {shape} of {itemsize}-byte elements is "
            f"{total} bytes, more than any device can address (2**63 - 1)"
        )
    return total


def axis(value: Any, ndim: int, name: str = "axis", op: str = "") -> int:
    """One axis in ``[0, ndim)`` (negatives count from the end): NumPy's ``AxisError`` if not."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__index__"):
        raise TypeError(f"{_where(op, name)} must be an integer, got {describe(value)}")
    ax = operator.index(value)
    if not -ndim <= ax < ndim:
        raise AxisError(ax, ndim, _where(op, name))
    return ax + ndim if ax < 0 else ax


def axes(value: Any, ndim: int, name: str = "axis", op: str = "") -> tuple[int, ...]:
    """``None`` (every axis), one axis or a tuple of distinct axes, as sorted axes.

    A list is a ``TypeError``, as in NumPy (``axis=[0]`` is usually a mistake for ``0``).
    """
    if value is None:
        return tuple(range(ndim))
    if isinstance(value, tuple):
        out = [axis(item, ndim, name, op) for item in value]
        if len(set(out)) != len(out):
            raise ValueError(f"{_where(op, name)}: repeated axis in {value!r}")
        return tuple(sorted(out))
    if isinstance(value, (list, np.ndarray, GPUArray)):
        raise TypeError(
            f"{_where(op, name)} must be None, an integer or a tuple of integers, got "
            f"{describe(value)} (use a tuple)"
        )
    return (axis(value, ndim, name, op),)


def dtype(value: Any, name: str = "dtype", op: str = "") -> np.dtype[Any]:
    """A supported dtype (any spelling :func:`pygpukit.dtypes.normalize` takes)."""
    from .dtypes import normalize

    try:
        return normalize(value)
    except TypeError as exc:
        raise TypeError(f"{_where(op, name)}: {exc}") from None


def stream(value: Any, name: str = "stream", op: str = "") -> Any:
    """``None`` (the current stream) or a :class:`pygpukit.Stream`; returns its backend impl."""
    if value is None:
        return None
    from .stream import Stream

    if not isinstance(value, Stream):
        raise TypeError(f"{_where(op, name)} must be a gp.Stream or None, got {describe(value)}")
    return value._impl


def seed(value: Any, name: str = "seed", op: str = "", bits: int = 64) -> int:
    """A random seed: an integer in ``[0, 2**bits)``; others are refused, never wrapped."""
    n = index(value, name, op)
    if not 0 <= n < 2**bits:
        raise ValueError(
            f"{_where(op, name)} must be in [0, 2**{bits}), got {n}: a seed outside it would be "
            "wrapped into another one silently"
        )
    return n


def choice(value: Any, options: Sequence[str], name: str, op: str = "") -> str:
    """One of ``options`` (strings); ``ValueError`` listing them otherwise."""
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{_where(op, name)} must be one of {listed}, got {describe(value)}")
    return value

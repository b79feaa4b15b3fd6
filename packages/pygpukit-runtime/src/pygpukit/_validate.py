"""Argument validation shared by every public entry point: one checker per kind of argument.

Each checker takes the value and the argument's name (and the operation's, for the message),
returns the value normalised, and raises before any work is enqueued:

- ``TypeError`` when the argument has the wrong type (a string where a size goes, a list where
  an axis goes, a non-bool flag, a non-GPUArray array);
- ``ValueError`` when the type is right but the value is not (a negative size, an axis out of
  range, a seed out of range, a shape whose byte size overflows);
- :class:`~pygpukit.errors.ReadOnlyArrayError` when an output is read-only.

Messages name the argument and say what was expected; they show an array by its shape and
dtype, never by its repr (which could print a whole array).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .array import GPUArray, check_writeable

__all__ = [
    "array",
    "describe",
    "out_array",
]


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message: never a whole array's repr."""
    if isinstance(value, GPUArray):
        return f"GPUArray of shape {tuple(value.shape)} and dtype {value.dtype.name}"
    if isinstance(value, np.ndarray):
        return f"numpy.ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (bool, int, float, complex, np.generic, type(None))):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, str):
        text = repr(value)
        return f"str {text}" if len(text) <= 40 else f"str {text[:37]}..."
    return f"a {type(value).__name__}"


def array(value: Any, name: str, op: str) -> GPUArray:
    """``value`` when it is a GPUArray, else ``TypeError`` naming ``name`` of ``op``."""
    if not isinstance(value, GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {describe(value)}")
    return value


def out_array(value: Any, op: str | None = None, name: str = "out") -> GPUArray:
    """An ``out=`` argument: a writeable GPUArray (``TypeError`` / ``ReadOnlyArrayError``)."""
    label = f"{op}: {name}" if op else name
    if not isinstance(value, GPUArray):
        raise TypeError(f"{label} must be a GPUArray, got {describe(value)}")
    check_writeable(value, label)
    return value


def index(value: Any, name: str, op: str) -> int:
    """An integer argument (Python int, NumPy integer, or anything with ``__index__``; no bool)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be an integer, got {describe(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {describe(value)}") from None

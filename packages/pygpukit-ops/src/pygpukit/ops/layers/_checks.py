"""What the layers share: checks of a call's input, and the bounded dict of their plans."""

from __future__ import annotations

import threading
from typing import Any, TypeVar

import numpy as np

from pygpukit.array import GPUArray

from .. import _common as c


def check_input(x: Any, name: str, dtype: np.dtype[Any], last: int | None = None) -> GPUArray:
    """``x`` a C-contiguous GPUArray of ``dtype`` (whose last axis is ``last`` when given)."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"{name} must be a GPUArray, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype}; this layer was built for {dtype}")
    if last is not None and (x.ndim == 0 or x.shape[-1] != last):
        raise ValueError(f"{name} must be [..., {last}] for this layer, got shape {x.shape}")
    if not x.is_contiguous():
        raise ValueError(f"{name} must be C-contiguous (got strides {x.strides}); pass x.copy()")
    return x


def output(out: GPUArray | None, shape: tuple[int, ...], dtype: np.dtype[Any]) -> GPUArray:
    """``out`` when given (checked: shape, dtype, C-contiguous), else a new array."""
    c.check_out(out, shape, dtype)
    return c.result(out, shape, dtype)


def weight(w: Any, name: str, ndim: int, dtypes: Any = c.FLOAT_DTYPES) -> GPUArray:
    """A weight argument: a C-contiguous float GPUArray of rank ``ndim``."""
    return c.check_array(w, name, dtypes=dtypes, ndim=ndim)


K = TypeVar("K")
V = TypeVar("V")

#: Plans a layer keeps per kind of call. A model sees one shape bucket per prompt length, so
#: without a bound a long-running server would keep a plan per length in every layer.
MAX_PLANS = 256


class PlanDict(dict[K, V]):
    """A layer's plans by shape bucket: a plain dict lookup, at most ``MAX_PLANS`` entries.

    Inserting into a full dict drops the oldest entry. Plans hold no state (a captured CUDA
    graph keeps its launches' arguments, not the plan), so a dropped plan is only made again
    at its next use. Inserts hold a lock: two threads running one model (serving engines
    sharing its layers) could otherwise both pick the same oldest key and the second ``del``
    raise ``KeyError``. Lookups (``get``) take none.
    """

    _insert_lock = threading.Lock()

    def __setitem__(self, key: K, value: V) -> None:
        """Store ``value``, dropping the oldest plan first when the dict is full."""
        with self._insert_lock:
            if key not in self and len(self) >= MAX_PLANS:
                del self[next(iter(self))]
            super().__setitem__(key, value)

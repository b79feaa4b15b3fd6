"""Benchmark inputs: dtype names and fresh random host data.

Every run draws new random numbers (never zeros: they hide unwritten outputs and
can run faster than real data); the seed is recorded in the result file so a run
can be repeated. Inputs are generated on the host in the *storage* dtype of the
case (``tf32`` is stored as float32, ``bfloat16`` and ``float8`` through
``ml_dtypes``) and uploaded to every library from the same host array, so every
library computes on identical values.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["DTYPE_ALIASES", "DataCache", "parse_dtype", "random_array", "storage_dtype"]

#: Accepted spellings on the command line -> canonical benchmark dtype names.
DTYPE_ALIASES: dict[str, str] = {
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "tf32": "tf32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "i8": "int8",
    "i32": "int32",
    "u8": "uint8",
}

_CANONICAL = {
    "float64",
    "float32",
    "tf32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "int32",
    "int64",
    "uint8",
}


def parse_dtype(name: str) -> str:
    """Canonical benchmark dtype name of ``name`` (``"bf16"`` -> ``"bfloat16"``).

    ``tf32`` is a dtype here: float32 storage computed on tensor cores, which
    PyGPUkit only does when asked (``allow_tf32``). Raises ``ValueError`` for an
    unknown name.
    """
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in _CANONICAL:
        known = ", ".join(sorted(_CANONICAL | set(DTYPE_ALIASES)))
        raise ValueError(f"unknown dtype {name!r}; known: {known}")
    return key


def storage_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype that holds values of the benchmark dtype ``name`` on the host."""
    if name == "tf32":
        return np.dtype(np.float32)
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Fresh random values of ``shape`` in the storage dtype of ``dtype``.

    Floats are standard normal (rounded to the dtype), integers uniform over a
    small range, ``uint8`` uniform random bytes. No element is systematically
    zero.
    """
    target = storage_dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if target == np.uint8:
        return np.frombuffer(rng.bytes(n), dtype=np.uint8).reshape(shape).copy()
    if target.kind in "iu":
        return rng.integers(-100, 100, size=shape, dtype=target)
    values = rng.standard_normal(size=shape, dtype=np.float32)
    if target == np.float64:
        return values.astype(np.float64)
    return values if target == np.float32 else values.astype(target)


class DataCache:
    """Random host arrays shared by the cases of one run, least recently used dropped.

    Generating a GiB of random numbers takes seconds; cases that use the same
    shape and dtype (``add`` and ``mul`` on the same arrays) share them within
    one run. ``limit_bytes`` bounds the host memory the cache keeps.
    """

    def __init__(self, rng: np.random.Generator, limit_bytes: int = 4 << 30) -> None:
        self.rng = rng
        self.limit_bytes = limit_bytes
        self._arrays: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()

    def get(self, shape: tuple[int, ...], dtype: str, index: int = 0) -> np.ndarray:
        """The ``index``-th random array of ``shape`` and ``dtype`` of this run."""
        key = (tuple(shape), storage_dtype(dtype).name, index)
        array = self._arrays.get(key)
        if array is not None:
            self._arrays.move_to_end(key)
            return array
        array = random_array(self.rng, shape, dtype)
        self._arrays[key] = array
        while len(self._arrays) > 1 and self._nbytes() > self.limit_bytes:
            self._arrays.popitem(last=False)
        return array

    def clear(self) -> None:
        """Drop every cached array."""
        self._arrays.clear()

    def _nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

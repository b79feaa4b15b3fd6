"""Element types: the NumPy dtype objects PyGPUkit supports, and normalisation.

``gp.float32`` and friends *are* NumPy dtypes (``bfloat16`` comes from
``ml_dtypes``), so they compare equal to ``np.float32`` and ``"float32"``.
:func:`normalize` accepts a dtype, a scalar type or a string (``"float32"``,
``"f4"``, ``"bf16"``, ``"half"``) and raises ``TypeError`` for anything else.
:func:`promote_types` is the promotion of elementwise ops and ``concatenate``:
C++ owns the table (``_native.PROMOTION``); without ``_native``, the NumPy rule
it tabulates (:func:`numpy_promotion`) gives the same table, which
``tests/runtime/test_cross_language_facts.py`` proves.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "NAMES",
    "SUPPORTED",
    "bfloat16",
    "bool_",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_floating",
    "normalize",
    "numpy_promotion",
    "promote_types",
    "promotion_table",
    "uint8",
]

float64 = np.dtype(np.float64)
float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

#: Canonical name -> dtype, in the order ``info`` and the docs list them.
SUPPORTED: dict[str, np.dtype[Any]] = {
    d.name: d
    for d in (float64, float32, float16, bfloat16, int8, int16, int32, int64, uint8, bool_)
}

#: dtype -> canonical name, a dict lookup (``np.dtype.name`` is a slow Python property).
NAMES: dict[np.dtype[Any], str] = {d: name for name, d in SUPPORTED.items()}

_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "int": "int64",
    "bool_": "bool",
}

_CACHE: dict[Any, np.dtype[Any]] = {}


def _unsupported(dtype: Any) -> TypeError:
    names = ", ".join(SUPPORTED)
    if isinstance(dtype, np.ndarray):  # never print a whole array
        shown = f"(a numpy.ndarray of shape {dtype.shape}, not a dtype)"
    else:
        shown = repr(dtype)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return TypeError(f"unsupported dtype {shown}; PyGPUkit supports {names}")


def normalize(dtype: Any) -> np.dtype[Any]:
    """The supported NumPy dtype ``dtype`` names; ``TypeError`` when it is not one.

    ``None`` is not accepted here: callers decide their own default.
    """
    try:
        return _CACHE[dtype]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, str):
        key = dtype.strip()
        key = _ALIASES.get(key, key)
        result = SUPPORTED.get(key)
        if result is None:
            try:
                result = np.dtype(key)  # NumPy's own spellings first ("f4", "U8" is text)
            except TypeError:
                lower = _ALIASES.get(key.lower(), key.lower())  # then "BF16", "Float32"
                result = SUPPORTED.get(lower)
                if result is None:
                    raise _unsupported(dtype) from None
    elif dtype is None:
        raise _unsupported(dtype)
    else:
        try:
            result = np.dtype(dtype)
        except (TypeError, ValueError):
            raise _unsupported(dtype) from None
    if result.name not in SUPPORTED or result.byteorder == ">":
        raise _unsupported(dtype)
    result = SUPPORTED[result.name]
    with contextlib.suppress(TypeError):  # unhashable inputs are simply not cached
        _CACHE[dtype] = result
    return result


def is_floating(dtype: np.dtype[Any]) -> bool:
    """True for float64/32/16 and bfloat16."""
    return dtype.kind == "f" or dtype == bfloat16


def numpy_promotion(a: str, b: str) -> str:
    """The result dtype name for dtype names ``a`` and ``b`` by the rule C++ tabulates.

    NumPy's ``result_type`` (ml_dtypes' for bfloat16); where it has no answer
    (bfloat16 with float16 or with int16/32/64), the smallest float that both
    dtypes cast to safely. :func:`promotion_table` uses it only without ``_native``.
    """
    da, db = SUPPORTED[a], SUPPORTED[b]
    try:
        return str(np.result_type(da, db).name)
    except TypeError:  # numpy.exceptions.DTypePromotionError
        for name in ("float32", "float64"):
            if np.can_cast(da, name) and np.can_cast(db, name):
                return name
        raise


@functools.cache
def promotion_table() -> dict[tuple[str, str], str]:
    """``{(dtype name, dtype name): result dtype name}`` for every pair (docs/elementwise.md).

    ``_native.PROMOTION`` when ``pygpukit._native`` imports, else :func:`numpy_promotion`.
    """
    from .backend.select import native

    table = getattr(native(), "PROMOTION", None)
    if table is not None:
        return dict(table)
    return {(a, b): numpy_promotion(a, b) for a in SUPPORTED for b in SUPPORTED}


def promote_types(a: Any, b: Any) -> np.dtype[Any]:
    """The dtype an elementwise op gives arrays of dtypes ``a`` and ``b``.

    NumPy 2's rules, bfloat16 as docs/elementwise.md tabulates; ``TypeError``
    for an unsupported dtype.
    """
    return SUPPORTED[promotion_table()[normalize(a).name, normalize(b).name]]

"""Elementwise ops with NumPy semantics: ``gp.add``, ``gp.exp``, ``gp.where``, ``gp.clip``, ...

Every function takes GPUArrays, Python scalars or NumPy scalars (at least one
GPUArray; NumPy arrays are uploaded), broadcasts as NumPy does and promotes
dtypes by NumPy 2's rules: Python scalars are *weak* (``float16_array + 1.5``
stays float16), NumPy scalars and arrays are not. bfloat16 promotes as
``docs/elementwise.md`` tabulates. ``out=`` writes into an existing array,
casting with NumPy's ``same_kind`` rule (a ``TypeError`` where NumPy refuses).

On the CUDA backend each call is one ``_native`` call: checks, promotion,
output allocation from the pool and one launch on the current stream, with
no synchronization.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .array import GPUArray, _operand, _wrap
from .validation import index, out_array

#: What the functions accept as an operand.
ArrayLike = GPUArray | bool | int | float | np.generic | np.ndarray

__all__ = [
    "abs",
    "absolute",
    "add",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "ceil",
    "clip",
    "cos",
    "divide",
    "equal",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "floor_divide",
    "gelu",
    "greater",
    "greater_equal",
    "invert",
    "isfinite",
    "isinf",
    "isnan",
    "left_shift",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log2",
    "log10",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "negative",
    "not_equal",
    "positive",
    "power",
    "reciprocal",
    "relu",
    "remainder",
    "right_shift",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "sqrt",
    "square",
    "subtract",
    "tan",
    "tanh",
    "true_divide",
    "trunc",
    "where",
]


def _backend_of(*xs: Any) -> tuple[Any, Any]:
    """The backend and an impl of the first GPUArray among ``xs``."""
    for x in xs:
        if isinstance(x, GPUArray):
            return x._backend, x._impl
    from .backend import select

    backend = select.backend()
    return backend, None


def _impl(x: Any, backend: Any, ref: Any) -> Any:
    if isinstance(x, GPUArray):
        return x._impl
    if ref is None:  # no GPUArray among the operands: upload NumPy data on the current device
        if isinstance(x, (np.ndarray, list, tuple)) and np.ndim(x) > 0:
            from .creation import asarray

            return asarray(x)._impl
        return x
    o = _operand(x, backend, ref)
    if o is NotImplemented:
        raise TypeError(
            f"unsupported operand type {type(x).__name__} (expected a GPUArray, a Python or "
            "NumPy scalar, or a NumPy array)"
        )
    return o


def _out(out: GPUArray | None) -> Any:
    if out is None:
        return None
    return out_array(out)._impl


def _binary(op: str, a: ArrayLike, b: ArrayLike, out: GPUArray | None) -> GPUArray:
    o = _out(out)
    backend, ref = _backend_of(a, b, out)
    res = backend.binary(op, _impl(a, backend, ref), _impl(b, backend, ref), o)
    return out if out is not None else _wrap(res, backend)


def _unary(op: str, a: ArrayLike, out: GPUArray | None) -> GPUArray:
    o = _out(out)
    backend, ref = _backend_of(a, out)
    res = backend.unary(op, _impl(a, backend, ref), o)
    return out if out is not None else _wrap(res, backend)


def _make_binary(name: str, doc: str) -> Any:
    def fn(a: ArrayLike, b: ArrayLike, out: GPUArray | None = None) -> GPUArray:
        if out is None and a.__class__ is GPUArray and b.__class__ is GPUArray:
            backend = a._backend
            return _wrap(backend.binary(name, a._impl, b._impl), backend)
        return _binary(name, a, b, out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc + "\n\n``a`` and ``b`` broadcast together; ``out`` receives the result."
    return fn


def _make_unary(name: str, doc: str) -> Any:
    def fn(a: ArrayLike, out: GPUArray | None = None) -> GPUArray:
        if out is None and a.__class__ is GPUArray:
            backend = a._backend
            return _wrap(backend.unary(name, a._impl), backend)
        return _unary(name, a, out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


# --- binary ----------------------------------------------------------------------------
add = _make_binary("add", "``a + b`` elementwise (logical or for bool).")
subtract = _make_binary("subtract", "``a - b`` elementwise (bool arrays: TypeError, as NumPy).")
multiply = _make_binary("multiply", "``a * b`` elementwise (logical and for bool).")
divide = _make_binary("divide", "True division ``a / b``; integers give float64.")
true_divide = divide
floor_divide = _make_binary(
    "floor_divide", "``a // b`` rounded toward minus infinity; integer division by zero gives 0."
)
mod = _make_binary(
    "mod", "``a % b`` with the sign of ``b`` (Python / NumPy); integer ``x % 0`` gives 0."
)
remainder = mod
power = _make_binary(
    "power",
    "``a ** b``. Integers to negative integer powers give the exact result where it is an "
    "integer (1 or -1 bases) and 0 otherwise (NumPy raises instead).",
)
maximum = _make_binary("maximum", "Elementwise maximum; NaN propagates.")
minimum = _make_binary("minimum", "Elementwise minimum; NaN propagates.")
equal = _make_binary("equal", "``a == b`` as a bool array.")
not_equal = _make_binary("not_equal", "``a != b`` as a bool array.")
less = _make_binary("less", "``a < b`` as a bool array.")
less_equal = _make_binary("less_equal", "``a <= b`` as a bool array.")
greater = _make_binary("greater", "``a > b`` as a bool array.")
greater_equal = _make_binary("greater_equal", "``a >= b`` as a bool array.")
logical_and = _make_binary("logical_and", "Truth of ``a and b`` (nonzero is true); bool result.")
logical_or = _make_binary("logical_or", "Truth of ``a or b`` (nonzero is true); bool result.")
logical_xor = _make_binary("logical_xor", "Truth of ``a xor b`` (nonzero is true); bool result.")
bitwise_and = _make_binary("bitwise_and", "``a & b`` for integers and bools.")
bitwise_or = _make_binary("bitwise_or", "``a | b`` for integers and bools.")
bitwise_xor = _make_binary("bitwise_xor", "``a ^ b`` for integers and bools.")
left_shift = _make_binary(
    "left_shift", "``a << b`` for integers; shifts past the width (or negative) give 0."
)
right_shift = _make_binary(
    "right_shift",
    "``a >> b`` for integers (arithmetic); shifts past the width give 0, or -1 for negatives.",
)

# --- unary -----------------------------------------------------------------------------
negative = _make_unary("negative", "``-a`` (integers wrap; bool: TypeError, as NumPy).")
positive = _make_unary("positive", "``+a``: a copy (bool: TypeError, as NumPy).")
abs = _make_unary("abs", "Absolute value (``abs(a)``).")
absolute = abs
exp = _make_unary("exp", "e**a. Integers promote to float as NumPy's do (int32 -> float64).")
exp2 = _make_unary("exp2", "2**a.")
log = _make_unary("log", "Natural logarithm.")
log2 = _make_unary("log2", "Base-2 logarithm.")
log10 = _make_unary("log10", "Base-10 logarithm.")
log1p = _make_unary("log1p", "log(1 + a), accurate near 0.")
expm1 = _make_unary("expm1", "exp(a) - 1, accurate near 0.")
sqrt = _make_unary("sqrt", "Square root.")
rsqrt = _make_unary("rsqrt", "1 / sqrt(a).")
square = _make_unary("square", "a * a (bool gives int8, as NumPy).")
reciprocal = _make_unary(
    "reciprocal", "1 / a. Integers promote to float (NumPy keeps them integer)."
)
sin = _make_unary("sin", "Sine.")
cos = _make_unary("cos", "Cosine.")
tan = _make_unary("tan", "Tangent.")
tanh = _make_unary("tanh", "Hyperbolic tangent.")
sigmoid = _make_unary("sigmoid", "1 / (1 + exp(-a)).")
relu = _make_unary("relu", "max(a, 0); NaN propagates.")
silu = _make_unary("silu", "a * sigmoid(a) (swish).")
floor = _make_unary("floor", "Round toward minus infinity (integers unchanged).")
ceil = _make_unary("ceil", "Round toward plus infinity (integers unchanged).")
trunc = _make_unary("trunc", "Round toward zero (integers unchanged).")
sign = _make_unary("sign", "-1, 0 or 1 by the sign of a (NaN stays NaN).")
isnan = _make_unary("isnan", "True where a is NaN.")
isinf = _make_unary("isinf", "True where a is +-inf.")
isfinite = _make_unary("isfinite", "True where a is neither inf nor NaN.")
logical_not = _make_unary("logical_not", "True where a is zero (bool result).")
invert = _make_unary("invert", "``~a`` for integers and bools.")
bitwise_not = invert


def round(a: ArrayLike, decimals: int = 0, out: GPUArray | None = None) -> GPUArray:
    """Round half to even, as NumPy (``decimals`` digits: ``rint(a * 10**d) / 10**d``)."""
    decimals = index(decimals, "decimals", "round")
    _out(out)
    if decimals == 0:
        return _unary("round", a, out)
    scale = 10.0**decimals
    scaled = _binary("multiply", a, scale, None)
    rounded = _unary("round", scaled, None)
    return _binary("divide", rounded, scale, out)


def gelu(
    a: ArrayLike, approximate: Literal["none", "tanh"] = "none", out: GPUArray | None = None
) -> GPUArray:
    """GELU: ``a * Phi(a)`` with the exact erf form, or the tanh approximation (PyTorch's names)."""
    if approximate == "tanh":
        return _unary("gelu_tanh", a, out)
    if approximate == "none":
        return _unary("gelu_erf", a, out)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def where(cond: ArrayLike, x: ArrayLike, y: ArrayLike, out: GPUArray | None = None) -> GPUArray:
    """``x`` where ``cond`` is true, else ``y``; all three broadcast together.

    ``cond`` of another dtype than bool is tested for nonzero. The result dtype is the
    promotion of ``x`` and ``y`` (weak Python scalars as in the arithmetic ops).
    """
    o = _out(out)
    backend, ref = _backend_of(cond, x, y, out)
    c = _impl(cond, backend, ref)
    if not isinstance(cond, GPUArray):
        from .creation import asarray

        c = asarray(np.asarray(cond, dtype=bool))._impl
    res = backend.where(c, _impl(x, backend, ref), _impl(y, backend, ref), o)
    return out if out is not None else _wrap(res, backend)


def clip(
    a: ArrayLike, lo: ArrayLike | None, hi: ArrayLike | None, out: GPUArray | None = None
) -> GPUArray:
    """``minimum(maximum(a, lo), hi)``: bounds are scalars or arrays (broadcast); None skips one."""
    o = _out(out)
    backend, ref = _backend_of(a, lo, hi, out)
    lo_i = None if lo is None else _impl(lo, backend, ref)
    hi_i = None if hi is None else _impl(hi, backend, ref)
    res = backend.clip(_impl(a, backend, ref), lo_i, hi_i, o)
    return out if out is not None else _wrap(res, backend)

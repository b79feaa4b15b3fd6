"""Elementwise ops of the CPU backend: the same semantics as ``native/ops/elementwise.cpp``.

Dtype resolution mirrors the C++ side rule for rule (NumPy 2 promotion with weak
Python scalars, bfloat16 as documented in ``docs/elementwise.md``); values are
computed with NumPy, half types in float32 as the GPU kernels do, and every
result lands in a buffer from :func:`cpu._host_buffer` so memory accounting
matches the CUDA backend.

C++ owns the facts both backends share: the promotion table is
``_native.PROMOTION`` whenever ``_native`` imports (it does wherever the
runtime was built, CI included; :func:`pygpukit.dtypes.promotion_table`), and
ops are passed by name, so no op code is kept here.
``tests/runtime/test_cross_language_facts.py`` checks that this module
implements exactly ``_native.BINARY_OPS`` / ``UNARY_OPS`` and resolves every
dtype pair as the C++ table does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dt

#: (dtype name, dtype name) -> result dtype name: the promotion table (docs/elementwise.md).
PROMOTE: dict[tuple[str, str], str] = _dt.promotion_table()

_FLOATS = frozenset(("float64", "float32", "float16", "bfloat16"))
_INT_RANGE = {
    "int8": (-128, 127),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 255),
}
_KIND = {"bool": 0, "uint8": 1, "int8": 2, "int16": 2, "int32": 2, "int64": 2}


def _kind(name: str) -> int:
    return _KIND.get(name, 3)


def _float_of(name: str) -> str:
    if name in ("int8", "uint8", "bool"):
        return "float16"
    if name == "int16":
        return "float32"
    if name in ("int32", "int64"):
        return "float64"
    return name


class _Operand:
    """An ndarray impl, a weak Python scalar ('bool'/'int'/'float') or a strong NumPy scalar."""

    __slots__ = ("array", "dtype", "kind", "value")

    def __init__(self, x: Any, what: str) -> None:
        self.array: np.ndarray | None = None
        self.value: Any = None
        if isinstance(x, np.ndarray):  # impls (0-d included); NumPy scalars are np.generic
            self.kind, self.array, self.dtype = "array", x, x.dtype.name
        elif type(x) is bool:
            self.kind, self.dtype, self.value = "bool", "", x
        elif type(x) is int:
            self.kind, self.dtype, self.value = "int", "", x
        elif type(x) is float:
            self.kind, self.dtype, self.value = "float", "", x
        elif isinstance(x, np.generic):
            name = x.dtype.name
            if name not in _dt.SUPPORTED:
                raise TypeError(f"{what}: unsupported dtype {name!r}")
            self.kind, self.dtype, self.value = "strong", name, x.item()
        else:
            raise TypeError(
                f"{what}: unsupported operand type {type(x).__name__} "
                "(expected a GPUArray, a Python or NumPy scalar)"
            )
        if self.kind == "array" and self.dtype not in _dt.SUPPORTED:
            raise TypeError(f"{what}: unsupported dtype {self.dtype!r}")

    @property
    def weak(self) -> bool:
        return self.kind in ("bool", "int", "float")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape if self.array is not None else ()


def _default(kind: str) -> str:
    return {"float": "float64", "int": "int64", "bool": "bool"}[kind]


def _weak_result(kind: str, dtype: str) -> str:
    if kind == "int":
        return "int64" if dtype == "bool" else dtype
    if kind == "float":
        return dtype if dtype in _FLOATS else "float64"
    return dtype


def _common(a: _Operand, b: _Operand) -> str:
    if a.weak and b.weak:
        return PROMOTE[_default(a.kind), _default(b.kind)]
    if a.weak:
        return _weak_result(a.kind, b.dtype)
    if b.weak:
        return _weak_result(b.kind, a.dtype)
    return PROMOTE[a.dtype, b.dtype]


def _check_int_range(o: _Operand, dtype: str) -> None:
    if o.kind != "int" or dtype not in _INT_RANGE:
        return
    lo, hi = _INT_RANGE[dtype]
    if not lo <= o.value <= hi:
        raise ValueError(f"Python integer {o.value} out of bounds for {dtype}")


def _device_check(ops: tuple[_Operand, ...], what: str) -> None:
    if all(o.array is None for o in ops):
        raise TypeError(f"{what}: at least one operand must be a GPUArray")


def _broadcast(ops: tuple[_Operand, ...]) -> tuple[int, ...]:
    shapes = [o.shape for o in ops if o.array is not None]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        text = " ".join(str(s) for s in shapes)
        raise ValueError(f"operands could not be broadcast together with shapes {text}") from None


def _work(name: str) -> np.dtype[Any]:
    """The dtype NumPy computes in: float32 for the half types (as the kernels do)."""
    return (
        np.dtype(np.float32) if name in ("float16", "bfloat16") else np.dtype(_dt.SUPPORTED[name])
    )


def _value(o: _Operand, compute: str) -> Any:
    work = _work(compute)
    if o.array is not None:
        return o.array.astype(_dt.SUPPORTED[compute], copy=False).astype(work, copy=False)
    with np.errstate(all="ignore"):
        return np.array(o.value, dtype=_dt.SUPPORTED[compute]).astype(work)


def _check_out(out: Any, shape: tuple[int, ...], result: str, what: str) -> np.ndarray | None:
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError("out must be a GPUArray")
    try:
        joint = tuple(np.broadcast_shapes(out.shape, shape))
    except ValueError:
        joint = None
    if joint != out.shape:
        raise ValueError(
            f"non-broadcastable output operand with shape {out.shape} doesn't match the "
            f"broadcast shape {shape}"
        )
    if _kind(result) > _kind(out.dtype.name):
        raise TypeError(
            f"Cannot cast ufunc '{what}' output from {result} to {out.dtype.name} with casting "
            "rule 'same_kind'"
        )
    return out


def _finish(values: Any, shape: tuple[int, ...], result: str, out: np.ndarray | None) -> Any:
    from .cpu import _new

    target = out if out is not None else _new(shape, result)
    with np.errstate(all="ignore"):
        if out is not None and out.dtype.name != result:
            values = np.asarray(values).astype(_dt.SUPPORTED[result])
        np.copyto(target, values, casting="unsafe")
    return target


def _int_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    neg = b < 0
    safe = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    if not neg.any():
        return safe
    odd = (b & 1) != 0
    special = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
    return np.where(neg, special, safe)


def _shift(a: np.ndarray, b: np.ndarray, left: bool, bits: int) -> np.ndarray:
    big = (b < 0) | (b >= bits)
    s = np.where(big, 0, b).astype(a.dtype)
    if left:
        return np.where(big, 0, np.left_shift(a, s)).astype(a.dtype)
    fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(big, fill, np.right_shift(a, s)).astype(a.dtype)


_BINARY_FN = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "floor_divide": np.floor_divide,
    "mod": np.mod,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}
_CMP = frozenset(("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"))
_SIZE_BITS = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}


def _resolve_binary(name: str, c0: str) -> tuple[str, str]:
    if name == "subtract" and c0 == "bool":
        raise TypeError(
            "numpy boolean subtract, the `-` operator, is not supported, use the bitwise_xor, "
            "the `^` operator, or the logical_xor function instead."
        )
    if name == "divide" and c0 not in _FLOATS:
        return "float64", "float64"
    if name in ("floor_divide", "mod", "power") and c0 == "bool":
        return "int8", "int8"
    if name in _CMP:
        return c0, "bool"
    if name.startswith("logical_"):
        return "bool", "bool"
    if name.startswith(("bitwise_", "left_", "right_")):
        if c0 in _FLOATS:
            raise TypeError(
                f"ufunc '{name}' not supported for the input types ({c0}); it needs integers "
                "or booleans"
            )
        if c0 == "bool" and name.endswith("shift"):
            return "int8", "int8"
    return c0, c0


# Same-shape, same-dtype arrays of NumPy's native types skip the general resolution (the
# result dtype is the operands' or bool, exactly what the rules above give).
_FAST_TYPES = frozenset(
    np.dtype(t) for t in ("float64", "float32", "int8", "int16", "int32", "int64", "uint8")
)
_FAST_ARITH: dict[str, Any] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
_FAST_CMP: dict[str, Any] = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}
_new: Any = None


def _fast(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    global _new
    dt = a.dtype
    if dt != b.dtype or dt not in _FAST_TYPES or a.shape != b.shape:
        return None
    if _new is None:
        from .cpu import _new
    f = _FAST_ARITH.get(op)
    if f is not None:
        res = _new(a.shape, dt)
    else:
        f = _FAST_CMP.get(op)
        if f is None:
            return None
        res = _new(a.shape, np.bool_)
    f(a, b, out=res)
    return res


def binary(op: str, a: Any, b: Any, out: Any = None) -> np.ndarray:
    """``a <op> b`` (``op`` a name in ``BINARY_OPS``); see ``Backend.binary``."""
    if out is None and a.__class__ is np.ndarray and b.__class__ is np.ndarray:
        res = _fast(op, a, b)
        if res is not None:
            return res
    name = _op_name(op, BINARY_OPS, "binary")
    x, y = _Operand(a, name), _Operand(b, name)
    _device_check((x, y), name)
    c0 = _common(x, y)
    _check_int_range(x, c0)
    _check_int_range(y, c0)
    compute, result = _resolve_binary(name, c0)
    shape = _broadcast((x, y))
    target = _check_out(out, shape, result, name)
    run_shape = target.shape if target is not None else shape
    xv, yv = _value(x, compute), _value(y, compute)
    with np.errstate(all="ignore"):
        if name == "power":
            values = _int_power(xv, yv) if compute not in _FLOATS else np.power(xv, yv)
        elif name in ("left_shift", "right_shift"):
            values = _shift(xv, yv, name == "left_shift", _SIZE_BITS[compute])
        elif name in ("maximum", "minimum") and compute == "bool":
            values = (np.logical_or if name == "maximum" else np.logical_and)(xv, yv)
        else:
            values = _BINARY_FN[name](xv, yv)
    return _finish(np.broadcast_to(values, run_shape), run_shape, result, target)


#: The binary ops this backend implements: ``_BINARY_FN`` and the three computed apart.
BINARY_OPS: frozenset[str] = frozenset((*_BINARY_FN, "power", "left_shift", "right_shift"))


def _op_name(op: Any, ops: frozenset[str], what: str) -> str:
    if not isinstance(op, str):
        raise TypeError(f"{what}: op must be a str naming the op, not {type(op).__name__}")
    if op not in ops:
        raise ValueError(f"{what}: unknown op {op!r}")
    return op


_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    e = np.asarray(_erf(x.astype(np.float64) * 0.7071067811865476), dtype=np.float64)
    return (0.5 * x.astype(np.float64) * (1.0 + e)).astype(x.dtype)


_UNARY_FN: dict[str, Callable[[Any], Any]] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))),
    "gelu_erf": _gelu_erf,
    "negative": np.negative,
    "abs": np.abs,
    "square": np.square,
    "sign": np.sign,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "invert": np.invert,
}


#: The unary ops this backend implements: ``_UNARY_FN`` and the two resolved without it.
UNARY_OPS: frozenset[str] = frozenset((*_UNARY_FN, "positive", "logical_not"))


def unary(op: str, a: Any, out: Any = None) -> np.ndarray:
    """``<op>(a)`` (``op`` a name in ``UNARY_OPS``); see ``Backend.unary``."""
    name = _op_name(op, UNARY_OPS, "unary")
    if name == "logical_not":
        return binary("equal", a, False, out)
    x = _Operand(a, name)
    if x.array is None:
        raise TypeError(f"{name}: expected a GPUArray")
    t = x.dtype
    how, compute, result, const = "kernel", t, t, False
    if name in ("negative", "sign"):
        if t == "bool":
            raise TypeError(f"ufunc '{name}' not supported for bool (use ~ or logical_not)")
    elif name == "positive":
        if t == "bool":
            raise TypeError("ufunc 'positive' not supported for bool")
        how = "identity"
    elif name == "abs":
        if t in ("bool", "uint8"):
            how = "identity"
    elif name == "relu":
        if t == "bool":
            how = "identity"
    elif name == "square":
        if t == "bool":
            compute = result = "int8"
    elif name == "round" and t == "bool":
        compute = result = "float16"  # NumPy rounds bools in float16
    elif name in ("floor", "ceil", "round", "trunc"):
        if t not in _FLOATS:
            how = "identity"
    elif name in ("isnan", "isinf", "isfinite"):
        result = "bool"
        if t not in _FLOATS:
            how, const = "constant", name == "isfinite"
    elif name == "invert":
        if t in _FLOATS:
            raise TypeError(f"ufunc 'invert' not supported for {t} (integers and booleans only)")
    else:
        compute = result = _float_of(t)
    target = _check_out(out, x.shape, result, name)
    run_shape = target.shape if target is not None else x.shape
    if how == "identity":
        values: Any = x.array
    elif how == "constant":
        values = np.full(x.shape, const)
    else:
        with np.errstate(all="ignore"):
            values = _UNARY_FN[name](_value(x, compute))
    return _finish(np.broadcast_to(values, run_shape), run_shape, result, target)


def where(cond: Any, x: Any, y: Any, out: Any) -> np.ndarray:
    """``x`` where ``cond`` else ``y``, broadcast together; see ``Backend.where``."""
    c, xo, yo = _Operand(cond, "where"), _Operand(x, "where"), _Operand(y, "where")
    if c.array is None:
        raise TypeError("where: the condition must be a GPUArray")
    t = _common(xo, yo)
    _check_int_range(xo, t)
    _check_int_range(yo, t)
    shape = _broadcast((c, xo, yo))
    target = _check_out(out, shape, t, "where")
    run_shape = target.shape if target is not None else shape
    dt = _dt.SUPPORTED[t]
    xv = xo.array.astype(dt) if xo.array is not None else np.array(xo.value).astype(dt)
    yv = yo.array.astype(dt) if yo.array is not None else np.array(yo.value).astype(dt)
    values = np.where(c.array.astype(bool), xv, yv)
    return _finish(np.broadcast_to(values, run_shape), run_shape, t, target)


def clip(a: Any, lo: Any, hi: Any, out: Any) -> np.ndarray:
    """``minimum(maximum(a, lo), hi)`` (either bound may be None); see ``Backend.clip``."""
    if lo is None and hi is None:
        raise ValueError("clip: one of lo and hi must be given")
    if lo is not None:
        a = binary("maximum", a, lo, out if hi is None else None)
    if hi is not None:
        a = binary("minimum", a, hi, out)
    return a


__all__ = [
    "BINARY_OPS",
    "PROMOTE",
    "UNARY_OPS",
    "binary",
    "clip",
    "unary",
    "where",
]

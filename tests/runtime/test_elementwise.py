"""Elementwise ops (binary, unary, where, clip, operators) against NumPy, on every backend.

Floating results are checked against float64 NumPy within docs/internals.md's relative error
limits; integer, bool and comparison results exactly; result dtypes against NumPy 2's rules
(bfloat16 per docs/elementwise.md). Sizes cover the vector-width tails (1, 7, 1023, 4097),
unaligned views (``a[1:]``), broadcasting, size 0 and non-contiguous views.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pygpukit as gp

FLOATS = ["float32", "float16", "bfloat16", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
ALL = FLOATS + INTS + ["bool"]
TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
SIZES = [1, 7, 1023, 4097]
BF16 = np.dtype(ml_dtypes.bfloat16)


def _np_dtype(name: str) -> np.dtype[Any]:
    return BF16 if name == "bfloat16" else np.dtype(name)


def _data(rng: np.random.Generator, shape: Any, dtype: str, lo: float = -3, hi: float = 3) -> Any:
    dt = _np_dtype(dtype)
    if dtype == "bool":
        out = rng.integers(0, 2, size=shape).astype(bool)
    elif dt.kind in "iu":
        lo_i = max(int(np.iinfo(dt).min), -100)
        hi_i = min(int(np.iinfo(dt).max), 100)
        out = rng.integers(lo_i, hi_i, size=shape, endpoint=True).astype(dt)
    else:
        out = rng.uniform(lo, hi, size=shape).astype(dt)
    if out.size and not out.any():
        out.flat[0] = 1
    return out


def _check_float(out: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    out64 = out.astype(np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    assert out64.shape == ref64.shape
    assert np.array_equal(np.isnan(out64), np.isnan(ref64))
    finite = np.isfinite(ref64)
    assert np.array_equal(out64[~finite & ~np.isnan(ref64)], ref64[~finite & ~np.isnan(ref64)])
    num = float(np.linalg.norm(out64[finite] - ref64[finite]))
    den = max(float(np.linalg.norm(ref64[finite])), 1e-30)
    assert num <= TOL[dtype] * den, f"relative error {num / den:.3g}"


def _check(out: gp.GPUArray, ref: np.ndarray, dtype: str | None = None) -> None:
    """``out`` against ``ref`` (its dtype is the expected one unless ``dtype`` says so)."""
    expected = _np_dtype(dtype) if dtype else np.asarray(ref).dtype
    assert out.dtype == expected, (out.dtype, expected)
    host = out.to_numpy()
    if expected.name in TOL:
        _check_float(host, ref, expected.name)
    else:
        assert np.array_equal(host, np.asarray(ref).astype(expected))


# --- binary: values ------------------------------------------------------------------------
FLOAT_BINARY: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", list(FLOAT_BINARY))
def test_binary_float(op: str, dtype: str, size: int, rng: np.random.Generator) -> None:
    lo = 0.5 if op in ("power", "divide") else -3
    a = _data(rng, (size,), dtype, lo, 3)
    b = _data(rng, (size,), dtype, lo if op != "power" else -2, 2 if op == "power" else 3)
    ref = FLOAT_BINARY[op](a.astype(np.float64), b.astype(np.float64))
    _check(getattr(gp, op)(gp.from_numpy(a), gp.from_numpy(b)), ref, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["floor_divide", "mod"])
def test_floor_divide_mod_float(op: str, dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (1023,), dtype, -20, 20)
    b = _data(rng, (1023,), dtype, -4, 4)
    b[np.abs(b.astype(np.float64)) < 0.25] = 1.5
    work = np.float64 if dtype == "float64" else np.float32
    ref = getattr(np, op)(a.astype(work), b.astype(work)).astype(_np_dtype(dtype))
    out = getattr(gp, op)(gp.from_numpy(a), gp.from_numpy(b))
    assert out.dtype == _np_dtype(dtype)
    np.testing.assert_allclose(
        out.to_numpy().astype(np.float64), ref.astype(np.float64), rtol=TOL[dtype], atol=TOL[dtype]
    )
    # sign follows the divisor; x % 0 is nan, x // 0 is +-inf
    z = gp.from_numpy(np.array([5.0, -5.0, 5.0, -5.0, 1.0], dtype=_np_dtype(dtype)))
    w = gp.from_numpy(np.array([3.0, 3.0, -3.0, -3.0, 0.0], dtype=_np_dtype(dtype)))
    with np.errstate(all="ignore"):
        ref = getattr(np, op)(z.to_numpy().astype(np.float64), w.to_numpy().astype(np.float64))
        np.testing.assert_array_equal(getattr(gp, op)(z, w).to_numpy().astype(np.float64), ref)


INT_BINARY = [
    "add",
    "subtract",
    "multiply",
    "floor_divide",
    "mod",
    "power",
    "maximum",
    "minimum",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
]


@pytest.mark.parametrize("size", [7, 4097])
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", INT_BINARY)
def test_binary_int_exact(op: str, dtype: str, size: int, rng: np.random.Generator) -> None:
    a = _data(rng, (size,), dtype)
    b = _data(rng, (size,), dtype)
    if op == "power":
        a = (a % 7).astype(a.dtype)
        b = (np.abs(b) % 6).astype(b.dtype)
    if op in ("floor_divide", "mod"):
        b[::5] = 0  # division by zero gives 0, as NumPy
    with np.errstate(all="ignore"):
        ref = getattr(np, op)(a, b)
    _check(getattr(gp, op)(gp.from_numpy(a), gp.from_numpy(b)), ref)


@pytest.mark.parametrize("dtype", INTS)
def test_shifts(dtype: str, rng: np.random.Generator) -> None:
    bits = np.dtype(dtype).itemsize * 8
    a = _data(rng, (1023,), dtype)
    s = rng.integers(0, bits + 3, size=1023).astype(dtype)
    _check(gp.left_shift(gp.from_numpy(a), gp.from_numpy(s)), np.left_shift(a, s))
    _check(gp.right_shift(gp.from_numpy(a), gp.from_numpy(s)), np.right_shift(a, s))
    _check(gp.from_numpy(a) << 1, a << 1)
    _check(gp.from_numpy(a) >> 1, a >> 1)


def test_integer_edge_cases() -> None:
    lo = np.iinfo(np.int32).min
    a = gp.from_numpy(np.array([lo, -7, 7, -7, 7], np.int32))
    b = gp.from_numpy(np.array([-1, 2, -2, -2, 0], np.int32))
    with np.errstate(all="ignore"):
        _check(a // b, np.floor_divide(a.to_numpy(), b.to_numpy()))
        _check(a % b, np.mod(a.to_numpy(), b.to_numpy()))
    u = gp.from_numpy(np.array([0, 1, 200, 255], np.uint8))
    _check(-u, -u.to_numpy())
    _check(u + u, u.to_numpy() + u.to_numpy())
    base = gp.from_numpy(np.array([1, -1, -1, 2, 3], np.int64))
    exp = gp.from_numpy(np.array([-3, -3, -2, -1, 3], np.int64))
    np.testing.assert_array_equal((base**exp).to_numpy(), [1, -1, 1, 0, 27])


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(
    "op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
)
def test_comparisons(op: str, dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (1023,), dtype)
    b = _data(rng, (1023,), dtype)
    b[::3] = a[::3]  # ties
    ref = getattr(np, op)(a, b)
    _check(getattr(gp, op)(gp.from_numpy(a), gp.from_numpy(b)), ref)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(op: str, dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (257,), dtype)
    b = _data(rng, (257,), dtype)
    a[::4] = 0
    b[::3] = 0
    _check(getattr(gp, op)(gp.from_numpy(a), gp.from_numpy(b)), getattr(np, op)(a, b))


def test_bool_arithmetic(rng: np.random.Generator) -> None:
    a, b = _data(rng, (100,), "bool"), _data(rng, (100,), "bool")
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    _check(ga + gb, a + b)
    _check(ga * gb, a * b)
    _check(gp.maximum(ga, gb), np.maximum(a, b))
    _check(gp.minimum(ga, gb), np.minimum(a, b))
    _check(ga & gb, a & b)
    _check(ga | gb, a | b)
    _check(ga ^ gb, a ^ b)
    _check(~ga, ~a)
    with np.errstate(all="ignore"):
        _check(ga // gb, np.floor_divide(a, b))
    _check(ga / gb, a.astype(np.float64) / b) if b.all() else None
    with pytest.raises(TypeError):
        ga - gb
    with pytest.raises(TypeError):
        _ = -ga


# --- unary ---------------------------------------------------------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf)(x)


UNARY_REF: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float, float]] = {
    "negative": (np.negative, -3, 3),
    "abs": (np.abs, -3, 3),
    "exp": (np.exp, -3, 3),
    "exp2": (np.exp2, -3, 3),
    "log": (np.log, 0.1, 5),
    "log2": (np.log2, 0.1, 5),
    "log10": (np.log10, 0.1, 5),
    "log1p": (np.log1p, -0.5, 3),
    "expm1": (np.expm1, -2, 2),
    "sqrt": (np.sqrt, 0.1, 5),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 5),
    "square": (np.square, -3, 3),
    "reciprocal": (lambda x: 1 / x, 0.5, 3),
    "sin": (np.sin, -3, 3),
    "cos": (np.cos, -3, 3),
    "tan": (np.tan, -1, 1),
    "tanh": (np.tanh, -3, 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -5, 5),
    "relu": (lambda x: np.maximum(x, 0), -3, 3),
    "silu": (lambda x: x / (1 + np.exp(-x)), -5, 5),
    "floor": (np.floor, -5, 5),
    "ceil": (np.ceil, -5, 5),
    "round": (np.rint, -5, 5),
    "trunc": (np.trunc, -5, 5),
    "sign": (np.sign, -3, 3),
}


@pytest.mark.parametrize("size", [1, 1023, 4097])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", list(UNARY_REF))
def test_unary_float(op: str, dtype: str, size: int, rng: np.random.Generator) -> None:
    fn, lo, hi = UNARY_REF[op]
    a = _data(rng, (size,), dtype, lo, hi)
    ref = fn(a.astype(np.float64))
    _check(getattr(gp, op)(gp.from_numpy(a)), ref, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu(dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (1031,), dtype, -4, 4)
    x = a.astype(np.float64)
    exact = 0.5 * x * (1 + _erf(x / np.sqrt(2)))
    approx = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    _check(gp.gelu(gp.from_numpy(a)), exact, dtype)
    _check(gp.gelu(gp.from_numpy(a), approximate="tanh"), approx, dtype)
    with pytest.raises(ValueError):
        gp.gelu(gp.from_numpy(a), approximate="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [*INTS, "bool"])
def test_unary_integer_promotion(dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (129,), dtype)
    if dtype != "bool":
        a = (np.abs(a) % 6 + 1).astype(a.dtype)  # small: exp stays finite in float16
    for op in ("exp", "sqrt", "log", "sin"):
        ref = getattr(np, op)(a)  # NumPy's own dtype choice (int8 -> float16, int32 -> float64)
        out = getattr(gp, op)(gp.from_numpy(a))
        assert out.dtype == ref.dtype
        _check_float(out.to_numpy(), getattr(np, op)(a.astype(np.float64)), ref.dtype.name)
    for op in ("floor", "ceil", "trunc", "abs", "square"):
        _check(getattr(gp, op)(gp.from_numpy(a)), getattr(np, op)(a))
    _check(gp.round(gp.from_numpy(a)), np.round(a))
    _check(~gp.from_numpy(a), ~a)
    for op in ("isnan", "isinf", "isfinite"):
        _check(getattr(gp, op)(gp.from_numpy(a)), getattr(np, op)(a))
    if dtype != "bool":
        _check(-gp.from_numpy(a), -a)
        _check(gp.sign(gp.from_numpy(a)), np.sign(a))


@pytest.mark.parametrize("dtype", FLOATS)
def test_special_values(dtype: str) -> None:
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 0.5, 2.5], np.float64)
    a = gp.from_numpy(v.astype(_np_dtype(dtype)))
    _check(gp.isnan(a), np.isnan(v))
    _check(gp.isinf(a), np.isinf(v))
    _check(gp.isfinite(a), np.isfinite(v))
    _check(gp.logical_not(a), np.logical_not(v))
    r = gp.round(a).to_numpy().astype(np.float64)
    np.testing.assert_array_equal(r[5:], [2.0, -2.0, 0.0, 2.0])  # half to even
    mx = gp.maximum(a, 0.0).to_numpy().astype(np.float64)
    assert np.isnan(mx[0]) and mx[1] == np.inf and mx[2] == 0
    assert np.isnan(gp.relu(a).to_numpy().astype(np.float64)[0])


def test_round_decimals() -> None:
    a = gp.from_numpy(np.array([1.234, 2.345, -0.051], np.float64))
    np.testing.assert_allclose(gp.round(a, 2).to_numpy(), np.round(a.to_numpy(), 2))


# --- layouts -------------------------------------------------------------------------------
BROADCASTS = [
    ((4, 5), (5,)),
    ((4, 1), (1, 6)),
    ((3, 1, 5), (4, 1)),
    ((1,), (7, 3)),
    ((2, 3, 4, 5), (3, 1, 5)),
    ((0, 3), (3,)),
    ((), (5,)),
    ((1, 1, 1), (2, 1, 3)),
    ((2, 1, 2, 1, 2, 1, 2, 1, 2), (2, 1, 2, 1, 2, 1, 2, 1, 2)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize(("sa", "sb"), BROADCASTS)
def test_broadcasting(sa: Any, sb: Any, dtype: str, rng: np.random.Generator) -> None:
    a, b = _data(rng, sa, dtype), _data(rng, sb, dtype)
    ga, gb = gp.from_numpy(np.asarray(a)), gp.from_numpy(np.asarray(b))
    _check(gp.maximum(ga, gb), np.maximum(a, b))
    _check(gb == ga, b == a)
    if dtype != "bool":
        _check(ga - gb, (a - b) if dtype != "float16" else a.astype(np.float64) - b, dtype)


def test_broadcast_errors_leave_runtime_working(rng: np.random.Generator) -> None:
    a = gp.from_numpy(_data(rng, (4, 5), "float32"))
    b = gp.from_numpy(_data(rng, (4,), "float32"))
    with pytest.raises(ValueError, match="broadcast"):
        a + b
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError):
        a & a
    with pytest.raises(TypeError):
        gp.add(1, 2)
    with pytest.raises(TypeError):
        gp.add(a, 1 + 2j)
    c = a + a
    _check(c, a.to_numpy().astype(np.float64) * 2, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "float64"])
def test_non_contiguous_and_unaligned(dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (33, 65), dtype)
    b = _data(rng, (65, 33), dtype)
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    want = "float64" if dtype in TOL else None
    _check(ga + gb.T, a.astype(np.float64) + b.T if want else a + b.T, dtype)
    _check(
        ga[::2, 1::3] * gb.T[::2, 1::3],
        (a[::2, 1::3].astype(np.float64) * b.T[::2, 1::3])
        if want
        else a[::2, 1::3] * b.T[::2, 1::3],
        dtype,
    )
    flat_a, flat_b = _data(rng, (4097,), dtype), _data(rng, (4097,), dtype)
    fa, fb = gp.from_numpy(flat_a), gp.from_numpy(flat_b)
    for i, j in ((1, 0), (0, 1), (3, 5), (1, 1)):
        n = 4097 - max(i, j)
        ref = (flat_a[i : i + n].astype(np.float64) if want else flat_a[i : i + n]) + flat_b[
            j : j + n
        ]
        _check(fa[i : i + n] + fb[j : j + n], ref, dtype)
    if dtype in TOL:
        _check(gp.exp(fa[1:]), np.exp(flat_a[1:].astype(np.float64)), dtype)
        _check(gp.exp(ga.T), np.exp(a.T.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", ALL)
def test_size_zero_and_one(dtype: str, rng: np.random.Generator) -> None:
    e = gp.from_numpy(np.zeros((0, 4), _np_dtype(dtype)))
    assert (e == e).shape == (0, 4)
    assert gp.maximum(e, e).dtype == _np_dtype(dtype)
    one = _data(rng, (1,), dtype)
    g = gp.from_numpy(one)
    _check(gp.maximum(g, g), one)
    s = gp.from_numpy(one.reshape(()))
    _check(s == s, one.reshape(()) == one.reshape(()))


# --- scalars and promotion -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("scalar", [True, 3, 2.5, np.float32(2), np.int8(3), np.float64(1.5)])
def test_scalar_promotion(dtype: str, scalar: Any, rng: np.random.Generator) -> None:
    a = _data(rng, (37,), dtype)
    if dtype == "bfloat16":
        pytest.skip("bfloat16 promotion is tested against the documented table")
    ref = a + scalar
    with np.errstate(all="ignore"):
        rref = scalar + a
    _check(gp.from_numpy(a) + scalar, ref)
    _check(scalar + gp.from_numpy(a), rref)
    if np.asarray(ref).dtype != np.bool_:
        _check(scalar - gp.from_numpy(a), np.subtract(scalar, a))
    _check(gp.from_numpy(a) < scalar, a < scalar)


def test_weak_scalars_keep_small_dtypes() -> None:
    h = gp.from_numpy(np.ones(4, np.float16))
    assert (h * 1.5).dtype == np.float16
    assert (h + 1).dtype == np.float16
    b16 = gp.from_numpy(np.ones(4, BF16))
    assert (b16 * 1.5).dtype == BF16
    assert (2 * b16).dtype == BF16
    i8 = gp.from_numpy(np.ones(4, np.int8))
    assert (i8 + 100).dtype == np.int8
    assert (i8 + 1.5).dtype == np.float64
    assert (gp.from_numpy(np.ones(3, bool)) + 1).dtype == np.int64
    with pytest.raises(ValueError, match="out of bounds"):
        gp.from_numpy(np.ones(4, np.uint8)) + 300
    assert (i8 / 2).dtype == np.float64


DOC_BF16 = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float32",
    "bfloat16": "bfloat16",
    "int8": "bfloat16",
    "int16": "float32",
    "int32": "float64",
    "int64": "float64",
    "uint8": "bfloat16",
    "bool": "bfloat16",
}


@pytest.mark.parametrize("x", ALL)
@pytest.mark.parametrize("y", ALL)
def test_promotion_table(x: str, y: str) -> None:
    a = gp.from_numpy(np.ones(3, _np_dtype(x)))
    b = gp.from_numpy(np.ones(3, _np_dtype(y)))
    if "bfloat16" in (x, y):
        other = y if x == "bfloat16" else x
        expected = _np_dtype(DOC_BF16[other])
    else:
        expected = np.result_type(_np_dtype(x), _np_dtype(y))
    assert gp.maximum(a, b).dtype == expected
    assert (a == b).dtype == np.bool_
    if expected != np.bool_:
        assert (a - b).dtype == expected


# --- in-place and out= ---------------------------------------------------------------------
def test_inplace_operators(rng: np.random.Generator) -> None:
    a = _data(rng, (5, 7), "float32")
    g = gp.from_numpy(a)
    ptr = g.data_ptr
    g += 1.5
    g *= gp.from_numpy(a)
    g -= gp.from_numpy(a[0])
    g /= 2
    assert g.data_ptr == ptr and g.dtype == np.float32
    _check(g, ((a.astype(np.float64) + 1.5) * a - a[0]) / 2, "float32")
    i = gp.from_numpy(np.arange(10, dtype=np.int32))
    i += np.int64(3)  # int64 -> int32 is same_kind
    i //= 2
    i <<= 1
    np.testing.assert_array_equal(i.to_numpy(), ((np.arange(10) + 3) // 2) << 1)
    with pytest.raises(TypeError, match="same_kind"):
        i += 1.5
    with pytest.raises(TypeError, match="same_kind"):
        i /= 2
    h = gp.from_numpy(np.ones(4, np.float16))
    h += gp.from_numpy(np.ones(4, np.float64))  # float64 -> float16 is same_kind
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h.to_numpy(), 2)
    with pytest.raises(ValueError):
        small = gp.from_numpy(np.ones(3, np.float32))
        small += gp.from_numpy(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(i.to_numpy(), ((np.arange(10) + 3) // 2) << 1)


def test_out_argument(rng: np.random.Generator) -> None:
    a, b = _data(rng, (4, 6), "float32"), _data(rng, (6,), "float32")
    out = gp.empty((4, 6), dtype="float64")
    res = gp.add(gp.from_numpy(a), gp.from_numpy(b), out=out)
    assert res is out
    _check(out, (a + b).astype(np.float64), "float64")  # computed in float32, stored wider
    big = gp.zeros((3, 4, 6), dtype="float32")
    gp.multiply(gp.from_numpy(a), 2.0, out=big)
    _check(big, np.broadcast_to(a.astype(np.float64) * 2, (3, 4, 6)), "float32")
    strided = gp.zeros((8, 12), dtype="float32")
    gp.exp(gp.from_numpy(a), out=strided[::2, ::2])
    host = strided.to_numpy()
    _check_float(host[::2, ::2], np.exp(a.astype(np.float64)), "float32")
    assert not host[1::2].any()
    with pytest.raises(TypeError, match="same_kind"):
        gp.add(gp.from_numpy(a), gp.from_numpy(b), out=gp.empty((4, 6), dtype="int32"))
    with pytest.raises(ValueError):
        gp.add(gp.from_numpy(a), gp.from_numpy(b), out=gp.empty((4, 5), dtype="float32"))
    with pytest.raises(TypeError):
        gp.add(gp.from_numpy(a), 1, out=np.empty((4, 6)))
    cmp = gp.empty((4, 6), dtype="int8")
    gp.less(gp.from_numpy(a), 0.0, out=cmp)
    np.testing.assert_array_equal(cmp.to_numpy(), (a < 0).astype(np.int8))


def test_numpy_operands(rng: np.random.Generator) -> None:
    a = _data(rng, (3, 4), "float32")
    g = gp.from_numpy(a)
    _check(a + g, a.astype(np.float64) * 2, "float32")
    _check(g * a[0], a.astype(np.float64) * a[0], "float32")
    _check(gp.add(a, g), a.astype(np.float64) * 2, "float32")


# --- where and clip ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL)
def test_where(dtype: str, rng: np.random.Generator) -> None:
    c = _data(rng, (5, 1, 7), "bool")
    x, y = _data(rng, (4, 7), dtype), _data(rng, (1, 7), dtype)
    _check(gp.where(gp.from_numpy(c), gp.from_numpy(x), gp.from_numpy(y)), np.where(c, x, y))
    _check(gp.where(gp.from_numpy(c), gp.from_numpy(x), 0), np.where(c, x, 0))
    ci = _data(rng, (4, 7), "int32")
    ci[::2] = 0
    _check(gp.where(gp.from_numpy(ci), 1.5, -1.0), np.where(ci, 1.5, -1.0))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "float64"])
def test_clip(dtype: str, rng: np.random.Generator) -> None:
    a = _data(rng, (1023,), dtype)
    g = gp.from_numpy(a)
    _check(gp.clip(g, 1, 2), np.clip(a, 1, 2))
    _check(gp.clip(g, None, 2), np.clip(a, None, 2))
    lo = _data(rng, (1023,), dtype)
    _check(gp.clip(g, gp.from_numpy(lo), None), np.maximum(a, lo))
    with pytest.raises(ValueError):
        gp.clip(g, None, None)


# --- operators map to the functions -------------------------------------------------------
def test_operators_match_functions(rng: np.random.Generator) -> None:
    a, b = _data(rng, (63,), "int16"), _data(rng, (63,), "int16")
    b[b == 0] = 3
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    with np.errstate(all="ignore"):
        pairs = [
            (ga + gb, a + b),
            (ga - gb, a - b),
            (ga * gb, a * b),
            (ga / gb, a / b),
            (ga // gb, a // b),
            (ga % gb, a % b),
            (ga & gb, a & b),
            (ga | gb, a | b),
            (ga ^ gb, a ^ b),
            (ga == gb, a == b),
            (ga != gb, a != b),
            (ga < gb, a < b),
            (ga <= gb, a <= b),
            (ga > gb, a > b),
            (ga >= gb, a >= b),
            (-ga, -a),
            (+ga, +a),
            (abs(ga), abs(a)),
            (~ga, ~a),
            (2 ** (gb % 4), 2 ** (b % 4)),
            (7 // gb, 7 // b),
            (7 % gb, 7 % b),
            (1 << (gb % 8), 1 << (b % 8)),
        ]
    for out, ref in pairs:
        _check(out, ref) if ref.dtype.kind != "f" else _check(out, ref, ref.dtype.name)


# --- property tests ------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, max_side=6),
    dtypes=st.tuples(st.sampled_from(ALL), st.sampled_from(ALL)),
    op=st.sampled_from(["add", "multiply", "maximum", "less", "not_equal"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_broadcast(shapes: Any, dtypes: Any, op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    (sa, sb), _ = shapes
    x, y = _data(rng, sa, dtypes[0]), _data(rng, sb, dtypes[1])
    out = getattr(gp, op)(gp.from_numpy(np.asarray(x)), gp.from_numpy(np.asarray(y)))
    if "bfloat16" in dtypes:
        x64, y64 = np.asarray(x).astype(np.float64), np.asarray(y).astype(np.float64)
        ref = getattr(np, op)(x64, y64)
        assert out.shape == ref.shape
        if ref.dtype == np.bool_:
            assert np.array_equal(out.to_numpy(), ref)
        return
    with np.errstate(all="ignore"):
        ref = getattr(np, op)(np.asarray(x), np.asarray(y))
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype.kind == "f":
        x64, y64 = np.asarray(x).astype(np.float64), np.asarray(y).astype(np.float64)
        _check_float(out.to_numpy(), getattr(np, op)(x64, y64), ref.dtype.name)
    else:
        assert np.array_equal(out.to_numpy(), ref)


# --- sizes past one grid of threads (the grid-stride loops run several rounds on a GPU) ------
def test_grid_stride_rounds(rng: np.random.Generator) -> None:
    a = _data(rng, (2**23 + 5,), "float32")
    b = _data(rng, (2**23 + 5,), "float32")
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    _check(ga + gb, a.astype(np.float64) + b, "float32")
    _check(ga[3:] * 2.0, a[3:].astype(np.float64) * 2, "float32")
    i8 = _data(rng, (2**25 + 3,), "int8")
    _check(gp.from_numpy(i8) + np.int8(1), i8 + np.int8(1))
    m = _data(rng, (3001, 3003), "float32")
    _check(gp.exp(gp.from_numpy(m).T), np.exp(m.T.astype(np.float64)), "float32")


# --- the contiguous path's geometry: a 16-byte vector per thread, 256 threads a block, a scalar
# tail; sizes one element around whole blocks and multiples of them, plus offset views (aligned
# and not) ----------------------------------------------------------------------------------
def _chunk_sizes(dtype: str) -> list[int]:
    vec = 16 // _np_dtype(dtype).itemsize
    bases = [vec * 256, vec * 256 * 3, vec * 256 * 4, vec * 256 * 4 * 3, vec * 256 * 4 * 2 + vec]
    return sorted({b + d for b in bases for d in (-1, 0, 1)})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int8", "bool"])
def test_vector_chunk_boundaries(dtype: str, rng: np.random.Generator) -> None:
    for n in _chunk_sizes(dtype):
        a, b = _data(rng, (n + 8,), dtype), _data(rng, (n + 8,), dtype)
        for start in (0, 1, 16 // _np_dtype(dtype).itemsize):  # aligned, odd, one vector in
            x, y = a[start : start + n], b[start : start + n]
            gx, gy = gp.from_numpy(a)[start : start + n], gp.from_numpy(b)[start : start + n]
            if dtype == "bool":
                _check(gx + gy, x | y)
                _check(~gx, ~x)
                _check(gx < gy, x < y)
                continue
            ref_dtype = None if _np_dtype(dtype).kind in "iu" else dtype
            x64 = x.astype(np.float64) if ref_dtype else x
            _check(gx + gy, x64 + y if ref_dtype else x + y, ref_dtype)
            _check(gx * 3, x64 * 3 if ref_dtype else x * np.asarray(3, x.dtype), ref_dtype)
            _check(-gx, -x64 if ref_dtype else -x, ref_dtype)
            _check(gx < gy, x < y)


@settings(max_examples=30, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=7),
    dtype=st.sampled_from(FLOATS),
    op=st.sampled_from(["exp", "tanh", "sigmoid", "abs", "square", "silu"]),
    transpose=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_unary_views(shape: Any, dtype: str, op: str, transpose: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    host = _data(rng, shape, dtype, -2, 2)
    g = gp.from_numpy(host)
    if transpose:
        host, g = host.T, g.T
    fn = UNARY_REF[op][0] if op in UNARY_REF else (lambda x: x / (1 + np.exp(-x)))
    _check(getattr(gp, op)(g), fn(host.astype(np.float64)), dtype)


@settings(max_examples=30, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, max_side=5),
    dtype=st.sampled_from(ALL),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_where(shapes: Any, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    (sc, sx, sy), _ = shapes
    c = np.asarray(_data(rng, sc, "bool"))
    x, y = np.asarray(_data(rng, sx, dtype)), np.asarray(_data(rng, sy, dtype))
    out = gp.where(gp.from_numpy(c), gp.from_numpy(x), gp.from_numpy(y))
    ref = np.where(c, x, y)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert np.array_equal(out.to_numpy(), ref)


def test_out_overlapping_inputs(rng: np.random.Generator) -> None:
    """Outputs that share memory with an input in another layout give NumPy's results."""
    a = _data(rng, (5, 7), "float32")
    g = gp.from_numpy(a)
    g += g[0]
    np.testing.assert_allclose(g.to_numpy(), a + a[0], rtol=1e-6)
    v = _data(rng, (1025,), "float32")
    gv = gp.from_numpy(v)
    gv[1:] += gv[:-1]
    ref = v.copy()
    ref[1:] += v[:-1]
    np.testing.assert_allclose(gv.to_numpy(), ref, rtol=1e-6)
    t = _data(rng, (6, 6), "float32")
    gt = gp.from_numpy(t)
    gp.exp(gt.T, out=gt)
    np.testing.assert_allclose(gt.to_numpy(), np.exp(t.T), rtol=1e-5)

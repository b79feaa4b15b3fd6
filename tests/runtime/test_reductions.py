"""Reductions, softmax/log_softmax and cumsum against NumPy in float64 (every backend)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pygpukit as gp

FLOATS = ["float32", "float16", "bfloat16", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
ALL = FLOATS + INTS + ["bool"]
TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
SHAPES_AXES = [
    ((1000,), None),
    ((37,), 0),
    ((1,), None),
    ((7, 129), 1),
    ((7, 129), 0),
    ((7, 129), (0, 1)),
    ((3, 5, 33), 1),
    ((3, 5, 33), (0, 2)),
    ((3, 5, 33), -1),
    ((2, 3, 4, 5), (1, 3)),
    ((2, 3, 4, 5), (0, 2, 3)),
    ((4, 1, 6), 1),
    ((301, 37), 1),
]


def _ref64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype != np.bool_ else x.astype(np.int64)


def _close(
    out: np.ndarray, ref: np.ndarray, dtype: str, scale: float = 1.0,
    magnitude: np.ndarray | None = None,
) -> None:  # fmt: skip
    """``out`` within ``dtype``'s relative tolerance of ``ref`` (exact for integer dtypes).

    The error is relative to ``ref``'s norm, or to ``magnitude``'s where given: a float sum's
    rounding error grows with the sum of its terms' magnitudes, not with the result, which
    cancellation can make as small as it likes (see :func:`_sum_ref`).
    """
    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    assert out64.shape == ref64.shape
    if dtype in TOL:
        tol = TOL[dtype] * scale
        size = ref64 if magnitude is None else np.asarray(magnitude, dtype=np.float64)
        denom = np.linalg.norm(size.ravel()) or 1.0
        err = np.linalg.norm((out64 - ref64).ravel()) / denom
        assert err <= tol, f"relative error {err} > {tol}"
    else:
        np.testing.assert_array_equal(out64, ref64)


def _sum_ref(op: str, x: np.ndarray, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's ``op`` (sum, mean or cumsum) of ``x`` in float64, and the same of ``|x|``."""
    x64 = _ref64(x)
    fn = getattr(np, op)
    return fn(x64, **kwargs), fn(np.abs(x64), **kwargs)


def _np_op(op: str, x: np.ndarray, axis: Any, ddof: int = 0) -> np.ndarray:
    x64 = _ref64(x)
    if op in ("var", "std"):
        return getattr(np, op)(x64, axis=axis, ddof=ddof)
    return getattr(np, op)(x64, axis=axis)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(("shape", "axis"), SHAPES_AXES)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "var", "std"])
def test_reduction_matches_numpy(
    rand: Callable[..., np.ndarray], op: str, dtype: str, shape: tuple[int, ...], axis: Any
) -> None:
    host = rand(shape, dtype)
    res = getattr(gp, op)(gp.from_numpy(host), axis=axis)
    ref = _np_op(op, host, axis)
    expected = gp.reductions.result_dtype(op, gp.from_numpy(host).dtype)
    assert res.dtype == expected
    out = res.to_numpy()
    if op in ("max", "min"):
        np.testing.assert_array_equal(out.astype(np.float64), ref.astype(np.float64))
    elif op == "sum" and dtype not in TOL:
        np.testing.assert_array_equal(out, ref.astype(np.int64))
    else:
        # mean/var of ints compare in float64 precision; halves are fp32-accumulated then rounded
        magnitude = _sum_ref(op, host, axis=axis)[1] if op in ("sum", "mean") else None
        _close(out, ref, dtype if dtype in TOL else "float64", magnitude=magnitude)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int8", "bool"])
@pytest.mark.parametrize(
    ("shape", "axis"), [((6,), None), ((3, 4), 1), ((3, 4), 0), ((2, 3, 2), (0, 2))]
)
def test_prod(
    rand: Callable[..., np.ndarray], dtype: str, shape: tuple[int, ...], axis: Any
) -> None:
    host = rand(shape, dtype)
    if dtype not in TOL and dtype != "bool":
        host = (np.abs(host.astype(np.int64)) % 4 + 1).astype(dtype)
    out = gp.prod(gp.from_numpy(host), axis=axis).to_numpy()
    ref = np.prod(_ref64(host), axis=axis)
    _close(out, ref, dtype if dtype in TOL else "int64")


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((1001,), None), ((5, 67), 1), ((5, 67), 0), ((3, 4, 5), 1), ((3, 4, 5), None)],
)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_exact(
    rand: Callable[..., np.ndarray], op: str, dtype: str, shape: tuple[int, ...], axis: Any
) -> None:
    host = rand(shape, dtype)
    res = getattr(gp, op)(gp.from_numpy(host), axis=axis)
    assert res.dtype == gp.int64
    ref_in = host.astype(np.float32) if dtype == "bfloat16" else host
    np.testing.assert_array_equal(res.to_numpy(), getattr(np, op)(ref_in, axis=axis))


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["all", "any"])
@pytest.mark.parametrize(
    ("shape", "axis"), [((300,), None), ((9, 40), 1), ((9, 40), 0), ((2, 3, 4), (0, 2))]
)
def test_all_any(
    rand: Callable[..., np.ndarray], op: str, dtype: str, shape: tuple[int, ...], axis: Any
) -> None:
    host = rand(shape, dtype)
    host.reshape(-1)[::3] = 0  # some zeros so that `all` is not trivially true
    res = getattr(gp, op)(gp.from_numpy(host), axis=axis)
    assert res.dtype == gp.bool_
    ref = getattr(np, op)(host.astype(np.float32) if dtype == "bfloat16" else host, axis=axis)
    np.testing.assert_array_equal(res.to_numpy(), ref)


def test_all_any_whole_rows(rand: Callable[..., np.ndarray]) -> None:
    host = rand((4, 50), "float32")
    host[1] = 0
    a = gp.from_numpy(host)
    np.testing.assert_array_equal(gp.any(a, axis=1).to_numpy(), [True, False, True, True])
    np.testing.assert_array_equal(gp.all(a, axis=1).to_numpy(), [True, False, True, True])


@pytest.mark.parametrize("op", ["sum", "mean", "max", "argmax", "var"])
def test_keepdims_and_out(rand: Callable[..., np.ndarray], op: str) -> None:
    host = rand((4, 5, 6), "float32")
    a = gp.from_numpy(host)
    axis = 1
    res = getattr(gp, op)(a, axis=axis, keepdims=True)
    ref = getattr(np, op)(host.astype(np.float64), axis=axis, keepdims=True)
    assert res.shape == ref.shape
    kind = "float32" if op != "argmax" else "int64"
    mag = _sum_ref(op, host, axis=axis, keepdims=True)[1] if op in ("sum", "mean") else None
    _close(res.to_numpy(), ref, kind, magnitude=mag)
    out = gp.empty(ref.shape, dtype=res.dtype)
    got = getattr(gp, op)(a, axis=axis, keepdims=True, out=out)
    assert got is out
    _close(out.to_numpy(), ref, kind, magnitude=mag)


def test_methods(rand: Callable[..., np.ndarray]) -> None:
    host = rand((6, 7), "float32")
    a = gp.from_numpy(host)
    h64 = host.astype(np.float64)
    for op, method, kwargs in [("sum", a.sum, {"axis": 0}), ("mean", a.mean, {}),
                               ("cumsum", a.cumsum, {"axis": 1})]:  # fmt: skip
        ref, mag = _sum_ref(op, host, **kwargs)
        _close(method(**kwargs).to_numpy(), ref, "float32", magnitude=mag)
    _close(a.std(ddof=1).to_numpy(), h64.std(ddof=1), "float32")
    _close(a.var(axis=1, ddof=1).to_numpy(), h64.var(axis=1, ddof=1), "float32")
    assert a.max().item() == host.max()
    assert a.min(axis=1).to_numpy().tolist() == host.min(axis=1).tolist()
    assert a.argmax().item() == host.argmax()
    assert a.argmin(axis=0).to_numpy().tolist() == host.argmin(axis=0).tolist()
    assert bool(a.any()) and a.all().item() == bool(host.all())
    _close(a.prod(axis=1).to_numpy(), h64.prod(axis=1), "float32")


def test_non_contiguous_views(rand: Callable[..., np.ndarray]) -> None:
    host = rand((10, 12, 8), "float32")
    a = gp.from_numpy(host)
    for view, ref in [
        (a[::2, 1:, ::3], host[::2, 1:, ::3]),
        (a.transpose(2, 0, 1), host.transpose(2, 0, 1)),
        (a[:, ::-1], host[:, ::-1]),
        (a.T[3], host.T[3]),
    ]:
        for axis in (None, 0, 1, (0, 1), -1):
            total, mag = _sum_ref("sum", ref, axis=axis)
            _close(gp.sum(view, axis=axis).to_numpy(), total, "float32", magnitude=mag)
            np.testing.assert_array_equal(gp.max(view, axis=axis).to_numpy(), ref.max(axis=axis))
        np.testing.assert_array_equal(gp.argmax(view, axis=1).to_numpy(), ref.argmax(axis=1))


def test_nan_handling() -> None:
    host = np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 5.0, -1.0, 2.0]], dtype=np.float32)
    a = gp.from_numpy(host)
    np.testing.assert_array_equal(gp.max(a, axis=1).to_numpy(), [np.nan, 5.0])
    np.testing.assert_array_equal(gp.min(a, axis=1).to_numpy(), [np.nan, -1.0])
    np.testing.assert_array_equal(gp.max(a, axis=0).to_numpy(), host.max(axis=0))
    assert np.isnan(gp.max(a).item())
    assert gp.argmax(a).item() == 1
    assert gp.argmin(a).item() == 1
    np.testing.assert_array_equal(gp.argmax(a, axis=1).to_numpy(), [1, 1])
    np.testing.assert_array_equal(gp.argmin(a, axis=0).to_numpy(), host.argmin(axis=0))
    assert gp.any(gp.from_numpy(np.array([0.0, np.nan]))).item() is True


def test_ties_give_first_index() -> None:
    host = np.array([3, 7, 7, 1, 7, 1], dtype=np.int32)
    a = gp.from_numpy(host)
    assert gp.argmax(a).item() == 1
    assert gp.argmin(a).item() == 3


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16"])
def test_empty_reductions(dtype: str) -> None:
    a = gp.zeros((0, 3), dtype=dtype)
    assert gp.sum(a).item() == 0
    assert gp.prod(a).item() == 1
    np.testing.assert_array_equal(gp.sum(a, axis=0).to_numpy(), np.zeros(3))
    assert gp.sum(a, axis=1).shape == (0,)
    assert gp.max(a, axis=1).shape == (0,)
    assert not gp.any(a).item() and gp.all(a).item()
    with pytest.raises(ValueError):
        gp.max(a)
    with pytest.raises(ValueError):
        gp.min(a, axis=0)
    with pytest.raises(ValueError):
        gp.argmax(a)
    with np.errstate(all="ignore"):
        assert np.isnan(gp.mean(gp.zeros((0,), dtype="float32")).item())
    assert gp.sum(gp.ones((2, 3)), axis=()).shape == (2, 3)


def test_scalar_and_size_one() -> None:
    s = gp.from_numpy(np.array(2.5, dtype=np.float32))
    assert gp.sum(s).item() == 2.5
    assert gp.max(s).item() == 2.5
    assert gp.argmax(s).item() == 0
    one = gp.from_numpy(np.array([[4]], dtype=np.int16))
    assert gp.sum(one, axis=(0, 1)).item() == 4
    assert gp.mean(one).dtype == gp.float64


def test_bad_axes_raise_and_runtime_keeps_working(rand: Callable[..., np.ndarray]) -> None:
    a = gp.from_numpy(rand((3, 4), "float32"))
    with pytest.raises(IndexError):
        gp.sum(a, axis=2)
    with pytest.raises(IndexError):
        gp.max(a, axis=-3)
    with pytest.raises(ValueError):
        gp.sum(a, axis=(0, 0))
    with pytest.raises(TypeError):
        gp.sum(a, axis=1.5)
    with pytest.raises(TypeError):
        gp.argmax(a, axis=(0, 1))
    with pytest.raises(TypeError):
        gp.sum(np.ones(3))
    with pytest.raises(ValueError):
        gp.sum(a, axis=0, out=gp.empty((3,)))
    total, mag = _sum_ref("sum", a.to_numpy(), axis=0)
    _close(gp.sum(a, axis=0).to_numpy(), total, "float32", magnitude=mag)


@pytest.mark.parametrize("op", ["sum", "max", "argmax", "mean", "var"])
def test_deterministic(rand: Callable[..., np.ndarray], op: str) -> None:
    host = rand((3, 100_003), "float32")
    a = gp.from_numpy(host)
    for axis in (None, 1, 0):
        first = getattr(gp, op)(a, axis=axis).to_numpy()
        second = getattr(gp, op)(a, axis=axis).to_numpy()
        assert first.tobytes() == second.tobytes()


def test_large_sum_accuracy(rand: Callable[..., np.ndarray]) -> None:
    host = rand((1 << 20,), "float32")
    total, mag = _sum_ref("sum", host)
    _close(gp.sum(gp.from_numpy(host)).to_numpy(), total, "float32", magnitude=mag)
    half = host[:4096].astype(np.float16)
    total, mag = _sum_ref("sum", half)
    _close(gp.sum(gp.from_numpy(half)).to_numpy(), total, "float16", magnitude=mag)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int32", "int16", "bool"])
def test_vector_loop_boundaries(rand: Callable[..., np.ndarray], dtype: str) -> None:
    """Whole-array reductions one vector around the vector loop's steps (U 16-byte vectors a
    thread, 256 threads, per-lane accumulators), with an unaligned start (the element loop)."""
    item = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).itemsize
    vec = 16 // item
    step = 256 * (8 if item >= 4 else 4) * vec  # one unrolled step of a 256-thread block
    sizes = {step - vec, step, step + vec, 16 * step + 1, 40 * step - vec + 3, 300 * step + vec}
    for n in sorted(sizes):
        host = rand((n + 1,), dtype)
        device = gp.from_numpy(host)
        for start in (0, 1):
            view, a = host[start : start + n], device[start : start + n]
            for op in ("sum", "max", "min", "all", "any"):
                out = getattr(gp, op)(a).to_numpy()
                if op in ("all", "any"):
                    assert bool(out) == bool(getattr(np, op)(view)), op
                    continue
                ref = _np_op(op, view, None)
                if op == "sum" and dtype in TOL:
                    _close(out, ref, dtype, magnitude=_sum_ref("sum", view)[1])
                else:
                    np.testing.assert_array_equal(
                        np.asarray(out).astype(np.float64), np.asarray(ref).astype(np.float64)
                    )


def test_var_ddof(rand: Callable[..., np.ndarray]) -> None:
    host = rand((5, 9), "float64")
    a = gp.from_numpy(host)
    for ddof in (0, 1, 2):
        _close(gp.var(a, axis=1, ddof=ddof).to_numpy(), host.var(axis=1, ddof=ddof), "float64")
        _close(gp.std(a, ddof=ddof).to_numpy(), host.std(ddof=ddof), "float64")


# --- softmax, log_softmax, cumsum ----------------------------------------------------------


def _softmax64(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    s = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(s).sum(axis=axis, keepdims=True))
    return s - lse if log else np.exp(s - lse)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((7, 1000), -1), ((7, 33), 0), ((3, 5, 17), 1), ((513,), 0), ((4, 1), 1), ((301, 37), 1)],
)
@pytest.mark.parametrize("log", [False, True])
def test_softmax(
    rand: Callable[..., np.ndarray], dtype: str, shape: tuple[int, ...], axis: int, log: bool
) -> None:
    host = rand(shape, dtype) * 4
    fn = gp.log_softmax if log else gp.softmax
    res = fn(gp.from_numpy(host), axis=axis)
    assert res.dtype == np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    _close(res.to_numpy(), _softmax64(host, axis, log), dtype)


def test_softmax_stable_and_views(rand: Callable[..., np.ndarray]) -> None:
    host = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], dtype=np.float32)
    out = gp.softmax(gp.from_numpy(host)).to_numpy()
    assert np.isfinite(out).all()
    _close(out, _softmax64(host, -1, False), "float32")
    big = rand((6, 8), "float32")
    view = gp.from_numpy(big)[::2, ::-1]
    _close(gp.log_softmax(view, axis=0).to_numpy(), _softmax64(big[::2, ::-1], 0, True), "float32")
    ints = gp.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert gp.softmax(ints).dtype == gp.float64
    with pytest.raises(IndexError):
        gp.softmax(ints, axis=2)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [
        ((1000,), None),
        ((5, 301), 1),
        ((301, 5), 0),
        ((3, 4, 5), 1),
        ((3, 4), None),
        ((3, 50_000), 1),
    ],
)
def test_cumsum(
    rand: Callable[..., np.ndarray], dtype: str, shape: tuple[int, ...], axis: Any
) -> None:
    host = rand(shape, dtype)
    res = gp.cumsum(gp.from_numpy(host), axis=axis)
    ref = np.cumsum(_ref64(host), axis=axis)
    assert res.dtype == gp.reductions.result_dtype("cumsum", gp.from_numpy(host).dtype)
    if dtype in TOL:
        _close(
            res.to_numpy(), ref, dtype, scale=3.0, magnitude=_sum_ref("cumsum", host, axis=axis)[1]
        )
    else:
        np.testing.assert_array_equal(res.to_numpy(), ref)


def test_cumsum_edge_cases(rand: Callable[..., np.ndarray]) -> None:
    assert gp.cumsum(gp.zeros((0, 3)), axis=0).shape == (0, 3)
    host = rand((4, 6), "float32")
    view = gp.from_numpy(host)[:, ::2]
    ref, mag = _sum_ref("cumsum", host[:, ::2], axis=1)
    _close(gp.cumsum(view, axis=1).to_numpy(), ref, "float32", magnitude=mag)
    out = gp.empty((4, 3), dtype="float64")
    assert gp.cumsum(view, axis=1, out=out) is out
    with pytest.raises(IndexError):
        gp.cumsum(view, axis=3)


# --- properties ----------------------------------------------------------------------------


@st.composite
def _shape_and_axes(draw: Any) -> tuple[tuple[int, ...], Any]:
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)))
    axes = draw(st.one_of(st.none(), st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    if axes is not None:
        axes = tuple(a - len(shape) if draw(st.booleans()) else a for a in sorted(axes))
    return shape, axes


@settings(max_examples=40, deadline=None)
@given(case=_shape_and_axes(), keepdims=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_property_sum_max_mean(
    case: tuple[tuple[int, ...], Any], keepdims: bool, seed: int
) -> None:
    shape, axes = case
    host = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) + 0.5
    a = gp.from_numpy(host)
    for op in ("sum", "mean"):
        ref, mag = _sum_ref(op, host, axis=axes, keepdims=keepdims)
        got = getattr(gp, op)(a, axis=axes, keepdims=keepdims).to_numpy()
        _close(got, ref, "float32", magnitude=mag)
    np.testing.assert_array_equal(
        gp.max(a, axis=axes, keepdims=keepdims).to_numpy(), host.max(axis=axes, keepdims=keepdims)
    )
    ints = (host * 10).astype(np.int32)
    np.testing.assert_array_equal(
        gp.sum(gp.from_numpy(ints), axis=axes, keepdims=keepdims).to_numpy(),
        ints.sum(axis=axes, keepdims=keepdims, dtype=np.int64),
    )


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "float64", "uint8"])
@pytest.mark.parametrize(
    ("shape", "axis"), [((5000, 7), 0), ((4, 65536), 1), ((3, 100_003), 1), ((2, 3000, 33), 1)]
)
def test_large_axes_split_paths(
    rand: Callable[..., np.ndarray], dtype: str, shape: tuple[int, ...], axis: int
) -> None:
    """Shapes whose reductions are cut into per-block partials and combined (GPU: two passes)."""
    host = rand(shape, dtype)
    a = gp.from_numpy(host)
    ref_in = host.astype(np.float32) if dtype == "float16" else host
    total, mag = _sum_ref("sum", host, axis=axis)
    _close(gp.sum(a, axis=axis).to_numpy(), total, dtype if dtype in TOL else "int64",
           magnitude=mag)  # fmt: skip
    np.testing.assert_array_equal(
        gp.max(a, axis=axis).to_numpy().astype(np.float64), ref_in.max(axis=axis)
    )
    np.testing.assert_array_equal(gp.argmin(a, axis=axis).to_numpy(), ref_in.argmin(axis=axis))
    np.testing.assert_array_equal(gp.any(a, axis=axis).to_numpy(), ref_in.any(axis=axis))
    _close(
        gp.std(a, axis=axis).to_numpy(),
        _ref64(host).std(axis=axis),
        dtype if dtype in TOL else "float64",
        scale=3.0,
    )

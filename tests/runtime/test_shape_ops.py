"""Shape ops (concatenate, stack, split, tile, repeat, take, triu/tril, flip) against NumPy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pygpukit as gp

#: Every runtime dtype (tests/runtime/test_dtypes.py pins the list itself).
DTYPES = list(gp.dtypes.SUPPORTED)


def _eq(res: gp.GPUArray, ref: np.ndarray) -> None:
    out = res.to_numpy()
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype
    # compare bytes, so NaNs and -0.0 count too
    np.testing.assert_array_equal(
        np.atleast_1d(out).view(np.uint8), np.atleast_1d(ref).view(np.uint8)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_and_stack(rand: Callable[..., np.ndarray], dtype: str) -> None:
    xs = [rand((3, k, 5), dtype) for k in (1, 4, 0, 2)]
    gs = [gp.from_numpy(x) for x in xs]
    _eq(gp.concatenate(gs, axis=1), np.concatenate(xs, axis=1))
    _eq(gp.concatenate(gs, axis=-2), np.concatenate(xs, axis=-2))
    _eq(gp.concatenate(gs, axis=None), np.concatenate(xs, axis=None))
    same = [rand((3, 4), dtype) for _ in range(3)]
    for axis in (0, 1, 2, -1):
        _eq(gp.stack([gp.from_numpy(x) for x in same], axis=axis), np.stack(same, axis=axis))


def test_concatenate_views_promotion_and_out(rand: Callable[..., np.ndarray]) -> None:
    a = rand((4, 6), "float32")
    b = rand((4, 3), "int32")
    ga = gp.from_numpy(a)[:, ::2]
    res = gp.concatenate([ga, gp.from_numpy(b)], axis=1)
    ref = np.concatenate([a[:, ::2], b], axis=1)
    assert res.dtype == ref.dtype
    np.testing.assert_array_equal(res.to_numpy(), ref)
    out = gp.empty((8, 3), dtype="float64")
    assert gp.concatenate([ga, ga], axis=0, out=out) is out
    np.testing.assert_array_equal(
        out.to_numpy(), np.concatenate([a[:, ::2]] * 2).astype(np.float64)
    )


def test_concatenate_errors() -> None:
    a = gp.ones((2, 3))
    with pytest.raises(ValueError):
        gp.concatenate([a, gp.ones((3, 2))], axis=0)
    with pytest.raises(ValueError):
        gp.concatenate([a, gp.ones((2,))])
    with pytest.raises(ValueError):
        gp.concatenate([])
    with pytest.raises(IndexError):
        gp.concatenate([a, a], axis=2)
    with pytest.raises(TypeError):
        gp.concatenate(a)
    with pytest.raises(TypeError):
        gp.concatenate([a, np.ones((2, 3))])
    with pytest.raises(ValueError):
        gp.stack([a, gp.ones((2, 4))])
    with pytest.raises(ValueError):
        gp.concatenate([a, a], out=gp.empty((3, 3)))
    assert gp.concatenate([a, a]).shape == (4, 3)


@pytest.mark.parametrize(
    ("shape", "spec", "axis"),
    [
        ((12,), 3, 0),
        ((12,), [2, 5, 5, 20], 0),
        ((4, 6), 2, 1),
        ((4, 6), [1, 3], -1),
        ((6, 2), [], 0),
    ],
)
def test_split(
    rand: Callable[..., np.ndarray], shape: tuple[int, ...], spec: Any, axis: int
) -> None:
    host = rand(shape, "int32")
    pieces = gp.split(gp.from_numpy(host), spec, axis=axis)
    refs = np.split(host, spec, axis=axis)
    assert len(pieces) == len(refs)
    for p, r in zip(pieces, refs, strict=True):
        np.testing.assert_array_equal(p.to_numpy(), r)


def test_split_errors_and_array_split(rand: Callable[..., np.ndarray]) -> None:
    host = rand((10,), "float32")
    a = gp.from_numpy(host)
    with pytest.raises(ValueError):
        gp.split(a, 3)
    with pytest.raises(ValueError):
        gp.split(a, 0)
    for p, r in zip(gp.array_split(a, 3), np.array_split(host, 3), strict=True):
        np.testing.assert_array_equal(p.to_numpy(), r)


@pytest.mark.parametrize(
    ("shape", "reps"),
    [((3,), 2), ((3,), (2, 2)), ((2, 3), (1, 3)), ((2, 1, 3), (2, 1, 2)), ((2, 3), 0)],
)
def test_tile(rand: Callable[..., np.ndarray], shape: tuple[int, ...], reps: Any) -> None:
    host = rand(shape, "float32")
    np.testing.assert_array_equal(
        gp.tile(gp.from_numpy(host), reps).to_numpy(), np.tile(host, reps)
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool", "uint8"])
def test_repeat(rand: Callable[..., np.ndarray], dtype: str) -> None:
    host = rand((3, 4), dtype)
    a = gp.from_numpy(host)
    _eq(gp.repeat(a, 2), np.repeat(host, 2))
    _eq(gp.repeat(a, 3, axis=1), np.repeat(host, 3, axis=1))
    _eq(a.repeat([1, 0, 2], axis=0), np.repeat(host, [1, 0, 2], axis=0))
    _eq(
        gp.repeat(a, gp.from_numpy(np.array([2, 1, 0, 3])), axis=-1),
        np.repeat(host, [2, 1, 0, 3], axis=-1),
    )
    _eq(gp.repeat(a, 0, axis=0), np.repeat(host, 0, axis=0))
    with pytest.raises(ValueError):
        gp.repeat(a, [1, 2], axis=0)
    with pytest.raises(ValueError):
        gp.repeat(a, -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_take(rand: Callable[..., np.ndarray], dtype: str) -> None:
    host = rand((5, 7, 3), dtype)
    a = gp.from_numpy(host)
    idx = np.array([[0, -1], [6, 2], [3, 3]])
    _eq(gp.take(a, idx, axis=1), np.take(host, idx, axis=1))
    _eq(gp.take(a, [4, 0, -5], axis=0), np.take(host, [4, 0, -5], axis=0))
    _eq(gp.take(a, 17), np.take(host, 17))
    _eq(
        a.take(gp.from_numpy(np.array([2, 0, 2], dtype=np.int32)), axis=-1),
        np.take(host, [2, 0, 2], axis=-1),
    )
    _eq(gp.take(a[:, ::2], [1, 0], axis=1), np.take(host[:, ::2], [1, 0], axis=1))


def test_take_modes_and_errors(rand: Callable[..., np.ndarray]) -> None:
    host = rand((4, 5), "float32")
    a = gp.from_numpy(host)
    idx = np.array([-7, 0, 9, 4])
    for mode in ("wrap", "clip"):
        np.testing.assert_array_equal(
            gp.take(a, idx, axis=1, mode=mode).to_numpy(), np.take(host, idx, axis=1, mode=mode)
        )
        np.testing.assert_array_equal(
            gp.take(a, gp.from_numpy(idx), axis=1, mode=mode).to_numpy(),
            np.take(host, idx, axis=1, mode=mode),
        )
    with pytest.raises(IndexError):
        gp.take(a, [5], axis=1)
    with pytest.raises(IndexError):
        gp.take(a, [-6], axis=1)
    with pytest.raises(IndexError):
        gp.take(a, gp.from_numpy(np.array([0, 4])), axis=0)
    with pytest.raises(IndexError):
        gp.take(a, [0.5], axis=0)
    with pytest.raises(ValueError):
        gp.take(a, [0], axis=0, mode="nope")
    with pytest.raises(IndexError):
        gp.take(a, [0], axis=2)
    assert gp.take(a, np.zeros((0,), dtype=np.int64), axis=1).shape == (4, 0)
    np.testing.assert_array_equal(gp.take(a, [3], axis=0).to_numpy(), host[[3]])
    out = gp.empty((4, 2), dtype="float64")
    assert gp.take(a, [4, 0], axis=1, out=out) is out
    np.testing.assert_array_equal(out.to_numpy(), host[:, [4, 0]].astype(np.float64))
    with pytest.raises(ValueError):
        gp.take(a, [4, 0], axis=1, out=gp.empty((2, 4)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool", "float64"])
@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3, 10])
def test_triu_tril(rand: Callable[..., np.ndarray], dtype: str, k: int) -> None:
    for shape in ((5, 5), (4, 7), (2, 3, 6, 4)):
        host = rand(shape, dtype)
        a = gp.from_numpy(host)
        _eq(gp.triu(a, k), np.triu(host, k))
        _eq(gp.tril(a, k), np.tril(host, k))
    host = rand((6, 6), dtype)
    _eq(gp.triu(gp.from_numpy(host).T, k), np.triu(host.T, k))
    vec = rand((4,), dtype)
    _eq(gp.tril(gp.from_numpy(vec), k), np.tril(vec, k))


def test_tri_errors() -> None:
    with pytest.raises(ValueError):
        gp.triu(gp.from_numpy(np.array(1.0)))
    assert gp.tril(gp.zeros((0, 3))).shape == (0, 3)


def test_flip(rand: Callable[..., np.ndarray]) -> None:
    host = rand((3, 4, 5), "float32")
    a = gp.from_numpy(host)
    for axis in (None, 0, 1, -1, (0, 2)):
        view = gp.flip(a, axis)
        np.testing.assert_array_equal(view.to_numpy(), np.flip(host, axis))
    # a view: writes through
    v = gp.flip(a, 0)
    v[0] = 1.0
    assert (a.to_numpy()[-1] == 1.0).all()
    with pytest.raises(IndexError):
        gp.flip(a, 3)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    n=st.integers(1, 4),
    axis_seed=st.integers(0, 100),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_concat_split_roundtrip(
    shape: list[int], n: int, axis_seed: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    axis = axis_seed % len(shape)
    parts = []
    for _ in range(n):
        s = list(shape)
        s[axis] = int(rng.integers(0, 4))
        parts.append(rng.standard_normal(s).astype(np.float32))
    joined = gp.concatenate([gp.from_numpy(p) for p in parts], axis=axis)
    ref = np.concatenate(parts, axis=axis)
    np.testing.assert_array_equal(joined.to_numpy(), ref)
    cuts = np.cumsum([p.shape[axis] for p in parts])[:-1].tolist()
    for piece, p in zip(gp.split(joined, cuts, axis=axis), parts, strict=True):
        np.testing.assert_array_equal(piece.to_numpy(), p)
    idx = (
        rng.integers(-ref.shape[axis], ref.shape[axis], size=5)
        if ref.shape[axis]
        else np.zeros(0, np.int64)
    )
    np.testing.assert_array_equal(
        gp.take(joined, idx, axis=axis).to_numpy(), np.take(ref, idx, axis=axis)
    )

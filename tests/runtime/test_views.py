"""Views (indexing, reshape, transpose, squeeze, expand_dims, broadcast_to) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pygpukit as gp
from pygpukit import _indexing

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)


def _values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    # distinct non-zero values so any misplaced element shows
    n = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) + 1).astype(np.float32).reshape(shape)


@st.composite
def shape_and_index(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[object, ...]]:
    shape = draw(shapes)
    items: list[object] = []
    dim = 0
    used_ellipsis = False
    while dim < len(shape) and draw(st.booleans()):
        kind = draw(st.sampled_from(["int", "slice", "slice", "none", "ellipsis"]))
        if kind == "none":
            items.append(None)
            continue
        if kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
            # the ellipsis takes the dims the remaining items do not; stop adding axes after it
            tail = draw(st.integers(0, len(shape) - dim))
            for d in shape[len(shape) - tail :]:
                items.append(
                    slice(
                        draw(st.none() | st.integers(-8, 8)),
                        draw(st.none() | st.integers(-8, 8)),
                        draw(st.sampled_from([None, 1, 2, 3, -1, -2])),
                    )
                    if d == 0 or draw(st.booleans())
                    else draw(st.integers(-d, d - 1))
                )
            break
        n = shape[dim]
        if kind == "int" and n > 0:
            items.append(draw(st.integers(-n, n - 1)))
        else:
            items.append(
                slice(
                    draw(st.none() | st.integers(-8, 8)),
                    draw(st.none() | st.integers(-8, 8)),
                    draw(st.sampled_from([None, 1, 2, 3, -1, -2, -4])),
                )
            )
        dim += 1
    return shape, tuple(items)


@SETTINGS
@given(shape_and_index(), st.integers(0, 2**32 - 1))
def test_basic_indexing_matches_numpy(case, seed) -> None:
    shape, index = case
    host = _values(shape, seed)
    view = gp.from_numpy(host)[index]
    expected = host[index]
    assert view.shape == np.shape(expected)
    np.testing.assert_array_equal(view.to_numpy(), expected)
    # chained indexing on the view
    if view.ndim:
        np.testing.assert_array_equal(view[::-1].to_numpy(), np.asarray(expected)[::-1])


@SETTINGS
@given(shape_and_index(), st.integers(0, 2**32 - 1))
def test_indexed_view_writes_through(case, seed) -> None:
    shape, index = case
    host = _values(shape, seed)
    arr = gp.from_numpy(host)
    arr[index] = -5.0
    host[index] = -5.0
    np.testing.assert_array_equal(arr.to_numpy(), host)


@SETTINGS
@given(shapes, st.integers(0, 2**32 - 1), st.data())
def test_reshape_matches_numpy_view_or_copy(shape, seed, data) -> None:
    host = _values(shape, seed)
    arr = gp.from_numpy(host)
    # make the source non-contiguous sometimes: a transpose and/or a step
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    src_host, src = host.transpose(perm), arr.transpose(perm)
    if src_host.ndim and src_host.shape[0] > 1 and data.draw(st.booleans()):
        src_host, src = src_host[::2], src[::2]
    size = src_host.size
    divisors = [d for d in range(1, size + 1) if size % d == 0] or [1]
    first = data.draw(st.sampled_from(divisors))
    target = (first, -1) if size else (0, data.draw(st.integers(0, 3)))
    expected = src_host.reshape(target)
    out = src.reshape(target)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.to_numpy(), expected)
    # view exactly when NumPy makes a view: writing through must agree
    expected[...] = -1
    out.fill(-1)
    np.testing.assert_array_equal(src.to_numpy(), src_host)


@pytest.mark.parametrize(
    ("shape", "perm", "new"),
    [
        ((4, 6), (1, 0), (24,)),  # transposed: copy
        ((4, 6), None, (2, 2, 6)),  # contiguous: view
        ((2, 3, 4), (0, 2, 1), (2, 12)),  # merges non-adjacent strides: copy
        ((2, 3, 4), (0, 1, 2), (6, 4)),
        ((1, 5, 1, 3), (2, 1, 0, 3), (5, 3)),  # size-1 axes do not matter
        ((6, 1), (1, 0), (2, 3)),
    ],
)
def test_reshape_view_decision(shape, perm, new) -> None:
    host = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int32).reshape(shape)
    src_host = host if perm is None else host.transpose(perm)
    new_shape, strides = _indexing.reshape(src_host.shape, src_host.strides, src_host.itemsize, new)
    expected = src_host.reshape(new)
    assert new_shape == expected.shape
    if np.shares_memory(expected, host):
        assert strides == expected.strides
    else:
        assert strides is None


def test_transpose_permute_T_swapaxes(rand) -> None:
    host = rand((2, 3, 4))
    arr = gp.from_numpy(host)
    np.testing.assert_array_equal(arr.T.to_numpy(), host.T)
    np.testing.assert_array_equal(arr.transpose(1, 0, 2).to_numpy(), host.transpose(1, 0, 2))
    np.testing.assert_array_equal(arr.transpose((2, 0, 1)).to_numpy(), host.transpose(2, 0, 1))
    np.testing.assert_array_equal(arr.permute(2, 1, 0).to_numpy(), host.transpose(2, 1, 0))
    np.testing.assert_array_equal(arr.swapaxes(0, -1).to_numpy(), host.swapaxes(0, -1))
    np.testing.assert_array_equal(gp.transpose(arr).to_numpy(), np.transpose(host))
    assert arr.T.strides == host.T.strides


def test_squeeze_expand_dims(rand) -> None:
    host = rand((1, 3, 1, 2))
    arr = gp.from_numpy(host)
    np.testing.assert_array_equal(arr.squeeze().to_numpy(), host.squeeze())
    np.testing.assert_array_equal(arr.squeeze(2).to_numpy(), host.squeeze(2))
    np.testing.assert_array_equal(arr.squeeze((0, -2)).to_numpy(), host.squeeze((0, -2)))
    np.testing.assert_array_equal(gp.squeeze(arr, 0).to_numpy(), np.squeeze(host, 0))
    for axis in (0, 2, -1, (0, 3), (1, -1)):
        expected = np.expand_dims(host, axis)
        out = gp.expand_dims(arr, axis)
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.to_numpy(), expected)


@pytest.mark.parametrize(
    ("shape", "target"),
    [((3,), (4, 3)), ((4, 1), (4, 5)), ((1,), (2, 3, 1)), ((2, 1, 3), (5, 2, 4, 3)), ((), (2, 2))],
)
def test_broadcast_to(shape, target, rand) -> None:
    host = rand(shape)
    out = gp.broadcast_to(gp.from_numpy(host), target)
    expected = np.broadcast_to(host, target)
    assert out.shape == expected.shape
    assert out.strides == expected.strides
    np.testing.assert_array_equal(out.to_numpy(), expected)


def test_views_of_views_share_the_buffer(rand) -> None:
    host = rand((8, 8))
    arr = gp.from_numpy(host)
    inner = arr[2:7, 1::2].T[::-1, 1:]
    inner[0, 0] = 123.0
    host[2:7, 1::2].T[::-1, 1:][0, 0] = 123.0
    np.testing.assert_array_equal(arr.to_numpy(), host)
    assert inner.is_contiguous() is False
    copy = inner.contiguous()
    assert copy.is_contiguous()
    np.testing.assert_array_equal(copy.to_numpy(), host[2:7, 1::2].T[::-1, 1:])


def test_broadcast_shapes() -> None:
    assert _indexing.broadcast_shapes((3, 1), (1, 4)) == np.broadcast_shapes((3, 1), (1, 4))
    assert _indexing.broadcast_shapes((2, 1, 5), (7, 1), ()) == (2, 7, 5)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        _indexing.broadcast_shapes((3,), (4,))


def test_is_c_contiguous_matches_numpy(rand) -> None:
    host = rand((3, 1, 4))
    for view in (host, host[:, :, ::2], host.transpose(1, 0, 2), host[:, 0:1], host[::-1]):
        assert _indexing.is_c_contiguous(view.shape, view.strides, 4) == view.flags.c_contiguous


@st.composite
def broadcastable(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    target = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    keep = draw(st.integers(0, len(target)))
    source = tuple(d if draw(st.booleans()) else 1 for d in target[len(target) - keep :])
    return source, target


@SETTINGS
@given(broadcastable(), st.integers(0, 2**32 - 1), st.data())
def test_broadcast_squeeze_expand_dims_match_numpy(case, seed, data) -> None:
    source, target = case
    host = _values(source, seed)
    arr = gp.from_numpy(host)
    out = arr.broadcast_to(target)
    expected = np.broadcast_to(host, target)
    assert out.shape == expected.shape
    if expected.size:  # NumPy's strides for empty results are arbitrary
        assert out.strides == expected.strides
    np.testing.assert_array_equal(out.to_numpy(), expected)
    ones = [i for i, d in enumerate(source) if d == 1]
    if ones:
        axis = data.draw(st.sampled_from(ones))
        np.testing.assert_array_equal(arr.squeeze(axis).to_numpy(), host.squeeze(axis))
    axis = data.draw(st.integers(-len(source) - 1, len(source)))
    np.testing.assert_array_equal(arr.expand_dims(axis).to_numpy(), np.expand_dims(host, axis))

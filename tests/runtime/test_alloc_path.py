"""The allocation fast paths (shape check, gp.empty, _native.empty) and to_numpy(out=).

The fast paths must give exactly what the general ones give: same shapes,
dtypes and errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _indexing, memory
from pygpukit.backend import select

GOOD_SHAPES = [(), (0,), (3,), (3, 4), (1, 0, 2), 5, 0, [2, 3], np.int64(4), (np.int32(2), 3)]
BAD_SHAPES = [
    (-1, ValueError),
    ((2, -1), ValueError),
    ((-3,), ValueError),
    (True, TypeError),
    ((True,), TypeError),
    ((2, False), TypeError),
    (None, TypeError),
    ((2.0,), TypeError),
    (2.5, TypeError),
    ("3", TypeError),
    ((2, None), TypeError),
]


def _general(shape: object) -> tuple[int, ...]:
    """The reference: the validation the fast path skips, spelled out."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        return (int(shape),)
    return tuple(int(d) for d in shape)  # type: ignore[union-attr]


@pytest.mark.parametrize("shape", GOOD_SHAPES, ids=repr)
def test_normalize_shape_accepts_what_it_did(shape: object) -> None:
    got = _indexing.normalize_shape(shape)
    assert got == _general(shape)
    assert type(got) is tuple and all(type(d) is int for d in got)


@pytest.mark.parametrize(("shape", "error"), BAD_SHAPES, ids=repr)
def test_normalize_shape_refuses_what_it_did(shape: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        _indexing.normalize_shape(shape)
    with pytest.raises(error):
        gp.empty(shape)


@pytest.mark.parametrize("shape", GOOD_SHAPES, ids=repr)
def test_empty_shapes(shape: object) -> None:
    a = gp.empty(shape)
    assert a.shape == _general(shape) and a.dtype == gp.float32


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (None, "float32"),
        ("float16", "float16"),
        ("f4", "float32"),
        (gp.bfloat16, "bfloat16"),
        (np.int8, "int8"),
        (np.dtype("uint8"), "uint8"),
        (float, "float64"),
        (bool, "bool"),
        ("int64", "int64"),
    ],
    ids=repr,
)
def test_empty_dtypes_are_the_same_on_every_call(dtype: object, name: str) -> None:
    for _ in range(3):  # the second call takes the cached name
        a = gp.empty((2, 3), dtype)
        assert (a.dtype.name, a.shape) == (name, (2, 3))


def test_empty_refuses_bad_dtypes_every_time() -> None:
    for _ in range(2):  # a refused dtype is never cached
        with pytest.raises(TypeError):
            gp.empty((2,), "complex64")
        with pytest.raises(TypeError):
            gp.empty((2,), ">f4")


def test_empty_device_and_evictable_arguments() -> None:
    assert gp.empty(3, device=0).shape == (3,)
    with pytest.raises((IndexError, ValueError)):  # as before: _check_ordinal's error
        gp.empty(3, device=99)
    assert gp.empty((4,), evictable=True).evictable
    assert not gp.empty((4,)).evictable


def test_native_empty_checks_its_arguments_before_allocating() -> None:
    native = select.native()
    if native is None:
        pytest.skip("pygpukit._native is not built")
    with pytest.raises(TypeError):
        native.empty((2,))
    with pytest.raises(TypeError):
        native.empty((2,), "float32", None, None, False, 1)
    with pytest.raises(TypeError):
        native.empty((2,), "complex64")
    with pytest.raises(TypeError):
        native.empty((2,), 7)
    with pytest.raises(TypeError):
        native.empty((2, "x"), "float32")
    with pytest.raises(TypeError):
        native.empty(5, "float32")


# ---- to_numpy(out=) -----------------------------------------------------------------------


def test_to_numpy_out_is_filled_and_returned(rand) -> None:
    host = rand((5, 7), np.float32)
    a = gp.from_numpy(host)
    out = np.empty((5, 7), np.float32)
    assert a.to_numpy(out=out) is out
    np.testing.assert_array_equal(out, host)
    later = np.empty((5, 7), np.float32)
    assert a.to_numpy(blocking=False, out=later).result() is later
    np.testing.assert_array_equal(later, host)
    view = a[1:, ::2]
    vout = np.empty(view.shape, np.float32)
    np.testing.assert_array_equal(view.to_numpy(out=vout), host[1:, ::2])


def test_to_numpy_out_into_pinned_memory(rand) -> None:
    host = rand((300,), np.int16)
    pinned = memory.pinned_empty((300,), "int16")
    assert gp.from_numpy(host).to_numpy(out=pinned) is pinned
    np.testing.assert_array_equal(pinned, host)


def test_to_numpy_out_is_validated(rand) -> None:
    a = gp.from_numpy(rand((4, 6), np.float32))
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        a.to_numpy(out=[0.0] * 24)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype"):
        a.to_numpy(out=np.empty((4, 6), np.float64))
    with pytest.raises(TypeError, match="dtype"):
        a.to_numpy(out=np.empty((4, 6), ">f4"))
    with pytest.raises(ValueError, match="shape"):
        a.to_numpy(out=np.empty((6, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        a.to_numpy(out=np.empty((6, 4), np.float32).T)
    readonly = np.empty((4, 6), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        a.to_numpy(out=readonly)
    with pytest.raises(ValueError, match="shape"):
        a.to_numpy(blocking=False, out=np.empty((24,), np.float32))

"""Read-only GPUArrays: ``setflags(write=False)``, ``flags.writeable``, views and broadcast views.

Every way of writing into a caller's array is one case of the class; each must raise
``ReadOnlyArrayError`` (a ``ValueError``) before anything is written, and leave the values
as they were. Runs on whichever backend is active (CPU here, CUDA on the GPU machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.errors import PyGPUkitError, ReadOnlyArrayError


@pytest.fixture
def frozen(rand: Callable[..., np.ndarray]) -> tuple[gp.GPUArray, np.ndarray]:
    host = rand((4, 6))
    x = gp.from_numpy(host)
    x.setflags(write=False)
    return x, host


def _other(x: gp.GPUArray) -> gp.GPUArray:
    return gp.from_numpy(np.full(x.shape, 3.5, dtype=x.dtype))


WRITES: dict[str, Callable[[gp.GPUArray], Any]] = {
    "setitem all": lambda x: x.__setitem__(..., 1.0),
    "setitem row": lambda x: x.__setitem__(1, 2.0),
    "setitem array": lambda x: x.__setitem__(slice(None), _other(x)),
    "setitem numpy": lambda x: x.__setitem__(0, np.ones(x.shape[1], x.dtype)),
    "fill": lambda x: x.fill(5.0),
    "iadd": lambda x: x.__iadd__(1.0),
    "isub array": lambda x: x.__isub__(_other(x)),
    "imul": lambda x: x.__imul__(2),
    "itruediv": lambda x: x.__itruediv__(2.0),
    "ipow": lambda x: x.__ipow__(2),
    "imatmul": lambda x: x[:, :4].__imatmul__(gp.from_numpy(np.eye(4, dtype=x.dtype))),
    "add out": lambda x: gp.add(_other(x), 1.0, out=x),
    "exp out": lambda x: gp.exp(_other(x), out=x),
    "where out": lambda x: gp.where(_other(x) > 0, 1.0, 2.0, out=x),
    "clip out": lambda x: gp.clip(_other(x), 0.0, 1.0, out=x),
    "round decimals out": lambda x: gp.round(_other(x), 2, out=x),
    "sum out": lambda x: gp.sum(_other(x), axis=0, out=x[0]),
    "max out": lambda x: gp.max(_other(x), axis=1, out=x[:, 0]),
    "cumsum out": lambda x: gp.cumsum(_other(x), axis=1, out=x),
    "matmul out": lambda x: gp.matmul(_other(x), gp.ones((6, 6), "float32"), out=x),
    "concatenate out": lambda x: gp.concatenate([_other(x)[:2], _other(x)[2:]], out=x),
    "take out": lambda x: gp.take(_other(x), [0, 1, 2, 3], axis=0, out=x),
}


@pytest.mark.parametrize("case", list(WRITES))
def test_every_write_into_a_read_only_array_is_refused(
    frozen: tuple[gp.GPUArray, np.ndarray], case: str
) -> None:
    x, host = frozen
    with pytest.raises(ReadOnlyArrayError, match="read-only"):
        WRITES[case](x)
    np.testing.assert_array_equal(x.to_numpy(), host)


@pytest.mark.parametrize(
    "make_view",
    [
        lambda x: x[1:3],
        lambda x: x[:, ::2],
        lambda x: x.T,
        lambda x: x.reshape(6, 4),
        lambda x: x.ravel(),
        lambda x: x[None],
        lambda x: x.squeeze(),
        lambda x: x.expand_dims(0),
        lambda x: x.swapaxes(0, 1),
        lambda x: x.view("int32"),
        lambda x: gp.flip(x, 0),
        lambda x: x.astype("float32", copy=False),
    ],
)
def test_views_of_a_read_only_array_are_read_only(
    frozen: tuple[gp.GPUArray, np.ndarray], make_view: Callable[[gp.GPUArray], gp.GPUArray]
) -> None:
    x, host = frozen
    view = make_view(x)
    assert view.flags.writeable is False
    with pytest.raises(ReadOnlyArrayError):
        view[...] = 0
    np.testing.assert_array_equal(x.to_numpy(), host)


@pytest.mark.parametrize(
    "make_copy",
    [
        lambda x: x.copy(),
        lambda x: x + 1,
        lambda x: x.astype("float64"),
        lambda x: gp.sum(x, axis=0),
        lambda x: x.T.reshape(-1),  # not a view: reshape copies
        lambda x: x.flatten(),
    ],
)
def test_new_arrays_computed_from_a_read_only_one_are_writeable(
    frozen: tuple[gp.GPUArray, np.ndarray], make_copy: Callable[[gp.GPUArray], gp.GPUArray]
) -> None:
    x, _ = frozen
    y = make_copy(x)
    assert y.flags.writeable is True
    y[...] = 1
    assert np.all(y.to_numpy() == 1)


def test_reads_of_a_read_only_array_work(frozen: tuple[gp.GPUArray, np.ndarray]) -> None:
    x, host = frozen
    np.testing.assert_allclose((x * 2).to_numpy(), host * 2, rtol=1e-6)
    np.testing.assert_allclose(gp.sum(x, axis=1).to_numpy(), host.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose((x @ x.T).to_numpy(), host @ host.T, rtol=1e-4, atol=1e-4)
    y = gp.empty(x.shape, "float32")
    y[...] = x  # a read-only source is fine
    np.testing.assert_array_equal(y.to_numpy(), host)


def test_broadcast_views_are_read_only(rand: Callable[..., np.ndarray]) -> None:
    row = gp.from_numpy(rand((5,)))
    wide = row.broadcast_to((3, 5))
    assert wide.flags.writeable is False
    assert gp.broadcast_to(row, (2, 5)).flags.writeable is False
    assert row.flags.writeable is True  # the source stays writeable
    for write in (lambda: wide.__setitem__(..., 1.0), lambda: gp.add(row, row, out=wide)):
        with pytest.raises(ReadOnlyArrayError, match="broadcast_to"):
            write()
    with pytest.raises(ValueError, match="cannot be made writeable"):
        wide.setflags(write=True)


def test_flags_spellings(rand: Callable[..., np.ndarray]) -> None:
    x = gp.from_numpy(rand((2, 3)))
    assert x.flags.writeable and x.flags["WRITEABLE"] and x.flags["W"]
    assert x.flags.c_contiguous and not x.T.flags.c_contiguous
    x.setflags(write=True)  # already writeable: nothing changes
    x.setflags()  # NumPy's no-op
    assert x.flags.writeable
    x.flags.writeable = False
    assert not x.flags.writeable and not x.flags["WRITEABLE"]
    assert "WRITEABLE : False" in repr(x.flags)
    with pytest.raises(KeyError, match="WRITEABLE"):
        x.flags["OWNDATA"]


def test_read_only_is_one_way(frozen: tuple[gp.GPUArray, np.ndarray]) -> None:
    x, _ = frozen
    with pytest.raises(ValueError, match="copy"):
        x.setflags(write=True)
    with pytest.raises(ValueError):
        x.flags.writeable = True
    assert not x.flags.writeable


@pytest.mark.parametrize("junk", ["no", 0, 1, None.__class__, [False]])
def test_setflags_takes_a_bool(rand: Callable[..., np.ndarray], junk: Any) -> None:
    x = gp.from_numpy(rand((3,)))
    with pytest.raises(TypeError, match="write must be a bool"):
        x.setflags(write=junk)
    assert x.flags.writeable


def test_views_taken_before_the_flag_stay_writeable(rand: Callable[..., np.ndarray]) -> None:
    # NumPy's rule: the flag belongs to the array object it is set on and its later views.
    x = gp.from_numpy(rand((4,)))
    early = x[:2]
    x.setflags(write=False)
    early[...] = 9.0
    assert np.all(x.to_numpy()[:2] == 9.0)


def test_read_only_error_is_typed(frozen: tuple[gp.GPUArray, np.ndarray]) -> None:
    x, _ = frozen
    with pytest.raises(ValueError) as info:
        x += 1
    assert isinstance(info.value, PyGPUkitError)
    assert "(4, 6)" in str(info.value) and "float32" in str(info.value)


def test_dlpack_export_of_a_read_only_array_is_refused(
    frozen: tuple[gp.GPUArray, np.ndarray],
) -> None:
    x, _ = frozen
    with pytest.raises(BufferError, match="read-only"):
        x.__dlpack__()


def test_a_read_only_numpy_producer_stays_read_only(rand: Callable[..., np.ndarray]) -> None:
    if gp.backend_name() != "cpu":
        pytest.skip("the CPU backend imports host DLPack producers")
    host = rand((3, 2))
    host.flags.writeable = False
    x = gp.from_dlpack(host)
    assert x.flags.writeable is False
    with pytest.raises(ReadOnlyArrayError):
        x[0] = 1.0


@pytest.mark.gpu
def test_cuda_array_interface_marks_read_only(frozen: tuple[gp.GPUArray, np.ndarray]) -> None:
    x, _ = frozen
    assert x.__cuda_array_interface__["data"][1] is True
    assert x.copy().__cuda_array_interface__["data"][1] is False

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

#: Every runtime dtype (tests/runtime/test_dtypes.py pins the list itself).
DTYPES = list(gp.dtypes.SUPPORTED)


def test_empty_has_shape_dtype_and_default_float32() -> None:
    a = gp.empty((3, 4))
    assert a.shape == (3, 4)
    assert a.dtype == gp.float32
    assert a.strides == (16, 4)
    assert gp.empty(5, dtype="int16").shape == (5,)
    assert gp.empty((), dtype="uint8").shape == ()
    assert gp.empty((0, 3)).size == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeros_ones_full(dtype: str) -> None:
    dt = gp.dtypes.normalize(dtype)
    np.testing.assert_array_equal(gp.zeros((2, 3), dtype).to_numpy(), np.zeros((2, 3), dt))
    np.testing.assert_array_equal(gp.ones((4,), dtype).to_numpy(), np.ones((4,), dt))
    np.testing.assert_array_equal(gp.full((2, 2), 3, dtype).to_numpy(), np.full((2, 2), 3, dt))
    assert gp.zeros((2,), dtype).dtype == dt


def test_full_infers_dtype_from_value() -> None:
    assert gp.full((2,), 7).dtype == gp.int64
    assert gp.full((2,), 1.5).dtype == gp.float32
    assert gp.full((2,), True).dtype == gp.bool_
    assert gp.full((2,), np.float16(2.5)).dtype == gp.float16
    np.testing.assert_array_equal(gp.full((3,), -2.25).to_numpy(), np.full(3, -2.25, np.float32))


def test_like_functions(rand) -> None:
    host = rand((3, 5), np.int16)
    a = gp.from_numpy(host)
    for fn, ref in ((gp.zeros_like, np.zeros_like), (gp.ones_like, np.ones_like)):
        out = fn(a)
        assert out.shape == a.shape and out.dtype == a.dtype
        np.testing.assert_array_equal(out.to_numpy(), ref(host))
    np.testing.assert_array_equal(gp.full_like(a, 9).to_numpy(), np.full_like(host, 9))
    e = gp.empty_like(a, dtype="float32", shape=(2,))
    assert e.shape == (2,) and e.dtype == gp.float32
    assert gp.zeros_like(host).dtype == gp.int16  # NumPy arrays are accepted too


@pytest.mark.parametrize(
    ("args", "dtype"),
    [
        ((10,), None),
        ((2, 11, 3), None),
        ((5, -7, -2), None),
        ((0.5, 3.0, 0.25), None),
        ((1, 2, 0.1), "float64"),
        ((-3, 3), "int8"),
        ((0, 20, 3), "bfloat16"),
        ((0,), None),
        ((4, 2), None),
    ],
)
def test_arange_matches_numpy(args, dtype) -> None:
    out = gp.arange(*args, dtype=dtype)
    expected = np.arange(*args, dtype=gp.dtypes.normalize(dtype) if dtype else None)
    if dtype is None and expected.dtype == np.float64:
        expected = expected.astype(np.float32)  # PyGPUkit's default float
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize(("num", "endpoint"), [(50, True), (7, False), (1, True), (0, True)])
def test_linspace(num, endpoint) -> None:
    out = gp.linspace(-1.5, 2.0, num, endpoint=endpoint, dtype="float64")
    np.testing.assert_array_equal(out.to_numpy(), np.linspace(-1.5, 2.0, num, endpoint=endpoint))
    assert gp.linspace(0, 1, 5).dtype == gp.float32


@pytest.mark.parametrize(
    ("n", "m", "k"), [(3, None, 0), (4, 6, 1), (5, 3, -2), (3, 3, 5), (2, 4, -3)]
)
def test_eye(n, m, k) -> None:
    np.testing.assert_array_equal(
        gp.eye(n, m, k, dtype="int32").to_numpy(), np.eye(n, m, k, dtype=np.int32)
    )


def test_from_numpy_and_asarray(rand) -> None:
    host = rand((4, 3), np.float64)
    a = gp.from_numpy(host)
    host_copy = host.copy()
    host[0, 0] = 1234.0  # from_numpy copied: later host writes do not leak in
    np.testing.assert_array_equal(a.to_numpy(), host_copy)
    assert gp.asarray(a) is a
    assert gp.asarray(a, dtype="float64") is a
    assert gp.asarray(a, dtype="float32").dtype == gp.float32
    np.testing.assert_array_equal(gp.asarray([[1, 2], [3, 4]]).to_numpy(), [[1, 2], [3, 4]])
    assert gp.asarray([1.0, 2.0]).dtype == gp.float64  # NumPy's inference is kept
    assert gp.asarray([1, 2], dtype="bf16").dtype == gp.bfloat16
    big_endian = host.astype(">f8")
    np.testing.assert_array_equal(gp.from_numpy(big_endian).to_numpy(), host)
    assert gp.from_numpy(np.float32(2.5)).shape == ()


def test_to_numpy_asnumpy_array_protocol(rand) -> None:
    host = rand((2, 5))
    a = gp.from_numpy(host)
    for out in (gp.to_numpy(a), gp.asnumpy(a), np.asarray(a), a.get(), np.array(a)):
        np.testing.assert_array_equal(out, host)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(gp.asnumpy([1, 2]), [1, 2])
    with pytest.raises(ValueError, match="without a copy"):
        a.__array__(copy=False)

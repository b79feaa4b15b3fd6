"""Arrays on the GPU against NumPy: round trips, strided views, copies, fill, astype, arange."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

#: Every runtime dtype (tests/runtime/test_dtypes.py pins the list itself).
DTYPES = list(gp.dtypes.SUPPORTED)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(make, dtype):
    host = make((37, 129), dtype)
    x = gp.from_numpy(host)
    assert x.dtype == gp.dtypes.normalize(dtype)
    back = x.to_numpy()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back, host)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views_round_trip(make, dtype):
    host = make((24, 40, 6), dtype)
    x = gp.from_numpy(host)
    views = [
        (x[::2, 3:37:3, ::-1], host[::2, 3:37:3, ::-1]),
        (x.transpose(2, 0, 1), host.transpose(2, 0, 1)),
        (x[-1:2:-5, :, 1], host[-1:2:-5, :, 1]),
        (x.T[::-2], host.T[::-2]),
    ]
    for view, expected in views:
        np.testing.assert_array_equal(view.to_numpy(), expected)
        np.testing.assert_array_equal(view.contiguous().to_numpy(), expected)
        np.testing.assert_array_equal(view.copy().to_numpy(), expected)


def test_non_contiguous_host_source(make):
    host = make((64, 64), "float32")[::3, ::-2]
    np.testing.assert_array_equal(gp.from_numpy(host).to_numpy(), host)


def test_async_copy_with_pinned_staging(make):
    stream = gp.Stream()
    arrays = []
    hosts = [make((1000, 33), "float32") for _ in range(4)]
    for h in hosts:
        arrays.append(gp.from_numpy(h, stream=stream))
        h_copy = h.copy()
        h[...] = 0  # the source may be reused as soon as from_numpy returns
        h[...] = h_copy
    stream.synchronize()
    for h, a in zip(hosts, arrays, strict=True):
        np.testing.assert_array_equal(a.to_numpy(), h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_assignment_and_fill(make, dtype):
    host = make((50, 30), dtype)
    x = gp.from_numpy(host)
    value = make((1,), dtype)[0]
    x[::3, 1::4] = value
    host[::3, 1::4] = value
    np.testing.assert_array_equal(x.to_numpy(), host)
    patch = make((10, 5), dtype)
    x[5:25:2, ::-6] = gp.from_numpy(patch)
    host[5:25:2, ::-6] = patch
    np.testing.assert_array_equal(x.to_numpy(), host)


@pytest.mark.parametrize("n", [0, 1, 7, 16, 1000, 4097])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8", "bfloat16"])
def test_full_contiguous(n, dtype):
    x = gp.full((n,), 3, dtype=dtype)
    np.testing.assert_array_equal(x.to_numpy(), np.full((n,), 3, dtype=gp.dtypes.normalize(dtype)))


def test_fill_unaligned_offset():
    x = gp.zeros((1001,), dtype="int8")
    x[3:] = 5
    expected = np.zeros(1001, np.int8)
    expected[3:] = 5
    np.testing.assert_array_equal(x.to_numpy(), expected)


@pytest.mark.parametrize("src", DTYPES)
def test_astype_all_pairs(make, src):
    host = make((300,), src)
    x = gp.from_numpy(host)
    for dst in DTYPES:
        if gp.dtypes.normalize(dst).kind in "iub" and gp.dtypes.is_floating(
            gp.dtypes.normalize(src)
        ):
            # Float -> integer is defined for in-range values only (NumPy and CUDA differ
            # outside): integral, non-negative for unsigned targets.
            source = np.trunc(host.astype(np.float64)).clip(-100, 100)
            if dst in ("uint8", "bool"):
                source = np.abs(source)
            source = source.astype(src)
            y = gp.from_numpy(source).astype(dst)
            expected = source.astype(gp.dtypes.normalize(dst))
        else:
            y = x.astype(dst)
            expected = host.astype(gp.dtypes.normalize(dst))
        np.testing.assert_array_equal(y.to_numpy(), expected, err_msg=f"{src} -> {dst}")


def test_astype_strided(make):
    host = make((40, 40), "float32")
    x = gp.from_numpy(host)[::2, ::-3]
    np.testing.assert_array_equal(
        x.astype("float16").to_numpy(), host[::2, ::-3].astype(np.float16)
    )


@pytest.mark.parametrize(
    "dtype",
    ["float64", "float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "int16"],
)
def test_arange(dtype):
    np_dt = gp.dtypes.normalize(dtype)
    got = gp.arange(0, 100, 3, dtype=dtype).to_numpy()
    np.testing.assert_array_equal(got, np.arange(0, 100, 3).astype(np_dt))


def test_arange_large_int64_is_exact():
    start = 2**60 + 1
    got = gp.arange(start, start + 10, dtype="int64").to_numpy()
    np.testing.assert_array_equal(got, np.arange(start, start + 10, dtype=np.int64))


def test_device_to_device_copy_between_layouts(make):
    host = make((16, 32), "int32")
    a = gp.from_numpy(host)
    b = gp.zeros((32, 16), dtype="int32")
    b[...] = a.T
    np.testing.assert_array_equal(b.to_numpy(), host.T)


@pytest.mark.skipif("gp.device_count() < 2")
def test_cross_device_copy(make):
    host = make((100, 7), "float32")
    a = gp.from_numpy(host, device=0)
    b = a.to_device(1)
    np.testing.assert_array_equal(b.to_numpy(), host)
    np.testing.assert_array_equal(a[::2].to_device(1).to_numpy(), host[::2])


def test_device_info_fields():
    info = gp.get_device_info()
    for key in (
        "name",
        "sm",
        "sm_count",
        "total_memory",
        "l2_cache_bytes",
        "shared_mem_per_block",
        "shared_mem_per_sm",
        "clock_khz",
        "driver_version",
    ):
        assert key in info
    assert tuple(info["sm"]) >= (8, 0)

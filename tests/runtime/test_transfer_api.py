"""Evictable arrays, asynchronous transfers and pinned host arrays: the API on every backend."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory


def test_evictable_is_opt_in_reported_and_shared_by_views(rng) -> None:
    host = rng.standard_normal((6, 5)).astype(np.float32)
    plain = gp.empty((6, 5))
    spillable = gp.empty((6, 5), dtype="float16", evictable=True)
    uploaded = gp.from_numpy(host, evictable=True)
    assert not plain.evictable
    assert not gp.from_numpy(host).evictable
    assert spillable.evictable and spillable.dtype == np.float16
    assert uploaded.evictable
    assert uploaded[1:, ::2].evictable and uploaded.T.evictable, "views share the buffer"
    np.testing.assert_array_equal(uploaded.to_numpy(), host)


def test_evictable_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        gp.empty(*((2,), "float32", None, None, True))


def test_async_to_numpy_returns_a_future_of_the_data(rng) -> None:
    host = rng.standard_normal((3, 1000)).astype(np.float32)
    arr = gp.from_numpy(host)
    stream = gp.Stream()
    future = arr[:, 1::3].to_numpy(stream=stream, blocking=False)
    assert isinstance(future, Future)
    got = future.result(timeout=60)
    assert isinstance(got, np.ndarray) and got.flags.c_contiguous
    np.testing.assert_array_equal(got, host[:, 1::3])
    blocking = arr.to_numpy()
    assert isinstance(blocking, np.ndarray)
    np.testing.assert_array_equal(blocking, host)


def test_async_upload_reads_the_host_array_before_returning(rng) -> None:
    host = rng.integers(-1000, 1000, size=(257, 33)).astype(np.int32)
    expected = host.copy()
    stream = gp.Stream()
    arr = gp.from_numpy(host, stream=stream)
    host[:] = 0  # may be reused at once
    np.testing.assert_array_equal(arr.to_numpy(stream=stream), expected)


def test_pinned_empty_is_a_writable_numpy_array_from_the_pool(rng) -> None:
    memory.pinned_empty(1)  # the pools exist (on CUDA: the backend is registered) ...
    memory.empty_cache()  # ... and hold no cached pinned buffer this request could reuse
    before = memory.stats()["pinned_reserved_bytes"]
    pinned = memory.pinned_empty((4, 300), "float64")
    assert isinstance(pinned, np.ndarray)
    assert pinned.shape == (4, 300) and pinned.dtype == np.float64 and pinned.flags.writeable
    assert memory.stats()["pinned_reserved_bytes"] >= before + pinned.nbytes
    data = rng.standard_normal((4, 300))
    pinned[...] = data
    np.testing.assert_array_equal(gp.from_numpy(pinned).to_numpy(), data)
    assert memory.pinned_empty(7).dtype == np.float32
    assert memory.pinned_empty((0, 3), "int8").shape == (0, 3)


def test_stats_report_transfer_staging() -> None:
    assert "transfer_staging_bytes" in memory.stats()

"""The Rust memory pool under real CUDA: reuse, limits, eviction, transfers and pinned memory.

Every array here is a GPUArray (``_native`` -> C API -> ``pygpukit._rust``
pool -> the CUDA backend), so these exercise the path users take.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory
from pygpukit.backend import select

pytestmark = pytest.mark.gpu

MIB = 1 << 20
GIB = 1 << 30

SCALE = """
extern "C" __global__ void affine(float* x, float a, float b, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}
"""


def _in_use() -> tuple[int, int]:
    s = memory.stats(0)
    return s["allocated_bytes"], s["reserved_bytes"]


def test_million_mixed_size_cycles_end_with_nothing_in_use(fresh_pool, rng) -> None:
    """1,000,000 alloc/free cycles of GPUArrays (512 B to 17 MiB, up to 48 alive at once)."""
    allocated_before, _ = _in_use()
    sizes = [512, 3000, 65536, 300000, MIB, 3 * MIB, 17 * MIB]
    cycles = 1_000_000
    picks = rng.integers(0, 1 << 30, size=(2 * cycles, 2)).tolist()
    live: list[gp.GPUArray] = []
    allocs = frees = 0
    for a, b in picks:
        if frees == cycles:
            break
        if allocs < cycles and (not live or (len(live) < 48 and a % 3 != 0)):
            live.append(gp.empty((sizes[b % len(sizes)],), dtype="uint8"))
            allocs += 1
        else:
            live.pop(b % len(live))
            frees += 1
    live.clear()
    assert (allocs, frees) == (cycles, cycles), f"ran {allocs} allocations and {frees} frees"
    s = memory.stats(0)
    assert s["allocated_bytes"] == allocated_before, (
        f"{s['allocated_bytes'] - allocated_before} bytes still in use after every array was "
        f"freed (active_blocks={s['active_blocks']})"
    )
    assert s["reserved_bytes"] <= 2 * s["peak_allocated_bytes"], (
        f"reserved {s['reserved_bytes'] / MIB:.1f} MiB is more than twice the peak in use "
        f"{s['peak_allocated_bytes'] / MIB:.1f} MiB: the pool fragments or leaks segments"
    )


def _check_under_limit(what: str, baseline: tuple[int, int]) -> None:
    allocated, reserved = (now - before for now, before in zip(_in_use(), baseline, strict=True))
    assert allocated <= 2 * GIB and reserved <= 2 * GIB, (
        f"{what}: {allocated / GIB:.3f} GiB in use, {reserved / GIB:.3f} GiB reserved under a "
        "2 GiB budget"
    )


def _check_intact(
    arrays: list[gp.GPUArray], expected: list[np.ndarray], when: str, baseline: tuple[int, int]
) -> None:
    for i, (arr, want) in enumerate(zip(arrays, expected, strict=True)):
        got = arr.to_numpy()
        _check_under_limit(f"{when}, reading array {i} back", baseline)
        if not np.array_equal(got, want):
            bad = np.flatnonzero(got != want)
            pytest.fail(
                f"{when}: evictable array {i} lost its data: {bad.size} of {want.size} elements "
                f"differ, first at {bad[0]} (got {got[bad[0]]}, expected {want[bad[0]]}); "
                f"stats {memory.stats(0)}"
            )


def test_three_evictable_gib_arrays_share_a_two_gib_limit(fresh_pool, rng) -> None:
    """Each round gives every array fresh data (and a kernel with NVRTC), then checks all.

    The limit is 2 GiB on top of what earlier tests still hold (e.g. kept matmul workspaces),
    and the checks count bytes above that baseline.
    """
    baseline = _in_use()
    assert baseline[0] < 256 * MIB, f"earlier tests left {baseline[0] / MIB:.0f} MiB of arrays"
    memory.set_limit(2 * GIB + baseline[1], device=0)
    n = GIB // 4
    start = memory.stats(0)
    kernel = gp.jit(SCALE, func="affine") if gp.is_nvrtc_available() else None

    expected = [rng.random(n, dtype=np.float32) for _ in range(3)]
    arrays = []
    for i, host in enumerate(expected):
        arrays.append(gp.from_numpy(host, evictable=True))
        _check_under_limit(f"after creating evictable array {i}", baseline)
    assert all(a.evictable for a in arrays)
    _check_intact(arrays, expected, "after creation", baseline)

    for round_ in range(2):
        for i, arr in enumerate(arrays):
            expected[i] = rng.random(n, dtype=np.float32)
            # Straight into the (possibly spilled) array: GPUArray.__setitem__ would stage through
            # a temporary 1 GiB device array, which does not fit beside it under the limit.
            arr._impl.copy_from_host(expected[i])
            _check_under_limit(f"round {round_}, uploading array {i}", baseline)
            if kernel is not None:
                # The launch restores the array when the next upload spilled it. x * 2 is exact,
                # so the kernel's fused multiply-add rounds like NumPy's x * 2 + b.
                b = np.float32(rng.standard_normal())
                kernel(arr, 2.0, float(b), n)
                expected[i] = expected[i] * np.float32(2) + b
                _check_under_limit(f"round {round_}, kernel on array {i}", baseline)
        _check_intact(arrays, expected, f"after round {round_}", baseline)

    # Asynchronous download of an evictable array: a private copy (1 GiB more) under the limit.
    future = arrays[0].to_numpy(stream=gp.Stream(), blocking=False)
    assert np.array_equal(future.result(), expected[0]), "async to_numpy of an evictable array"
    _check_under_limit("after the asynchronous download", baseline)

    end = memory.stats(0)
    assert end["evictions"] > start["evictions"] and end["restores"] > start["restores"], (
        "three 1 GiB arrays under 2 GiB were all used without a spill: the limit was not applied "
        f"(evictions {start['evictions']} -> {end['evictions']}, restores {start['restores']} -> "
        f"{end['restores']})"
    )


def test_allocation_past_the_limit_raises_then_the_next_one_fits(fresh_pool) -> None:
    limit = 256 * MIB + _in_use()[1]  # on top of what earlier tests still hold
    memory.set_limit(limit, device=0)
    held = gp.empty((200 * MIB,), dtype="uint8")
    with pytest.raises(gp.OutOfMemoryError) as info:
        gp.empty((100 * MIB,), dtype="uint8")
    err = info.value
    assert err.requested >= 100 * MIB, f"requested {err.requested}"
    assert err.in_use >= 200 * MIB, f"in_use {err.in_use}"
    assert err.limit == limit, f"limit {err.limit}, set {limit}"
    assert hasattr(err, "partition"), "OutOfMemoryError names the partition (None: the pool)"
    nxt = gp.empty((40 * MIB,), dtype="uint8")
    nxt.fill(7)
    assert int(nxt[-1].item()) == 7
    del held, nxt


def test_async_upload_and_download_through_the_transfer_engine(fresh_pool, make) -> None:
    """Pageable from_numpy(stream=) and to_numpy(blocking=False): chunked, several chunks long."""
    host = make((80 * MIB // 4 + 3,), "float32")  # not a multiple of the 32 MiB chunk
    stream = gp.Stream()
    arr = gp.from_numpy(host, stream=stream)
    host_copy = host.copy()
    host[:] = 0  # the upload read the host array before from_numpy returned
    future = arr.to_numpy(stream=stream, blocking=False)
    assert np.array_equal(future.result(), host_copy)
    assert memory.stats(0)["transfer_staging_bytes"] > 0, "the transfer engine staged nothing"


def test_large_blocking_to_numpy_goes_through_the_pinned_pipeline(fresh_pool, make) -> None:
    """Blocking to_numpy of 1 MiB+ into pageable memory: 16 MiB chunks through staging, exact."""
    host = make((300 * MIB // 4 + 5,), "float32")  # many chunks, a short last one
    arr = gp.from_numpy(host)
    staged = memory.stats(0)["transfer_staging_bytes"]
    assert np.array_equal(arr.to_numpy(), host)
    assert memory.stats(0)["transfer_staging_bytes"] >= staged
    assert memory.stats(0)["transfer_staging_bytes"] > 0, "the download staged nothing"
    # A strided view and an evictable array take the same path (packed / private copy first).
    view = arr[1::3]
    assert np.array_equal(view.to_numpy(), host[1::3])
    ev = gp.from_numpy(host[: 5 * MIB], evictable=True)
    assert np.array_equal(ev.to_numpy(), host[: 5 * MIB])
    # The download is ordered after work on the array's stream.
    stream = gp.Stream()
    other = gp.full(host.shape, 3.0, "float32", stream=stream)
    assert np.array_equal(other.to_numpy(stream=stream), np.full(host.shape, 3.0, np.float32))


def test_to_numpy_out_fills_pinned_and_pageable_arrays(fresh_pool, make) -> None:
    for n in (1000, 3 * MIB + 7):
        host = make((n,), "float32")
        arr = gp.from_numpy(host)
        pinned = memory.pinned_empty((n,), "float32")
        assert arr.to_numpy(out=pinned) is pinned
        assert np.array_equal(pinned, host)
        pageable = np.empty((n,), np.float32)
        assert arr.to_numpy(out=pageable) is pageable
        assert np.array_equal(pageable, host)
        later = np.empty((n,), np.float32)
        assert arr.to_numpy(blocking=False, out=later).result() is later
        assert np.array_equal(later, host)
    with pytest.raises(ValueError):
        arr.to_numpy(out=np.empty((n + 1,), np.float32))
    with pytest.raises(TypeError):
        arr.to_numpy(out=np.empty((n,), np.float64))


def test_fast_empty_takes_the_current_device_stream_and_flags(fresh_pool) -> None:
    native = select.native()
    a = native.empty((2, 3), "float16")
    assert (a.shape, a.dtype, a.device, a.evictable) == ((2, 3), "float16", gp.get_device(), False)
    stream = gp.Stream()
    b = native.empty((4,), "bfloat16", 0, stream._impl, True)
    assert (b.evictable, b.stream == stream._impl) == (True, True)
    assert native.empty((0,), "int8").nbytes == 0
    with pytest.raises(ValueError):
        native.empty((2, -1), "float32")
    with pytest.raises(TypeError):
        native.empty((2,), "complex64")
    before = memory.stats(0)["alloc_count"]
    del a
    for _ in range(100):  # cached blocks: the no-wait fast path
        gp.empty((1 << 18,), "uint8")
    assert memory.stats(0)["alloc_count"] >= before + 100


def test_pinned_empty_is_pinned_pool_memory_and_round_trips(fresh_pool, make) -> None:
    before = memory.stats(0)["pinned_reserved_bytes"]
    pinned = memory.pinned_empty((1000, 250), "float32")
    assert memory.stats(0)["pinned_reserved_bytes"] >= before + pinned.nbytes
    pinned[...] = make((1000, 250), "float32")
    arr = gp.from_numpy(pinned)
    assert np.array_equal(arr.to_numpy(), pinned)


def test_arrays_last_used_on_a_foreign_stream_outlive_the_stream(fresh_pool, make) -> None:
    """A stream created and destroyed by someone else (as PyTorch would) never reaches the pool.

    The array's block is freed onto a runtime stream ordered after the foreign one; were the
    pool given the foreign handle, the allocations below would record fences on a destroyed
    stream and fail.
    """
    libcuda = ctypes.CDLL("libcuda.so.1")
    native = select.native()
    gp.empty((1,)).fill(0)  # binds the device's primary context to this thread
    handle = ctypes.c_void_p()
    assert libcuda.cuStreamCreate(ctypes.byref(handle), 1) == 0, "cuStreamCreate"
    foreign = gp.Stream._from_impl(native.Stream.wrap(handle.value or 0, 0))
    host = make((MIB,), "float32")
    arr = gp.from_numpy(host, stream=foreign)
    assert np.array_equal(arr.to_numpy(stream=foreign), host)
    del arr
    gc.collect()
    assert libcuda.cuStreamSynchronize(handle) == 0, "cuStreamSynchronize"
    assert libcuda.cuStreamDestroy_v2(handle) == 0, "cuStreamDestroy"
    del foreign
    # Same size class on other streams: the pool reuses the freed block after polling fences.
    others = [gp.empty((MIB,), dtype="float32", stream=gp.Stream()) for _ in range(64)]
    for o in others:
        o.fill(2.0)
    assert float(others[-1][0].item()) == 2.0
    gp.synchronize()


def test_evictable_arrays_are_refused_in_graph_capture_which_survives(fresh_pool, make) -> None:
    """A graph bakes addresses in; the pool may move an evictable array between replays."""
    host = make((4096,), "float32")
    spillable = gp.from_numpy(host, evictable=True)
    plain = gp.from_numpy(host)
    stream = gp.Stream()
    with stream, gp.graph_capture() as graph:
        with pytest.raises(ValueError, match="graph capture"):
            spillable.fill(1.0)
        plain.fill(2.0)
    graph.replay(stream)
    stream.synchronize()
    np.testing.assert_array_equal(plain.to_numpy(), np.full(4096, 2.0, np.float32))
    np.testing.assert_array_equal(spillable.to_numpy(), host)


def test_large_pageable_upload_is_intact_and_ordered_before_the_consumer(fresh_pool, make) -> None:
    """from_numpy(stream=) of ~300 MiB: chunks staged and enqueued by several threads at once.

    Every byte lands (checked at the start, chunk seams, the odd tail and in full), and a
    kernel on the consumer stream, queued right after the call, reads the uploaded data.
    """
    n = 300 * MIB // 4 + 7  # many 4 MiB chunks and a short last one
    host = make((n,), "float32")
    stream = gp.Stream()
    arr = gp.from_numpy(host[1:], stream=stream)  # a misaligned host start too
    expected = host[1:].astype(np.float64) * 2.0 + 1.0
    if gp.is_nvrtc_available():
        gp.jit(SCALE, "affine")(arr, 2.0, 1.0, arr.size, stream=stream)
    else:
        expected = host[1:].astype(np.float64)
    got = arr.to_numpy(stream=stream)
    chunk = 4 * MIB // 4
    for at in (0, chunk - 1, chunk, 5 * chunk + 3, n - 2):
        assert got[at] == np.float32(expected[at]), f"element {at}"
    assert np.array_equal(got, expected.astype(np.float32))

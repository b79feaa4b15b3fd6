"""gp.memory on the host pool (the CPU path).

Limits, OOM then recovery, stats, snapshot, MemoryPool quotas and eviction.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
from leak_checks import module_level_arrays

from pygpukit import memory
from pygpukit.errors import OutOfMemoryError

HOST = memory.HOST_DEVICE
MIB = 1 << 20


@pytest.fixture(autouse=True)
def no_limit() -> Iterator[None]:
    """Each test starts and ends without a host limit and with an empty cache."""
    memory.set_limit(None, device=HOST)
    gc.collect()
    memory.empty_cache(HOST)
    yield
    memory.set_limit(None, device=HOST)
    gc.collect()
    memory.empty_cache(HOST)


def _ran_alone(name: str) -> bool:
    """Run this file's test ``name`` in a fresh interpreter and return True; False inside it.

    The limit and statistics tests need the host pool to themselves. A test worker runs many
    files in one process (``--dist loadfile``), and whatever an earlier file still references
    (a fixture's result, a traceback kept by the test runner, a cycle not yet collected) holds
    pool blocks there, so these tests cannot assume an idle pool in the suite's process.
    """
    if os.environ.get("PGK_TEST_ALONE") == name:
        _pool_to_itself()
        return False
    env = dict(os.environ, PGK_TEST_ALONE=name)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           f"{__file__}::{name}"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-4000:]
    return True


def _pool_to_itself() -> None:
    """In the fresh interpreter nothing may hold a block yet; a module-level device array of
    the library would (for the life of the process), and is named here."""
    held = memory.stats(HOST)["allocated_bytes"]
    assert held == 0, (
        f"{held} bytes of the host pool are held in a fresh interpreter; module-level "
        f"arrays: {module_level_arrays()}"
    )


def test_host_buffer_is_pool_memory_holding_data() -> None:
    rng = np.random.default_rng()
    before = memory.stats(HOST)
    data = rng.standard_normal(100_000).astype(np.float32)
    buf = memory.host_buffer(data.nbytes)
    assert buf.dtype == np.uint8 and buf.shape == (data.nbytes,) and buf.flags.writeable
    view = buf.view(np.float32)
    view[:] = data
    np.testing.assert_array_equal(view, data)
    during = memory.stats(HOST)
    assert during["allocated_bytes"] - before["allocated_bytes"] >= data.nbytes
    assert during["alloc_count"] == before["alloc_count"] + 1
    del buf, view
    gc.collect()
    after = memory.stats(HOST)
    assert after["allocated_bytes"] == before["allocated_bytes"]
    assert after["free_count"] == before["free_count"] + 1


def test_limit_raises_out_of_memory_then_recovers() -> None:
    if _ran_alone("test_limit_raises_out_of_memory_then_recovers"):
        return
    memory.set_limit(8 * MIB, device=HOST)
    assert memory.get_limit(HOST) == 8 * MIB
    held = memory.host_buffer(6 * MIB)
    held[:] = np.random.default_rng().integers(0, 256, held.size, dtype=np.uint8)
    with pytest.raises(OutOfMemoryError) as info:
        memory.host_buffer(4 * MIB)
    err = info.value
    assert err.requested == 4 * MIB
    assert err.limit == 8 * MIB
    assert err.in_use >= 6 * MIB
    assert memory.stats(HOST)["oom_count"] >= 1
    small = memory.host_buffer(MIB)  # under the limit: succeeds right after the failure
    assert small.size == MIB
    assert memory.stats(HOST)["reserved_bytes"] <= 8 * MIB
    del held
    gc.collect()
    again = memory.host_buffer(4 * MIB)  # fits once the 6 MiB block is back in the pool
    assert again.size == 4 * MIB


def test_limit_forms_and_invalid_values() -> None:
    memory.set_limit(0.25, device=HOST)
    quarter = memory.get_limit(HOST)
    memory.set_limit(0.5, device=HOST)
    half = memory.get_limit(HOST)
    assert quarter is not None and half is not None and quarter > 0
    assert abs(half - 2 * quarter) <= 2
    memory.set_limit("8MiB", device=HOST)
    assert memory.get_limit(HOST) == 8 * MIB
    for bad in (1.5, 0.0, -1):
        with pytest.raises(ValueError):
            memory.set_limit(bad, device=HOST)
    with pytest.raises(TypeError):
        memory.set_limit(True, device=HOST)
    with pytest.raises(ValueError):
        memory.set_limit("lots", device=HOST)
    memory.set_limit(None, device=HOST)
    assert memory.get_limit(HOST) is None
    assert "limit_bytes" not in memory.stats(HOST)


def test_parse_size_reads_sizes_as_set_limit_does() -> None:
    assert memory.parse_size("8MiB") == 8 * MIB and memory.parse_size("2GB") == 2 * 10**9
    assert memory.parse_size(" 512 KiB ") == 512 * 1024 and memory.parse_size("4096") == 4096
    half = memory.parse_size("0.5")
    assert isinstance(half, float) and half == 0.5
    for bad in ("lots", "1.5", "8 parsecs", ""):
        with pytest.raises(ValueError):
            memory.parse_size(bad)


def test_stats_track_peaks_and_empty_cache_releases_segments() -> None:
    if _ran_alone("test_stats_track_peaks_and_empty_cache_releases_segments"):
        return
    rng = np.random.default_rng()
    sizes = rng.integers(1, 3 * MIB, 20)
    bufs = [memory.host_buffer(int(n)) for n in sizes]
    s = memory.stats(HOST)
    assert s["peak_allocated_bytes"] >= int(sizes.sum())
    assert s["reserved_bytes"] >= s["allocated_bytes"] >= int(sizes.sum())
    assert s["cached_bytes"] == s["reserved_bytes"] - s["allocated_bytes"]
    del bufs
    gc.collect()
    assert memory.stats(HOST)["allocated_bytes"] == 0
    released = memory.empty_cache(HOST)
    assert released > 0
    s = memory.stats(HOST)
    assert s["reserved_bytes"] == 0 and s["segment_free_count"] >= 1


def test_snapshot_lists_live_blocks_and_free_ranges() -> None:
    buf = memory.host_buffer(5000)
    address = buf.__array_interface__["data"][0]
    entries = memory.snapshot(HOST)
    mine = [e for e in entries if e["address"] == address and e["state"] == "allocated"]
    assert len(mine) == 1
    entry = mine[0]
    assert entry["size"] >= 5000 and entry["requested"] == 5000 and entry["age_s"] >= 0
    assert entry["device"] == HOST and entry["id"] != 0
    assert any(e["state"] == "free" for e in entries), "the rest of the segment is cached"


def test_memory_pool_quota_names_the_pool() -> None:
    pool = memory.MemoryPool(quota=4 * MIB, name="decoder", device=HOST)
    assert (pool.quota, pool.enable_eviction, pool.name) == (4 * MIB, False, "decoder")
    block = pool.allocate(3 * MIB)
    assert block.size >= 3 * MIB and block.id != 0
    arr = np.asarray(block)
    payload = np.random.default_rng().integers(0, 256, arr.size, dtype=np.uint8)
    arr[:] = payload
    assert pool.stats()["allocated_bytes"] == block.size
    assert pool.stats()["quota_bytes"] == 4 * MIB
    with pytest.raises(OutOfMemoryError) as info:
        pool.allocate(2 * MIB)
    assert info.value.partition == "decoder"
    assert info.value.limit == 4 * MIB
    other = memory.host_buffer(2 * MIB)  # other allocations are not held to the pool's quota
    assert other.size == 2 * MIB
    np.testing.assert_array_equal(np.asarray(block), payload)
    del arr
    block.free()
    with pytest.raises(ValueError):
        block.free()
    assert pool.stats()["allocated_bytes"] == 0
    assert pool.allocate(2 * MIB).size >= 2 * MIB
    assert pool.stats()["peak_allocated_bytes"] >= 3 * MIB
    with pytest.raises(TypeError, match=r"gp\.Stream or an int"):
        pool.allocate(MIB, stream="main")


def test_memory_pool_takes_a_stream_object() -> None:
    import pygpukit as gp

    pool = memory.MemoryPool(quota=4 * MIB, device=HOST)
    block = pool.allocate(MIB, stream=gp.Stream())
    assert block.size >= MIB
    block.free()


def test_evictable_pool_spills_least_recently_used_and_restores_data() -> None:
    pool = memory.MemoryPool(quota=4 * MIB, enable_eviction=True, device=HOST)
    rng = np.random.default_rng()
    blocks, payloads = [], []
    for _ in range(3):  # three 2 MiB blocks under a 4 MiB quota
        block = pool.allocate(2 * MIB)
        payload = rng.integers(0, 256, 2 * MIB, dtype=np.uint8)
        np.asarray(block)[:] = payload  # views are short-lived: a spill moves the block
        blocks.append(block)
        payloads.append(payload)
        assert pool.stats()["allocated_bytes"] <= 4 * MIB
    before = memory.stats(HOST)
    assert before["evictions"] >= 1 and before["spilled_bytes"] >= 2 * MIB
    spilled = {e["id"] for e in memory.snapshot(HOST) if e["state"] == "evicted"}
    assert spilled == {blocks[0].id}, "the least recently used block went first"
    for _ in range(2):
        for block, payload in zip(blocks, payloads, strict=True):
            np.testing.assert_array_equal(np.asarray(block), payload)  # touch restores it
            assert pool.stats()["allocated_bytes"] <= 4 * MIB
    assert memory.stats(HOST)["restores"] > before["restores"]


def _run_with_env(value: str, code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYGPUKIT_MEMORY_LIMIT=value, PYTHONPATH=os.pathsep.join(sys.path))
    command = [sys.executable, "-W", "always", "-c", code]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True)


def test_environment_limit_is_honoured() -> None:
    code = "from pygpukit import memory; print(memory.get_limit(-1))"
    assert _run_with_env("8GiB", code).stdout.strip() == str(8 << 30)
    assert _run_with_env("12345678", code).stdout.strip() == "12345678"
    bad = _run_with_env("lots", code)
    assert bad.stdout.strip() == "None"
    assert "PYGPUKIT_MEMORY_LIMIT ignored" in bad.stderr


class _Block(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("ptr", ctypes.c_uint64), ("size", ctypes.c_uint64)]


_u64, _i32, _u32, _int = ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int
_P = ctypes.POINTER


class _Api(ctypes.Structure):
    """Mirror of pgk_api (native/include/pygpukit/rust_capi.h, version 5)."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("struct_size", ctypes.c_uint32),
        ("register_backend", ctypes.c_void_p),
        ("pool_alloc", ctypes.CFUNCTYPE(_int, _i32, _u64, _u64, _u32, _P(_Block))),
        ("pool_free", ctypes.CFUNCTYPE(None, _u64, _u64)),
        ("pool_touch", ctypes.CFUNCTYPE(_int, _u64, _u64, _P(_Block))),
        ("pool_graph_begin", ctypes.CFUNCTYPE(_int, _i32, _u64, _P(_u64))),
        ("pool_graph_end", ctypes.CFUNCTYPE(_int, _u64)),
        ("pool_graph_release", ctypes.CFUNCTYPE(None, _u64)),
        ("dispatch_begin", ctypes.CFUNCTYPE(_int, _i32, _u64, _P(_u64))),
        ("dispatch_end", ctypes.CFUNCTYPE(None, _u64, _int)),
        ("last_error", ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)),
        ("transfer_configure", ctypes.CFUNCTYPE(_int, _i32, _u64, _u64, _u64, _u64, _u32)),
        ("transfer_submit", ctypes.CFUNCTYPE(_int, _i32, _i32, _u64, _u64, _u64, _i32, _P(_u64))),
        ("transfer_stream_wait", ctypes.CFUNCTYPE(_int, _u64, _u64)),
        ("transfer_wait", ctypes.CFUNCTYPE(_int, _u64)),
        ("transfer_release", ctypes.CFUNCTYPE(None, _u64)),
        ("pool_touch_all", ctypes.CFUNCTYPE(_int, _P(_u64), ctypes.c_size_t, _u64, _P(_Block))),
    ]


def _c_api() -> _Api:
    rust = importlib.import_module("pygpukit._rust")
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get(rust._C_API, b"pygpukit._rust._C_API")
    return _Api.from_address(address)


def _last_error(api: _Api) -> str:
    buf = ctypes.create_string_buffer(512)
    api.last_error(buf, len(buf))
    return buf.value.decode()


def test_c_api_capsule_allocates_dispatches_and_transfers_on_the_host() -> None:
    api = _c_api()
    assert api.version == 5 and api.struct_size == ctypes.sizeof(_Api)
    block = _Block()
    assert api.pool_alloc(HOST, 1000, 0, 0, ctypes.byref(block)) == 0
    assert block.id != 0 and block.size >= 1000
    assert any(e["id"] == block.id for e in memory.snapshot(HOST))
    touched = _Block()
    assert api.pool_touch(block.id, 0, ctypes.byref(touched)) == 0 and touched.ptr == block.ptr
    other = _Block()
    assert api.pool_alloc(HOST, 3000, 0, 1, ctypes.byref(other)) == 0  # PGK_ALLOC_EVICTABLE
    ids, both = (_u64 * 2)(block.id, other.id), (_Block * 2)()
    assert api.pool_touch_all(ids, 2, 0, both) == 0
    assert [(b.id, b.ptr) for b in both] == [(block.id, block.ptr), (other.id, other.ptr)]
    assert api.pool_touch_all((_u64 * 1)(12345), 1, 0, both) == 4  # INVALID_ARGUMENT
    api.pool_free(other.id, 0)
    assert api.pool_alloc(5, 1000, 0, 0, ctypes.byref(_Block())) == 5  # PGK_NO_BACKEND
    memory.set_limit(4 * MIB, device=HOST)
    assert api.pool_alloc(HOST, 8 * MIB, 0, 0, ctypes.byref(_Block())) == 2  # LIMIT_EXCEEDED
    assert "requested 8388608 bytes" in _last_error(api)
    memory.set_limit(None, device=HOST)

    # PGK_ALLOC_NO_WAIT (2): only a cached block, else PGK_WOULD_BLOCK (6) with nothing changed.
    memory.empty_cache(HOST)
    reserved = memory.stats(HOST)["reserved_bytes"]
    assert api.pool_alloc(HOST, 40 * MIB, 0, 2, ctypes.byref(_Block())) == 6
    assert memory.stats(HOST)["reserved_bytes"] == reserved
    big = _Block()
    assert api.pool_alloc(HOST, 40 * MIB, 0, 0, ctypes.byref(big)) == 0
    api.pool_free(big.id, 0)
    again = _Block()
    assert api.pool_alloc(HOST, 40 * MIB, 0, 2, ctypes.byref(again)) == 0
    assert again.ptr == big.ptr
    api.pool_free(again.id, 0)

    ticket = ctypes.c_uint64()
    assert api.dispatch_begin(HOST, 0, ctypes.byref(ticket)) == 0
    api.dispatch_end(ticket.value, 1)

    data = np.random.default_rng().integers(0, 256, 300_000, dtype=np.uint8)
    dev = _Block()
    assert api.pool_alloc(HOST, data.nbytes, 0, 0, ctypes.byref(dev)) == 0
    status = api.transfer_configure(HOST, 1, 2, 0, 64 << 10, 2)
    assert status == 0 or "already configured" in _last_error(api)
    h2d = ctypes.c_uint64()
    assert api.transfer_submit(HOST, 0, data.ctypes.data, dev.ptr, data.nbytes, 0, h2d) == 0
    assert api.transfer_stream_wait(h2d.value, 3) == 0
    assert api.transfer_wait(h2d.value) == 0
    back = np.zeros_like(data)
    d2h = ctypes.c_uint64()
    assert api.transfer_submit(HOST, 1, back.ctypes.data, dev.ptr, data.nbytes, 0, d2h) == 0
    np.testing.assert_array_equal(back, data)
    api.transfer_release(d2h.value)
    assert api.transfer_wait(d2h.value) == 4  # released: INVALID_ARGUMENT

    api.pool_free(dev.id, 0)
    api.pool_free(block.id, 0)
    api.pool_free(block.id, 0)
    assert "already freed" in _last_error(api)

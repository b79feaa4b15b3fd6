"""Host views of pool and pinned memory never outlive it (docs/memory.md, "Host views").

The rule under test, for every way a NumPy view of host pool memory can be taken: a view keeps
its block alive (the block returns to the pool only after the last view goes), ``free()``
raises ``BufferError`` while a view exists, and a viewed evictable block is never spilled. A
write through a view therefore never lands in another allocation. The host pool exists on
every backend, so these run on the CPU backend and on the GPU machine alike.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pygpukit import memory

HOST = memory.HOST_DEVICE
KIB = 1024
MIB = 1024 * KIB

# Every way to take a host view of a pool block: each returns an object that reads and
# writes the block's bytes (as a flat uint8 NumPy array, through `as_array`).
VIEWS: dict[str, Callable[[Any], Any]] = {
    "asarray": np.asarray,
    "array_copy_false": lambda b: np.array(b, copy=False),
    "asarray_uint8": lambda b: np.asarray(b, dtype=np.uint8),
    "slice": lambda b: np.asarray(b)[16:],
    "view_dtype": lambda b: np.asarray(b).view(np.uint32),
    "reshape": lambda b: np.asarray(b).reshape(16, -1),
    "memoryview": lambda b: memoryview(np.asarray(b)),
    "ctypes_from_buffer": lambda b: (ctypes.c_uint8 * (b.nbytes - 8)).from_buffer(np.asarray(b), 8),
}


def as_array(view: Any) -> np.ndarray:
    """The view's bytes as a flat uint8 array (itself a view of the same memory)."""
    return (
        np.frombuffer(view, dtype=np.uint8)
        if not isinstance(view, np.ndarray)
        else view.reshape(-1).view(np.uint8)
    )


def _payload(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(1, 256, n, dtype=np.uint8)  # never zero: a wrong byte shows


def _settled_allocated(pool: memory.MemoryPool) -> int:
    gc.collect()
    return int(pool.stats()["allocated_bytes"])


@pytest.fixture
def pool() -> memory.MemoryPool:
    """A host pool partition with room for a few blocks."""
    return memory.MemoryPool(quota=16 * MIB, name="views", device=HOST)


@pytest.mark.parametrize("way", list(VIEWS))
def test_free_refuses_while_a_view_lives(
    pool: memory.MemoryPool, rng: np.random.Generator, way: str
) -> None:
    block = pool.allocate(64 * KIB)
    view = VIEWS[way](block)
    data = as_array(view)
    payload = _payload(rng, data.size)
    data[:] = payload
    assert block.views >= 1
    with pytest.raises(BufferError, match=r"view\(s\) of it exist"):
        block.free()
    assert not block.freed and block.address != 0
    np.testing.assert_array_equal(as_array(view), payload)  # the memory is still the view's
    del view, data
    gc.collect()
    assert block.views == 0
    block.free()
    assert _settled_allocated(pool) == 0


@pytest.mark.parametrize("way", list(VIEWS))
def test_a_view_keeps_a_dropped_block_alive(
    pool: memory.MemoryPool, rng: np.random.Generator, way: str
) -> None:
    view = VIEWS[way](pool.allocate(64 * KIB))  # the block object itself is dropped at once
    gc.collect()
    data = as_array(view)
    payload = _payload(rng, data.size)
    data[:] = payload
    held = _settled_allocated(pool)
    assert held >= 64 * KIB, "the viewed block is still allocated"
    # New allocations (of the same size class) get other memory: writing them all leaves the
    # view's bytes as they were.
    others = [pool.allocate(64 * KIB) for _ in range(4)]
    for other in others:
        np.asarray(other)[:] = 0xAB
    np.testing.assert_array_equal(as_array(view), payload)
    for other in others:
        other.free()
    del view, data
    assert _settled_allocated(pool) == 0, "the block went back with its last view"


@pytest.mark.parametrize("way", ["asarray", "slice", "memoryview"])
def test_a_viewed_evictable_block_is_never_spilled(rng: np.random.Generator, way: str) -> None:
    pool = memory.MemoryPool(quota=4 * MIB, enable_eviction=True, name="spill", device=HOST)
    first = pool.allocate(2 * MIB)
    view = VIEWS[way](first)
    data = as_array(view)
    payload = _payload(rng, data.size)
    data[:] = payload
    address = first.address
    # Two more 2 MiB blocks under a 4 MiB quota: the least recently used one would be spilled,
    # but it is viewed; the other one goes instead.
    second = pool.allocate(2 * MIB)
    np.asarray(second)[:] = 1
    third = pool.allocate(2 * MIB)
    states = {e["id"]: e["state"] for e in memory.snapshot(HOST)}
    assert states[first.id] == "allocated" and states[second.id] == "evicted"
    assert first.touch() == address
    np.testing.assert_array_equal(as_array(view), payload)
    del view, data
    gc.collect()
    for block in (first, second, third):
        block.free()


def test_copies_hold_nothing(pool: memory.MemoryPool, rng: np.random.Generator) -> None:
    block = pool.allocate(4 * KIB)
    np.asarray(block)[:] = _payload(rng, 4 * KIB)
    gc.collect()
    copies = [np.array(block), np.asarray(block, dtype=np.float64), np.array(block, copy=True)]
    assert block.views == 0 and all(c.base is None for c in copies)
    block.free()
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(pool.allocate(KIB), dtype=np.float32, copy=False)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: memory.host_buffer(256 * KIB), id="host_buffer"),
        pytest.param(
            lambda: memory.pinned_empty((256 * KIB // 4,), "float32").view(np.uint8),
            id="pinned_empty",
        ),
    ],
)
@pytest.mark.parametrize("derive", ["slice", "reshape", "memoryview"])
def test_arrays_over_pool_memory_hold_it(
    make: Callable[[], np.ndarray], derive: str, rng: np.random.Generator
) -> None:
    """host_buffer and pinned_empty arrays have no free(): a derived view outliving the
    original still holds the memory, which no new allocation gets meanwhile."""
    original = make()
    derived = {
        "slice": lambda a: a[100:],
        "reshape": lambda a: a.reshape(64, -1),
        "memoryview": memoryview,
    }[derive](original)
    del original
    gc.collect()
    data = as_array(derived)
    payload = _payload(rng, data.size)
    data[:] = payload
    start = data.__array_interface__["data"][0]
    for _ in range(4):
        fresh = make()
        fresh[:] = 0xCD
        lo = fresh.__array_interface__["data"][0]
        assert lo + fresh.nbytes <= start or lo >= start + data.nbytes, "memory handed out twice"
    np.testing.assert_array_equal(as_array(derived), payload)

"""CPU-backend specifics: every array buffer comes from the one allocation function."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.backend import cpu

pytestmark = pytest.mark.skipif(gp.is_cuda_available(), reason="CPU-backend internals")


@pytest.fixture
def allocations(monkeypatch) -> list[np.ndarray]:
    seen: list[np.ndarray] = []
    original = cpu._host_buffer

    def counting(nbytes: int) -> np.ndarray:
        buf = original(nbytes)
        seen.append(buf)
        return buf

    monkeypatch.setattr(cpu, "_host_buffer", counting)
    return seen


def _owned_by(arr: gp.GPUArray, buffers: list[np.ndarray]) -> bool:
    return any(cpu._buffer(arr._impl) is b for b in buffers)


def test_every_array_buffer_comes_from_host_buffer(allocations, rand) -> None:
    host = rand((4, 6))
    base = gp.from_numpy(host)
    made = [
        base,
        gp.empty((3,)),
        gp.zeros((2, 2), "int8"),
        gp.full((5,), 2.5),
        gp.arange(7),
        gp.linspace(0, 1, 9),
        gp.eye(3),
        gp.asarray([1, 2, 3]),
        base.copy(),
        base.astype("bfloat16"),
        base.T.contiguous(),
        base.T.reshape(-1),  # a reshape that must copy
        base.flatten(),
        gp.empty_like(base),
    ]
    for arr in made:
        assert _owned_by(arr, allocations), arr
    assert len(allocations) >= len(made)
    # views allocate nothing
    count = len(allocations)
    _ = base[1:, ::2].T[None, ..., 0], base.reshape(6, 4), base.broadcast_to((2, 4, 6))
    assert len(allocations) == count


def test_buffer_sizes_match_the_arrays(allocations) -> None:
    a = gp.empty((3, 5), "float64")
    assert allocations[-1].nbytes == a.nbytes == 120
    assert allocations[-1].dtype == np.uint8
    assert cpu.buffer_nbytes(a[1:, 2:]._impl) == 120
    assert cpu.offset(a[1:, 2:]._impl) == 5 * 8 + 2 * 8

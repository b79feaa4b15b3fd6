"""Argument validation of the ops package, one class of argument at a time.

Each class (read-only outputs, ...) lists its cases; every case must raise the named typed
error, naming the argument, before anything is enqueued or written. Runs on whichever backend
is active (CPU here, CUDA on the GPU machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.errors import ReadOnlyArrayError

Rand = Callable[..., np.ndarray]


def _a(rand: Rand, shape: tuple[int, ...], dtype: Any = gp.float16) -> gp.GPUArray:
    return gp.from_numpy(rand(shape).astype(np.dtype(dtype)))


def _frozen(rand: Rand, shape: tuple[int, ...], dtype: Any = gp.float16) -> gp.GPUArray:
    x = _a(rand, shape, dtype)
    x.setflags(write=False)
    return x


def _ids(values: Any, dtype: Any = np.int32) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(np.asarray(values, dtype=dtype)))


# --- read-only arrays: every op that writes into a caller's array -----------------------------
READ_ONLY_WRITES: dict[str, tuple[Callable[[Rand], Any], str]] = {
    "rmsnorm out": (
        lambda r: ops.rmsnorm(_a(r, (3, 64)), _a(r, (64,)), out=_frozen(r, (3, 64))),
        "out",
    ),
    "silu_mul out": (
        lambda r: ops.silu_mul(_a(r, (2, 64)), out=_frozen(r, (2, 32))),
        "out",
    ),
    "softmax out": (
        lambda r: ops.softmax(_a(r, (2, 16)), out=_frozen(r, (2, 16))),
        "out",
    ),
    "embedding out": (
        lambda r: ops.embedding(_ids([1, 2]), _a(r, (4, 8)), out=_frozen(r, (2, 8))),
        "out",
    ),
    "gemv out": (
        lambda r: ops.gemv(_a(r, (1, 32)), _a(r, (16, 32)), out=_frozen(r, (1, 16))),
        "out",
    ),
    "sdpa out": (
        lambda r: ops.scaled_dot_product_attention(
            _a(r, (1, 2, 4, 64)),
            _a(r, (1, 2, 4, 64)),
            _a(r, (1, 2, 4, 64)),
            out=_frozen(r, (1, 2, 4, 64)),
        ),
        "out",
    ),
    "rope inplace q": (
        lambda r: ops.apply_rope(
            _frozen(r, (3, 2, 64)),
            _a(r, (3, 1, 64)),
            *ops.rope_cos_sin(8, 64),
            _ids([0, 1, 2]),
            inplace=True,
        ),
        "q",
    ),
    "kv_cache_append cache": (
        lambda r: ops.kv_cache_append(
            _a(r, (1, 1, 2, 64)),
            _a(r, (1, 1, 2, 64)),
            _frozen(r, (1, 1, 8, 64)),
            _a(r, (1, 1, 8, 64)),
            _ids([0]),
        ),
        "k_cache",
    ),
    "paged_kv_cache_write cache": (
        lambda r: ops.paged_kv_cache_write(
            _a(r, (2, 1, 64)),
            _a(r, (2, 1, 64)),
            _a(r, (2, 1, 4, 64)),
            _frozen(r, (2, 1, 4, 64)),
            _ids([0, 5]),
        ),
        "v_cache",
    ),
}


@pytest.mark.parametrize("case", list(READ_ONLY_WRITES))
def test_ops_refuse_to_write_into_read_only_arrays(rand: Rand, case: str) -> None:
    call, name = READ_ONLY_WRITES[case]
    with pytest.raises(ReadOnlyArrayError, match=name):
        call(rand)


def test_ops_read_read_only_weights(rand: Rand) -> None:
    x = _a(rand, (3, 64), gp.float32)
    w = _frozen(rand, (64,), gp.float32)
    got = ops.rmsnorm(x, w).to_numpy()
    xf = x.to_numpy().astype(np.float64)
    want = xf / np.sqrt((xf**2).mean(-1, keepdims=True) + 1e-6) * w.to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

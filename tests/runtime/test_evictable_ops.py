"""Evictable arrays through the issue-6 ops (every backend).

On CUDA every op makes its evictable operands resident together (``make_resident``) after its
own allocations and before it reads an address; on the CPU backend the flag is only recorded.
Either way an evictable operand, output or view must give NumPy's answer. Memory pressure (a
spill between the op's allocations and its launch) is in gpu/test_gpu_evictable_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp

TOL32 = 1e-5


def _rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out64 = np.asarray(out, dtype=np.float64).ravel()
    ref64 = np.asarray(ref, dtype=np.float64).ravel()
    return float(np.linalg.norm(out64 - ref64) / (np.linalg.norm(ref64) or 1.0))


def _close(out: gp.GPUArray, ref: np.ndarray, tol: float = TOL32) -> None:
    host = out.to_numpy()
    assert host.shape == np.shape(ref)
    err = _rel_err(host, ref)
    assert err <= tol, f"relative error {err} > {tol}"


def _ev(x: np.ndarray) -> gp.GPUArray:
    a = gp.from_numpy(x, evictable=True)
    assert a.evictable
    return a


def test_elementwise_with_evictable_operands(rand: Callable[..., np.ndarray]) -> None:
    x, y = rand((37, 129)), rand((37, 129))
    a, b = _ev(x), _ev(y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    _close(a + b, x64 + y64)
    _close(a * 2.5, x64 * 2.5)
    _close(1.5 - b, 1.5 - y64)
    _close(gp.exp(a), np.exp(x64))
    _close(gp.maximum(a, b), np.maximum(x64, y64))
    _close(gp.where(a > b, a, b), np.where(x > y, x64, y64))
    # A broadcast operand and a transposed view of an evictable array.
    _close(a + _ev(y[0]), x64 + y64[0])
    _close(a.T * b.T, (x64 * y64).T)
    # Mixed: one evictable operand, one plain.
    _close(a - gp.from_numpy(y), x64 - y64)


def test_elementwise_evictable_out_and_in_place(rand: Callable[..., np.ndarray]) -> None:
    x, y = rand((4099,)), rand((4099,))
    out = gp.empty((4099,), dtype="float32", evictable=True)
    assert out.evictable
    r = gp.add(_ev(x), _ev(y), out=out)
    assert r is out
    _close(out, x.astype(np.float64) + y)
    a = _ev(x)
    a += _ev(y)
    assert a.evictable
    _close(a, x.astype(np.float64) + y)
    # An odd-offset view (no 16-byte vectors) of an evictable array.
    _close(_ev(x)[1:] * _ev(y)[:-1], x[1:].astype(np.float64) * y[:-1])


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((100_003,), None), ((64, 1000), 1), ((64, 1000), 0), ((3, 5, 33), (0, 2))],
)
def test_reductions_of_evictable_arrays(
    rand: Callable[..., np.ndarray], shape: tuple[int, ...], axis: Any
) -> None:
    x = rand(shape)
    a = _ev(x)
    x64 = x.astype(np.float64)
    _close(gp.sum(a, axis=axis), np.sum(x64, axis=axis))
    _close(gp.max(a, axis=axis), np.max(x64, axis=axis))
    _close(gp.mean(a, axis=axis), np.mean(x64, axis=axis))
    _close(gp.var(a, axis=axis), np.var(x64, axis=axis), 1e-4)
    if axis is None or isinstance(axis, int):
        ref = np.argmax(x, axis=axis)
        np.testing.assert_array_equal(gp.argmax(a, axis=axis).to_numpy(), ref)


def test_softmax_cumsum_take_of_evictable_arrays(rand: Callable[..., np.ndarray]) -> None:
    x = rand((33, 257))
    a = _ev(x)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    _close(gp.softmax(a, axis=1), e / e.sum(axis=1, keepdims=True))
    _close(gp.cumsum(a, axis=1), np.cumsum(x64, axis=1))
    # A long row: the segmented scan (several launches over the same operands).
    long_row = rand((300_001,))
    _close(gp.cumsum(_ev(long_row)), np.cumsum(long_row.astype(np.float64)), 1e-4)
    idx = np.array([5, 0, 256, 17, 17], dtype=np.int64)
    _close(gp.take(a, _ev(idx), axis=1, mode="wrap"), np.take(x64, idx, axis=1))
    _close(gp.take(a, idx[idx < 33], axis=0), np.take(x64, idx[idx < 33], axis=0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_of_evictable_arrays(gemm: str, rand: Callable[..., np.ndarray], dtype: str) -> None:
    x, y = rand((96, 136), dtype), rand((136, 72), dtype)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    tol = TOL32 if dtype == "float32" else 1e-2
    a, b = _ev(x), _ev(y)
    _close(a @ b, x64 @ y64, tol)
    # A transposed evictable view (read in place by cuBLASLt, column-major) and a batch.
    bt = _ev(np.ascontiguousarray(y.T))
    _close(a @ bt.T, x64 @ y64, tol)
    out = gp.empty((96, 72), dtype=dtype, evictable=True)
    gp.matmul(a, b, out=out)
    _close(out, x64 @ y64, tol)
    z = rand((3, 40, 24), dtype)
    w = rand((3, 24, 56), dtype)
    _close(_ev(z) @ _ev(w), z.astype(np.float64) @ w.astype(np.float64), tol)

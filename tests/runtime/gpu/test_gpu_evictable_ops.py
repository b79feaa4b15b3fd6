"""Evictable operands of the issue-6 ops under memory pressure (real CUDA).

A device limit a little above what one op needs, and more evictable arrays than fit under it:
the op's own allocations (output, partials, the cuBLASLt workspace) spill operands, and the op
must make them resident together again before reading their addresses. An op that skipped
``make_resident`` raises RuntimeError (the stale-address guard) or reads moved memory.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory

pytestmark = pytest.mark.gpu

MIB = 1 << 20


def _limit_above_baseline(nbytes: int) -> None:
    """A device limit of ``nbytes`` on top of what earlier tests still hold."""
    memory.set_limit(memory.stats(0)["reserved_bytes"] + nbytes, device=0)


def _restores() -> int:
    return int(memory.stats(0)["restores"])


def _rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out64 = np.asarray(out, dtype=np.float64).ravel()
    ref64 = np.asarray(ref, dtype=np.float64).ravel()
    return float(np.linalg.norm(out64 - ref64) / (np.linalg.norm(ref64) or 1.0))


def test_add_restores_spilled_operands(fresh_pool, rng) -> None:
    n = 16 * MIB  # 64 MiB of float32 per array
    size = 4 * n
    _limit_above_baseline(size * 7 // 2)  # the op's 3 arrays fit; 4 evictable + output do not
    xs = [rng.standard_normal(n, dtype=np.float32) for _ in range(2)]
    a, b = (gp.from_numpy(x, evictable=True) for x in xs)
    fillers = [gp.from_numpy(rng.random(n, dtype=np.float32), evictable=True) for _ in range(2)]
    before = _restores()
    c = a + b  # the output spills b; making a and b resident spills the fillers
    np.testing.assert_array_equal(c.to_numpy(), xs[0] + xs[1])
    assert _restores() > before, "no operand was restored: the limit did not apply pressure"
    del c
    # Evictable output and a scalar operand, then in place.
    for f in fillers:
        f.fill(1.0)  # the fillers resident again: a and b are spilled
    out = gp.empty((n,), dtype="float32", evictable=True)
    gp.multiply(a, 3.0, out=out)
    np.testing.assert_array_equal(out.to_numpy(), xs[0] * np.float32(3.0))
    del out
    b -= a
    np.testing.assert_array_equal(b.to_numpy(), xs[1] - xs[0])
    for f in fillers:
        np.testing.assert_array_equal(f.to_numpy(), np.ones(n, np.float32))


def test_sum_restores_a_spilled_operand(fresh_pool, rng) -> None:
    n = 16 * MIB
    size = 4 * n
    _limit_above_baseline(size * 7 // 2)
    x = (rng.standard_normal(n) + 0.25).astype(np.float32)
    a = gp.from_numpy(x, evictable=True)
    fillers = [gp.from_numpy(rng.random(n, dtype=np.float32), evictable=True) for _ in range(3)]
    x64 = x.astype(np.float64)
    before = _restores()
    assert _rel_err(gp.sum(a).to_numpy(), x64.sum()) <= 1e-5
    assert _restores() > before, "the operand was not spilled: the limit did not apply pressure"
    for f in fillers:
        f.fill(2.0)  # spill `a` again before each op
    m = a.reshape(4096, n // 4096)
    assert _rel_err(gp.sum(m, axis=1).to_numpy(), x64.reshape(4096, -1).sum(axis=1)) <= 1e-5
    for f in fillers:
        f.fill(3.0)
    assert gp.max(a).to_numpy() == x.max()
    for f in fillers:
        f.fill(4.0)
    assert _rel_err(gp.var(m, axis=0).to_numpy(), x64.reshape(4096, -1).var(axis=0)) <= 1e-4
    for f in fillers:
        f.fill(5.0)
    np.testing.assert_array_equal(gp.argmax(m, axis=1).to_numpy(), x.reshape(4096, -1).argmax(1))


@pytest.mark.parametrize("backend", ["own", "cublaslt"])
def test_matmul_restores_spilled_operands(fresh_pool, rng, monkeypatch, backend: str) -> None:
    if backend == "cublaslt":
        from pygpukit.backend import cuda_linalg

        if not cuda_linalg.cublaslt_status()["loaded"]:
            pytest.skip("cuBLASLt is not installed")
    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", backend)
    monkeypatch.delenv("PYGPUKIT_ALLOW_TF32", raising=False)
    n = 2048  # 16 MiB of float32 per matrix
    size = 4 * n * n
    # a, b, the output and cuBLASLt's 32 MiB workspace fit; a, b and four fillers do not.
    _limit_above_baseline(3 * size + 32 * MIB + 8 * MIB)
    x = rng.standard_normal((n, n), dtype=np.float32)
    y = rng.standard_normal((n, n), dtype=np.float32)
    a = gp.from_numpy(x, evictable=True)
    b = gp.from_numpy(y, evictable=True)
    fillers = [
        gp.from_numpy(rng.random((n, n), dtype=np.float32), evictable=True) for _ in range(4)
    ]
    before = _restores()
    out = a @ b
    assert _restores() > before, "no operand was restored: the limit did not apply pressure"
    ref = x.astype(np.float64) @ y.astype(np.float64)
    assert _rel_err(out.to_numpy(), ref) <= 1e-5
    del out
    for f in fillers:
        f.fill(1.0)
    # A transposed evictable operand (read in place, column-major, by cuBLASLt).
    out_t = a @ b.T
    assert _rel_err(out_t.to_numpy(), x.astype(np.float64) @ y.T.astype(np.float64)) <= 1e-5

"""Shared pieces of the fused split-rotate-store tests (``test_ops_rope_kv_{append,paged}.py``).

Both ops take a fused q/k/v projection ``[..., (q_heads + 2 * kv_heads) * D]`` and differ only in
where the keys and values land (contiguous cache rows or paged blocks). The split into heads,
the float64 reference rotation and the check that unnamed cache rows kept their random values
are the same for both.
"""

from __future__ import annotations

import numpy as np
from ops_references import rope_ref

from pygpukit.array import GPUArray


def split_qkv(qkv: GPUArray, hq: int, hkv: int, d: int) -> tuple[GPUArray, GPUArray, GPUArray]:
    """q, k, v of a fused projection as contiguous ``[..., heads, D]`` arrays (three copies)."""

    def heads(first: int, count: int) -> GPUArray:
        part = qkv[..., first * d : (first + count) * d].contiguous()
        return part.reshape(*qkv.shape[:-1], count, d)

    return heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv)


def rotated_reference(
    qkv: np.ndarray, positions: np.ndarray, hq: int, hkv: int, d: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 NeoX-rotated q and k, and v as given (its dtype), each ``[..., heads, D]``."""
    heads = qkv.reshape(*qkv.shape[:-1], hq + 2 * hkv, d)
    x = heads.astype(np.float64)
    q = rope_ref(x[..., :hq, :], positions, d, "neox")
    k = rope_ref(x[..., hq : hq + hkv, :], positions, d, "neox")
    return q, k, heads[..., hq + hkv :, :]


def assert_unwritten_rows_kept(got: np.ndarray, before: np.ndarray, written: np.ndarray) -> None:
    """Each row ``[a, :, r]`` of a cache ``[A, heads, R, D]`` not ``written[a, r]`` is unchanged."""
    keep = ~written
    np.testing.assert_array_equal(got.transpose(0, 2, 1, 3)[keep],
                                  before.transpose(0, 2, 1, 3)[keep])  # fmt: skip

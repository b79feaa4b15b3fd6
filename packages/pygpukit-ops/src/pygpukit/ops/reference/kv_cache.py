"""KV-cache writes in NumPy, in place on the host caches."""

from __future__ import annotations

import numpy as np


def append(
    k: np.ndarray, v: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, positions: np.ndarray
) -> None:
    """Tokens ``[B, Hkv, T, D]`` at ``positions`` ([B] first positions, or [B, T]).

    Positions outside the cache are skipped.
    """
    t, max_len = k.shape[2], k_cache.shape[2]
    pos = positions.astype(np.int64)
    pos = pos if pos.ndim == 2 else pos[:, None] + np.arange(t)[None, :]
    bi, ti = np.nonzero((pos >= 0) & (pos < max_len))
    pi = pos[bi, ti]
    # Advanced indices on axes 0 and 2 around a slice: the result is [n, Hkv, D].
    k_cache[bi, :, pi] = k[bi, :, ti]
    v_cache[bi, :, pi] = v[bi, :, ti]


def paged_write(
    k: np.ndarray, v: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, slots: np.ndarray
) -> None:
    """Tokens ``[N, Hkv, D]`` at ``slots`` (block * block_size + offset); out-of-range skipped."""
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[2]
    slots = slots.astype(np.int64)
    keep = np.nonzero((slots >= 0) & (slots // block_size < num_blocks))[0]
    blk, off = slots[keep] // block_size, slots[keep] % block_size
    k_cache[blk, :, off] = k[keep]
    v_cache[blk, :, off] = v[keep]

"""Attention in NumPy: prefill (with mask and bottom-right causal rule) and decode over a cache."""

from __future__ import annotations

import numpy as np

#: Query rows per NumPy step: a [rows, Sk] float32 score block at a time.
ROWS_PER_STEP = 512


def causal_visible(sq: int, sk: int, rows: slice) -> np.ndarray:
    """[rows, Sk] bool: key j visible to query i when j <= i + (Sk - Sq) (bottom-right)."""
    i = np.arange(sq)[rows][:, None]
    return np.arange(sk)[None, :] <= i + (sk - sq)


def softmax_rows(s: np.ndarray) -> np.ndarray:
    """Row softmax that gives a row of zeros, not NaN, when every entry is -inf (or none exists).

    Sk = 0 (no keys at all) is the empty case of a row that sees no key: zeros, as the kernels
    give (they run zero key tiles); ``max`` of an empty row would raise. A NaN entry makes its
    whole row NaN, as PyTorch's softmax does (and the kernels: a NaN-propagating row maximum).
    """
    if s.shape[-1] == 0:
        return np.zeros(s.shape, s.dtype)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(s - m)
        total = p.sum(axis=-1, keepdims=True)
        # total is 0 only for a row that sees no key; NaN (a NaN score) passes through
        return np.divide(p, total, out=np.zeros_like(p), where=total != 0)


def sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    causal: bool,
    scale: float,
) -> np.ndarray:
    """``softmax(q k^T * scale + mask) v`` in float32 for q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]."""
    b_, hq, sq, _ = q.shape
    sk, group = k.shape[2], hq // k.shape[1]
    m4: np.ndarray | None = None
    if mask is not None:
        m4 = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    res = np.empty(q.shape, np.float32)
    # One (batch, head) and ROWS_PER_STEP query rows at a time: memory stays O(rows * Sk).
    for b in range(b_):
        for h in range(hq):
            kf = k[b, h // group].astype(np.float32)
            vf = v[b, h // group].astype(np.float32)
            for r0 in range(0, sq, ROWS_PER_STEP):
                rows = slice(r0, min(sq, r0 + ROWS_PER_STEP))
                s = (q[b, h, rows].astype(np.float32) @ kf.T) * np.float32(scale)
                if m4 is not None:
                    mb = m4[min(b, m4.shape[0] - 1), min(h, m4.shape[1] - 1)]
                    s = s + np.broadcast_to(mb, (sq, sk))[rows].astype(np.float32)
                if causal:
                    s = np.where(causal_visible(sq, sk, rows), s, -np.inf)
                res[b, h, rows] = softmax_rows(s) @ vf
    return res


def check_lengths_and_blocks(
    lens: np.ndarray, table: np.ndarray | None, cache_shape: tuple[int, ...], capacity: int
) -> None:
    """The values the GPU kernels read unchecked, checked where the data is on the host.

    A negative length, or a block index outside the paged cache among the blocks a
    sequence's length reaches, is a ``ValueError`` naming the entry.
    """
    negative = np.flatnonzero(lens < 0)
    if negative.size:
        b = int(negative[0])
        raise ValueError(f"seq_lens[{b}] = {int(lens[b])} is negative; lengths are >= 0")
    if table is None:
        return
    num_blocks, block_size = cache_shape[0], cache_shape[2]
    for b, length in enumerate(np.minimum(lens, capacity)):
        used = table[b, : -(-int(length) // block_size)]
        bad = np.flatnonzero((used < 0) | (used >= num_blocks))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"block_table[{b}, {i}] = {int(used[i])} is not a block of the paged cache"
                f" (0..{num_blocks - 1}); sequence {b} of length {int(length)} reaches it"
            )


def decode(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    seq_lens: np.ndarray,
    block_table: np.ndarray | None,
    scale: float,
    capacity: int,
) -> np.ndarray:
    """One query token per sequence over a contiguous or paged cache, in float32."""
    b_, hq, d = q.shape
    hkv = k_cache.shape[1]
    group = hq // hkv
    res = np.zeros(q.shape, np.float32)
    for b in range(b_):
        n = int(min(max(int(seq_lens[b]), 0), capacity))
        if n == 0:
            continue
        if block_table is None:
            keys, vals = k_cache[b, :, :n], v_cache[b, :, :n]
        else:
            bs = k_cache.shape[2]
            blocks = block_table[b, : -(-n // bs)]
            # [nb, Hkv, bs, D] -> [Hkv, nb * bs, D], first n keys.
            keys = k_cache[blocks].transpose(1, 0, 2, 3).reshape(hkv, -1, d)[:, :n]
            vals = v_cache[blocks].transpose(1, 0, 2, 3).reshape(hkv, -1, d)[:, :n]
        for hk in range(hkv):
            qg = q[b, hk * group : (hk + 1) * group].astype(np.float32)
            s = (qg @ keys[hk].astype(np.float32).T) * np.float32(scale)
            res[b, hk * group : (hk + 1) * group] = softmax_rows(s) @ vals[hk].astype(np.float32)
    return res

"""NaN propagation through attention, shared by the CPU tests and the GPU tests (``gpu/``).

PyTorch's ``scaled_dot_product_attention`` propagates NaN: a NaN in a query makes its output row
NaN, a NaN in a key makes every row that sees that key NaN, a NaN in a value makes that value
column NaN in every row that sees it. Rows and keys not involved keep their finite values. Each
check builds fresh random inputs, puts one NaN in, and compares the NaN pattern (exactly) and
the finite values (against the same call without the NaN) with that rule.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit import ops

Rand = Callable[..., np.ndarray]


def _sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    out = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), is_causal=causal
    )
    return out.to_numpy().astype(np.float32)


def _compare(got: np.ndarray, clean: np.ndarray, expect_nan: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), expect_nan)
    keep = ~expect_nan
    np.testing.assert_allclose(got[keep], clean[keep], rtol=2e-2, atol=2e-2)


def check_prefill_nan(rand: Rand, where: str, causal: bool, d: int = 64) -> None:
    """One NaN in q, k or v of a [1, 4, 40, d] / [1, 2, 40, d] problem (GQA groups of 2)."""
    sq = sk = 40
    q = rand((1, 4, sq, d)).astype(np.float16)
    k = rand((1, 2, sk, d)).astype(np.float16)
    v = rand((1, 2, sk, d)).astype(np.float16)
    clean = _sdpa(q, k, v, causal)
    row, key, col = 7, 23, 5
    expect = np.zeros(clean.shape, bool)
    sees_key = np.ones(sq, bool) if not causal else np.arange(sq) >= key
    if where == "q":
        q[0, 1, row, col] = np.nan
        expect[0, 1, row, :] = True
    elif where == "k":
        k[0, 1, key, col] = np.nan
        expect[0, 2:4, sees_key, :] = True  # query heads 2 and 3 use KV head 1
    else:
        v[0, 1, key, col] = np.nan
        expect[0, 2:4, sees_key, col] = True
    got = _sdpa(q, k, v, causal)
    if where == "v" and causal:
        # Rows that do not see the key: a weight of exactly 0 times NaN is NaN in PyTorch's math
        # backend, and in the kernels within the tile that holds the key; no rule holds there.
        unseen = ~sees_key
        got[0, 2:4, unseen, col] = clean[0, 2:4, unseen, col]
    _compare(got, clean, expect)


def check_decode_nan(rand: Rand, where: str, paged: bool, capacity: int) -> None:
    """One NaN in q or in the cache (inside or past a sequence's length) of a decode step."""
    b, hq, hkv, d = 3, 4, 2, 64
    lens = np.array([capacity, capacity // 2 + 1, 5], np.int32)
    q = rand((b, hq, d)).astype(np.float16)
    if paged:
        block = 16
        nblocks = b * (capacity // block)
        kc = rand((nblocks, hkv, block, d)).astype(np.float16)
        vc = rand((nblocks, hkv, block, d)).astype(np.float16)
        table = np.random.default_rng().permutation(nblocks).reshape(b, -1).astype(np.int32)
    else:
        kc = rand((b, hkv, capacity, d)).astype(np.float16)
        vc = rand((b, hkv, capacity, d)).astype(np.float16)
        table = None

    def run() -> np.ndarray:
        out = ops.decode_attention(
            gp.from_numpy(q),
            gp.from_numpy(kc),
            gp.from_numpy(vc),
            gp.from_numpy(lens),
            block_table=None if table is None else gp.from_numpy(table),
        )
        return out.to_numpy().astype(np.float32)

    def cache_at(seq: int, token: int) -> tuple[int, int]:
        if table is None:
            return seq, token
        return int(table[seq, token // 16]), token % 16

    clean = run()
    expect = np.zeros(clean.shape, bool)
    seq = 1
    if where == "q":
        q[seq, 3, 10] = np.nan
        expect[seq, 3, :] = True
    elif where == "k inside":
        blk, off = cache_at(seq, int(lens[seq]) - 1)  # the last token the sequence sees
        kc[blk, 0, off, 2] = np.nan
        expect[seq, 0:2, :] = True  # query heads 0 and 1 use KV head 0
    elif where == "v inside":
        blk, off = cache_at(seq, 0)
        vc[blk, 1, off, 9] = np.nan
        expect[seq, 2:4, 9] = True
    elif where == "k past the length":  # no effect (a kernel may read it, but masks its score)
        blk, off = cache_at(2, int(lens[2]) + 3)
        kc[blk, 0, off, 2] = np.nan
    else:  # "v past the length": no effect, though it sits in the last tile a kernel reads
        blk, off = cache_at(2, int(lens[2]) + 3)
        vc[blk, :, off, :] = np.nan
        vc[blk, :, off + 1, :] = np.inf
    _compare(run(), clean, expect)

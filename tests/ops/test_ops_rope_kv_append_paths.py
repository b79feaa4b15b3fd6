"""ops.rope_kv_append's two CUDA kernels give the same bits (the CPU backend: its reference).

On the GPU a call launches the 16-byte-vector kernel when the head's halves are whole vectors
and the rows start 16-byte aligned, and the one-element kernel otherwise. The same random inputs
through both (an aligned call, and one whose arrays start one element past an aligned address)
must give equal queries and caches bit for bit: the two kernels round the same fp32 products.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

Rand = Callable[..., np.ndarray]


def _shifted(a: np.ndarray) -> gp.GPUArray:
    """``a`` on the device starting one element past the start of a fresh buffer."""
    flat = gp.from_numpy(np.concatenate([a.reshape(-1)[:1], a.reshape(-1)]))
    return flat[1:].reshape(*a.shape)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("hq", "hkv", "d", "t"), [(8, 2, 128, 37), (4, 4, 64, 5), (3, 1, 16, 9)])
def test_aligned_and_unaligned_calls_agree(
    rng: np.random.Generator, rand: Rand, dtype: str, hq: int, hkv: int, d: int, t: int
) -> None:
    b, max_len, p = 2, t + 3, 64
    qkv = rand((b, t, (hq + 2 * hkv) * d), dtype)
    kc, vc = rand((b, hkv, max_len, d), dtype), rand((b, hkv, max_len, d), dtype)
    positions = gp.from_numpy(rng.integers(0, p, (b, t)).astype(np.int32))
    slot_h = np.stack([rng.permutation(max_len)[:t] for _ in range(b)]).astype(np.int32)
    slot_h[0, 0] = -1  # stored nowhere, on both paths
    slots = gp.from_numpy(slot_h)
    cos, sin = ops.rope_cos_sin(p, d)

    outs = []
    for place in (gp.from_numpy, _shifted):
        k_cache, v_cache = place(kc), place(vc)
        q = ops.rope_kv_append(
            place(qkv), cos, sin, positions, k_cache, v_cache, slots, q_heads=hq,
            out=place(np.zeros((b, t, hq, d), dtype)),
        )  # fmt: skip
        outs.append([x.to_numpy() for x in (q, k_cache, v_cache)])
    for aligned, shifted in zip(*outs, strict=True):
        np.testing.assert_array_equal(aligned, shifted)
    assert not np.array_equal(outs[0][1], kc)  # the keys were written

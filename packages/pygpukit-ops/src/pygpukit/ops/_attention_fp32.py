"""float32 attention on the GPU, composed from the runtime's matmul, softmax and where.

The flash kernels run on tensor cores in float16/bfloat16 only. float32 models (checks against a
float32 reference, where 1e-4 matters more than speed) take this path instead: the scores are
materialised (``[B, Hq, Sq, Sk]`` floats), so it is for short sequences and small batches.
Grouped-query heads broadcast through the matmuls' batch dimensions; nothing is copied per head.
"""

from __future__ import annotations

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray


def _finish(scores: GPUArray, v: GPUArray, out: GPUArray) -> None:
    """``out = softmax(scores) @ v``; a row that sees no key gives zeros (softmax of -inf: NaN)."""
    p = gp.softmax(scores, axis=-1)
    gp.where(gp.isnan(p), 0.0, p, out=p)
    gp.matmul(p, v, out=out)


def sdpa(
    q: GPUArray,
    k: GPUArray,
    v: GPUArray,
    mask: GPUArray | None,
    causal: bool,
    scale: float,
    out: GPUArray,
) -> None:
    """Prefill attention, float32: ``q [B, Hq, Sq, D]``, ``k``/``v`` ``[B, Hkv, Sk, D]``."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    g = hq // hkv
    q5 = q.reshape(b, hkv, g, sq, d)
    k5, v5 = k.reshape(b, hkv, 1, sk, d), v.reshape(b, hkv, 1, sk, d)
    s = gp.matmul(q5, k5.swapaxes(-1, -2), allow_tf32=False)  # [B, Hkv, G, Sq, Sk]
    gp.multiply(s, np.float32(scale), out=s)
    if mask is not None:
        m = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
        m = m if m.shape[1] == 1 else m.reshape(m.shape[0], hkv, g, *m.shape[2:])
        m = m.reshape(m.shape[0], 1, 1, *m.shape[2:]) if m.ndim == 4 else m
        gp.add(s, m.astype(gp.float32, copy=False), out=s)
    if causal:
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        gp.add(s, gp.from_numpy(np.where(visible, 0.0, -np.inf).astype(np.float32)), out=s)
    _finish(s, v5, out.reshape(b, hkv, g, sq, d))


def decode(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    scale: float,
    out: GPUArray,
) -> None:
    """Decode attention, float32, contiguous cache ``[B, Hkv, L, D]``; lengths on the device."""
    b, hq, d = q.shape
    hkv, cap = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    s = gp.matmul(q.reshape(b, hkv, g, d), k_cache.swapaxes(-1, -2), allow_tf32=False)
    gp.multiply(s, np.float32(scale), out=s)  # [B, Hkv, G, L]
    visible = gp.less(gp.arange(cap, dtype=gp.int32), seq_lens.reshape(b, 1, 1, 1))
    gp.where(visible, s, -np.inf, out=s)
    _finish(s, v_cache, out.reshape(b, hkv, g, d))

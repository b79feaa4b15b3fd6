"""Single-pass decode attention for short caches: one launch, no split and no combine.

:func:`pygpukit.ops.decode_attention` splits a cache over many CTAs and merges the splits with
a second kernel, the right shape for long contexts. Over a few hundred cached tokens of one
sequence (a small model's batch-1 decode, which is bound by its launches) one CTA per query head
has enough work: :func:`decode_attention_single` does it in one kernel
(``kernels/decode_attention_single.cu``), launched with programmatic dependent launch so the
next kernel's weight loads overlap it. Its time grows with the cached length (one CTA per head
walks every key), so it is for short caches only; the caller chooses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._constants import constant
from ._plan import Launch, PlanCache, per_backend
from .reference import attention as reference

__all__ = ["SINGLE_PASS_HEAD_DIMS", "decode_attention_single"]

#: Head dimensions the kernel is built for.
SINGLE_PASS_HEAD_DIMS = (64, 128)


@dataclass(frozen=True, slots=True)
class SinglePlan:
    """The launch: ``plan(q, k_cache, v_cache, seq_lens, out, scale)``."""

    launch: Launch
    tail: tuple[int, int, int]  # hq, hkv, cache_len
    dependent: bool

    def __call__(self, q: GPUArray, k: GPUArray, v: GPUArray, lens: GPUArray, out: GPUArray,
                 scale: float) -> None:  # fmt: skip
        launch = self.launch
        args = (q, k, v, lens, out, *self.tail, scale)
        launch.kernel.launch(launch.grid, launch.block, args, dependent=self.dependent)


@dataclass(frozen=True, slots=True)
class ReferenceSinglePlan:
    """The CPU backend: :func:`.reference.attention.decode` on the host buffers."""

    cache_len: int

    def __call__(self, q: GPUArray, k: GPUArray, v: GPUArray, lens: GPUArray, out: GPUArray,
                 scale: float) -> None:  # fmt: skip
        host_lens = np.maximum(c.host(lens).astype(np.int64), 0)
        res = reference.decode(c.host(q), c.host(k), c.host(v), host_lens, None, scale,
                               self.cache_len)  # fmt: skip
        c.write_into(out, res)


def _plan_cuda(*key: Any) -> SinglePlan | ReferenceSinglePlan:
    b, hq, hkv, d, dtype, cache_len, _device = key
    c.check_int32("decode_attention_single", cache_len=cache_len, Hq=hq)
    name = f"attn_decode_single_d{d}_{c.kernel_suffix(dtype)}"
    kernel = kl.kernel("decode_attention_single", name)
    threads = constant("decode_attention_single", "DECODE_SINGLE_THREADS")
    dependent = config.get().dependent_launch == "on"
    return SinglePlan(Launch(kernel, (hq, b), threads), (hq, hkv, cache_len), dependent)


def _plan_numpy(*key: Any) -> SinglePlan | ReferenceSinglePlan:
    return ReferenceSinglePlan(key[5])


#: Plans by (B, Hq, Hkv, D, dtype, cache_len, device).
PLANS: PlanCache[SinglePlan | ReferenceSinglePlan] = PlanCache(
    "decode_attention_single", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def decode_attention_single(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    *,
    scale: float | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Attention of one query token per sequence over a short contiguous cache, one launch.

    As :func:`pygpukit.ops.decode_attention` with a contiguous cache: ``q [B, Hq, D]``, caches
    ``[B, Hkv, max_len, D]`` (float16 or bfloat16, ``D`` 64 or 128, ``Hq`` a multiple of
    ``Hkv``), ``seq_lens`` int32 ``[B]`` on the device (clamped to ``[0, max_len]``; 0 gives
    zeros), ``scale`` (default ``D ** -0.5``). Returns ``[B, Hq, D]`` (into ``out`` when
    given). One CTA per query head walks all its keys: use it where the cache is short.
    """
    c.check_array(q, "q", dtypes=c.HALF_DTYPES, ndim=3)
    c.check_array(k_cache, "k_cache", ndim=4)
    c.check_array(v_cache, "v_cache", ndim=4)
    c.check_same_dtype(q, ("k_cache", k_cache), ("v_cache", v_cache))
    c.check_shape(v_cache, "v_cache", tuple(k_cache.shape))
    c.check_array(seq_lens, "seq_lens", dtypes=[np.int32], ndim=1)
    b, hq, d = q.shape
    kb, hkv, _, kd = k_cache.shape
    if kb != b or kd != d or hkv < 1 or hq % hkv or d not in SINGLE_PASS_HEAD_DIMS:
        raise ValueError(
            f"q {tuple(q.shape)} and caches {tuple(k_cache.shape)} must be [B, Hq, D] and "
            f"[B, Hkv, max_len, D] with Hq a multiple of Hkv and D in {SINGLE_PASS_HEAD_DIMS}"
        )
    c.check_shape(seq_lens, "seq_lens", (b,))
    if q.data_ptr % 16 or k_cache.data_ptr % 16 or v_cache.data_ptr % 16:
        raise ValueError("q and the caches must be 16-byte aligned (the kernel's row loads)")
    c.check_out(out, (b, hq, d), q.dtype)
    y = c.result(out, (b, hq, d), q.dtype)
    s = float(d**-0.5 if scale is None else scale)
    if y.size:
        plan(q, k_cache)(q, k_cache, v_cache, seq_lens, y, s)
    return y


def plan(q: GPUArray, k_cache: GPUArray) -> SinglePlan | ReferenceSinglePlan:
    """The (cached) plan for these already-checked arrays: ``plan(q, k, v, lens, out, scale)``.

    For a decode loop that holds it and calls it every step (no checks, no lookup).
    """
    b, hq, d = q.shape
    _, hkv, cache_len, _ = k_cache.shape
    return PLANS.get(b, hq, hkv, d, q.dtype, cache_len, gp.get_device())

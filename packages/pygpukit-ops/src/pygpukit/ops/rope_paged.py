"""pygpukit.ops.rope_paged: a batched decode step's q/k/v from the fused projection, in one launch.

:func:`rope_kv_paged_write` is the paged-cache twin of :func:`~pygpukit.ops.rope_kv_append`:
it reads each token's row of a fused q/k/v projection in place, rotates q and k (NeoX pairs over
the whole head, each token at its own position), writes the rotated keys and the values into a
paged cache (:func:`~pygpukit.ops.paged_kv_cache_write`'s layout and slots) and returns the
rotated queries. A serving step of many sequences otherwise runs five kernels per layer here:
three copies splitting the projection, RoPE and the paged write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import kv_cache as reference_kv
from .reference import rope as reference_rope
from .rope import _TABLE_KIND

__all__ = ["rope_kv_paged_write"]

#: Threads per block; a token's pairs are spread over as many blocks as they need.
_BLOCK = 256


@dataclass(frozen=True, slots=True)
class RopeKVPagedPlan:
    """The launch: ``plan(qkv, q_out, k_cache, v_cache, cos, sin, positions, slots)``."""

    launch: Launch
    tail: tuple[int, ...]  # max_pos, q_heads, kv_heads, head_dim, block_size, num_blocks, kind

    def __call__(self, *arrays: GPUArray) -> None:
        self.launch(*arrays, *self.tail)


@dataclass(frozen=True, slots=True)
class ReferenceRopeKVPagedPlan:
    """The CPU backend's "plan": NumPy rotation, then the paged write of the rounded keys."""

    tokens: int
    q_heads: int
    kv_heads: int
    head_dim: int
    max_pos: int

    def __call__(self, *arrays: GPUArray) -> None:
        qkv, q_out, k_cache, v_cache, cos, sin, positions, slots = arrays
        hq, hkv, d = self.q_heads, self.kv_heads, self.head_dim
        pos = reference_rope.table_rows(c.host(positions), self.max_pos)
        cs, sn = c.f32(cos)[pos], c.f32(sin)[pos]
        x = c.f32(qkv).reshape(self.tokens, hq + 2 * hkv, d)
        c.write_into(q_out, reference_rope.rotate(x[:, :hq], cs, sn, d, False).reshape(q_out.shape))
        k = reference_rope.rotate(x[:, hq : hq + hkv], cs, sn, d, False).astype(qkv.dtype)
        v = c.host(qkv).reshape(self.tokens, hq + 2 * hkv, d)[:, hq + hkv :]
        kc, vc = c.host(k_cache), c.host(v_cache)
        reference_kv.paged_write(k, v, kc, vc, c.host(slots).reshape(-1))


def _plan_cuda(*key: Any) -> RopeKVPagedPlan | ReferenceRopeKVPagedPlan:
    tokens, q_heads, kv_heads, head_dim, max_pos, block_size, num_blocks, kind, dtype, _dev = key
    pairs = (q_heads + 2 * kv_heads) * (head_dim // 2)
    c.check_int32("rope_kv_paged_write", pairs=pairs, tokens=tokens, block_size=block_size)
    block = min(_BLOCK, -(-pairs // 32) * 32)
    kernel = kl.kernel("rope", f"rope_kv_paged_{c.kernel_suffix(dtype)}")
    return RopeKVPagedPlan(
        Launch(kernel, (tokens, -(-pairs // block)), block),
        (max_pos, q_heads, kv_heads, head_dim, block_size, num_blocks, kind),
    )


def _plan_numpy(*key: Any) -> RopeKVPagedPlan | ReferenceRopeKVPagedPlan:
    tokens, q_heads, kv_heads, head_dim, max_pos, *_ = key
    return ReferenceRopeKVPagedPlan(tokens, q_heads, kv_heads, head_dim, max_pos)


#: Plans by (tokens, q_heads, kv_heads, head_dim, max_positions, block_size, num_blocks, table
#: kind, dtype, device).
PLANS: PlanCache[RopeKVPagedPlan | ReferenceRopeKVPagedPlan] = PlanCache(
    "rope_kv_paged_write", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def rope_kv_paged_write(
    qkv: GPUArray,
    cos: GPUArray,
    sin: GPUArray,
    positions: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    slots: GPUArray,
    *,
    q_heads: int,
    out: GPUArray | None = None,
) -> GPUArray:
    """Split a fused q/k/v projection, rotate q and k, and write k and v into a paged cache.

    ``qkv`` is ``[..., (q_heads + 2 * kv_heads) * D]`` (each token's q heads, then k heads,
    then v heads), float32, float16 or bfloat16, C-contiguous; its leading dimensions are the
    tokens. ``k_cache``/``v_cache`` are paged caches ``[num_blocks, kv_heads, block_size, D]``
    of the same dtype (they give ``kv_heads`` and ``D``). ``cos``/``sin`` are
    :func:`~pygpukit.ops.rope_cos_sin` tables ``[P, D / 2]`` (float32 or qkv's dtype; the whole
    head rotates, NeoX layout). ``positions`` (each token's RoPE row) and ``slots`` (its cache
    slot ``block * block_size + offset``) are int32 arrays with one value per token, in the
    tokens' shape or flat.

    Returns the rotated queries ``[tokens, q_heads, D]`` (into ``out`` when given). A negative
    slot or one past the last block stores nothing (padding tokens, as
    :func:`~pygpukit.ops.paged_kv_cache_write`). The values equal slicing ``qkv``,
    :func:`~pygpukit.ops.apply_rope` and :func:`~pygpukit.ops.paged_kv_cache_write`, in one
    kernel instead of five. Positions outside ``[0, P)`` raise ``ValueError`` on the CPU
    backend; on the GPU such a token is not rotated (as :func:`~pygpukit.ops.apply_rope`).
    """
    op = "rope_kv_paged_write"
    q_heads = validation.size(q_heads, "q_heads", op, minimum=1)
    qkv = c.check_array(qkv, "qkv", dtypes=c.FLOAT_DTYPES)
    k_cache = c.check_array(k_cache, "k_cache", dtypes=c.FLOAT_DTYPES, ndim=4)
    v_cache = c.check_array(v_cache, "v_cache", dtypes=c.FLOAT_DTYPES, ndim=4)
    c.check_same_dtype(qkv, ("k_cache", k_cache), ("v_cache", v_cache))
    c.check_shape(v_cache, "v_cache", k_cache.shape)
    c.check_writeable(k_cache, "k_cache")
    c.check_writeable(v_cache, "v_cache")
    num_blocks, kv_heads, block_size, d = k_cache.shape
    width = qkv.shape[-1] if qkv.ndim else -1
    if qkv.ndim < 1 or d % 2 or block_size < 1 or width != (q_heads + 2 * kv_heads) * d:
        raise ValueError(
            f"qkv {tuple(qkv.shape)} must be [..., (q_heads + 2 * kv_heads) * D] with q_heads="
            f"{q_heads}, and the caches [num_blocks, kv_heads, block_size >= 1, D] with an even "
            f"D; got caches {tuple(k_cache.shape)}"
        )
    tokens = qkv.size // width if width else 0
    cos = c.check_array(cos, "cos", dtypes=list(_TABLE_KIND), ndim=2)
    sin = c.check_array(sin, "sin", dtypes=list(_TABLE_KIND), ndim=2)
    if cos.dtype not in (np.dtype(np.float32), qkv.dtype):
        raise TypeError(f"cos must be float32 or {qkv.dtype} like qkv; got {cos.dtype}")
    c.check_same_dtype(cos, ("sin", sin))
    c.check_shape(sin, "sin", cos.shape)
    max_pos, half = cos.shape
    if half != d // 2:
        raise ValueError(
            f"cos/sin have width {half} but the heads have D = {d}: {op} rotates the whole "
            f"head, so the tables must be rope_cos_sin(P, {d})"
        )
    for name, index in (("positions", positions), ("slots", slots)):
        c.check_array(index, name, dtypes=[np.int32])
        if index.size != tokens:
            raise ValueError(
                f"{name} must hold one int32 per token ({tokens}), got shape {tuple(index.shape)}"
            )
    shape = (tokens, q_heads, d)
    c.check_out(out, shape, qkv.dtype)
    q = c.result(out, shape, qkv.dtype)
    if tokens == 0:
        return q
    key = (tokens, q_heads, kv_heads, d, max_pos, block_size, num_blocks, _TABLE_KIND[cos.dtype],
           qkv.dtype, gp.get_device())  # fmt: skip
    PLANS.get(*key)(qkv, q, k_cache, v_cache, cos, sin, positions, slots)
    return q

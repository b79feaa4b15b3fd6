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
from .rope import _check_qkv_rope

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
    qkv, cos, sin, k_cache, v_cache, kv_heads, d, max_pos, kind = _check_qkv_rope(
        op, qkv, cos, sin, k_cache, v_cache, q_heads=q_heads, qkv_ndim=None, qkv_lead="...",
        cache_layout="[num_blocks, kv_heads, block_size >= 1, D]",
        layout_fits=lambda _qkv_shape, cache_shape: cache_shape[2] >= 1,
    )  # fmt: skip
    num_blocks, _, block_size, _ = k_cache.shape
    tokens = qkv.size // qkv.shape[-1] if qkv.shape[-1] else 0
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
    key = (tokens, q_heads, kv_heads, d, max_pos, block_size, num_blocks, kind, qkv.dtype,
           gp.get_device())  # fmt: skip
    PLANS.get(*key)(qkv, q, k_cache, v_cache, cos, sin, positions, slots)
    return q

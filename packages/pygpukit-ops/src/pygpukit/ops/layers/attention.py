"""The attention layer: prefill (flash attention) and decode over a contiguous or paged cache."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .. import attention as attn_ops
from . import _checks


class Attention:
    """Scaled dot-product attention for ``num_heads`` query heads over ``num_kv_heads`` KV heads.

    ``head_dim`` is 64, 80, 96, 128 or 256; ``scale`` defaults to ``1 / sqrt(head_dim)``;
    ``causal`` (bottom-right aligned, see :func:`pygpukit.ops.scaled_dot_product_attention`)
    applies to :meth:`prefill`. Layouts are those of the function API: prefill q
    ``[B, Hq, Sq, D]``, k/v ``[B, Hkv, Sk, D]``; decode q ``[B, Hq, D]`` over a contiguous
    cache ``[B, Hkv, max_len, D]`` or a paged one ``[blocks, Hkv, block_size, D]`` with a
    ``block_table``. A decode plan that splits the keys across CTAs keeps its float32
    partials in the layer, so ``decode(..., out=o)`` allocates nothing.

    ``sliding_window`` (causal layers only; Mistral, Qwen2 with ``use_sliding_window``) lets
    query ``i`` see the ``sliding_window`` keys up to its own position, ``i - window < j <= i``
    (transformers' rule): :meth:`prefill` builds that mask once per shape, when the keys
    outnumber the window. :meth:`decode` attends to every cached key, so a windowed model keeps
    a rolling cache of ``sliding_window`` slots (attention does not depend on the keys' order).
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int = 128,
        *,
        scale: float | None = None,
        causal: bool = True,
        sliding_window: int | None = None,
    ) -> None:
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or kv <= 0 or num_heads % kv:
            raise ValueError(
                f"num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({kv})"
            )
        attn_ops._check_head_dim(head_dim, "head_dim")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, kv, head_dim
        self.scale = attn_ops._check_scale(scale, head_dim)
        self.causal = causal
        if sliding_window is not None:
            if isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
                raise TypeError(
                    f"sliding_window must be an int or None, got {type(sliding_window).__name__}"
                )
            if sliding_window <= 0 or not causal:
                raise ValueError(
                    f"sliding_window must be a positive int on a causal layer, got "
                    f"{sliding_window} (causal={causal})"
                )
        self.sliding_window = sliding_window
        self._window_mask: tuple[tuple[int, int], GPUArray] | None = None
        self._prefill: _checks.PlanDict[tuple[Any, ...], Any] = _checks.PlanDict()
        self._decode: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}

    def _heads(self, q: GPUArray, k: GPUArray) -> None:
        heads = (q.shape[1], k.shape[1], q.shape[-1])
        if heads != (self.num_heads, self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"this layer has {self.num_heads} query and {self.num_kv_heads} KV heads of "
                f"{self.head_dim}; got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )

    def prefill(
        self,
        q: GPUArray,
        k: GPUArray,
        v: GPUArray,
        *,
        attn_mask: GPUArray | None = None,
        out: GPUArray | None = None,
    ) -> GPUArray:
        """``softmax(q k^T * scale + attn_mask) v`` (causal if the layer is): ``[B, Hq, Sq, D]``.

        A sliding-window layer makes its own mask: ``attn_mask`` must then be None. ``out``
        is C-contiguous or the ``[B, Sq, Hq, D]`` layout seen through ``transpose(0, 2, 1, 3)``
        (see :func:`pygpukit.ops.scaled_dot_product_attention`).
        """
        if self.sliding_window is not None:
            if attn_mask is not None:
                raise ValueError(
                    "this layer has a sliding window and builds its own mask; pass attn_mask "
                    "to a layer without sliding_window"
                )
            attn_mask = self._window(q, k)
        _, strides = attn_ops.check_prefill(q, k, v, attn_mask, self.causal, self.scale)
        self._heads(q, k)
        res = attn_ops.check_prefill_out(out, tuple(q.shape), q.dtype)
        if res.size == 0:
            return res
        movable = q.evictable or k.evictable or v.evictable
        key = (tuple(q.shape), tuple(k.shape), q.dtype, attn_ops.mask_kind(attn_mask), movable)
        plan = self._prefill.get(key)
        if plan is None:
            plan = attn_ops.prefill_plan(q, k, v, attn_mask, self.causal)
            self._prefill[key] = plan
        plan(q, k, v, res, attn_mask, strides, self.scale)
        return res

    def _window(self, q: GPUArray, k: GPUArray) -> GPUArray | None:
        """The additive ``[Sq, Sk]`` window mask (None while every key is in the window).

        Only the last shape's mask is kept: prompts of many lengths do not pin their masks.
        """
        w = self.sliding_window
        shaped = all(isinstance(a, GPUArray) and a.ndim == 4 for a in (q, k))
        if w is None or not shaped or k.shape[2] <= w:
            return None  # check_prefill reports malformed arguments
        sq, sk = int(q.shape[2]), int(k.shape[2])
        # Read once: a thread sharing the layer may replace the kept mask with its own shape's
        # between this check and the return.
        kept = self._window_mask
        if kept is None or kept[0] != (sq, sk):
            i = np.arange(sq)[:, None] + (sk - sq)  # bottom-right aligned, as causal
            j = np.arange(sk)[None, :]
            mask = np.where(j > i - w, 0.0, -np.inf).astype(np.float32)
            kept = self._window_mask = ((sq, sk), gp.from_numpy(mask))
        return kept[1]

    def decode(
        self,
        q: GPUArray,
        k_cache: GPUArray,
        v_cache: GPUArray,
        seq_lens: GPUArray,
        *,
        block_table: GPUArray | None = None,
        out: GPUArray | None = None,
    ) -> GPUArray:
        """One new query token per sequence over its cached keys and values: ``[B, Hq, D]``.

        Arguments as :func:`pygpukit.ops.decode_attention` (``seq_lens`` int32 ``[B]`` on the
        device; ``block_table`` int32 ``[B, max_blocks]`` for a paged cache).
        """
        max_blocks, capacity, _ = attn_ops.check_decode(
            q, k_cache, v_cache, seq_lens, block_table, self.scale
        )
        self._heads(q, k_cache)
        res = _checks.output(out, tuple(q.shape), q.dtype)
        if res.size == 0:
            return res
        key = (tuple(q.shape), tuple(k_cache.shape), q.dtype, max_blocks)
        entry = self._decode.get(key)
        if entry is None:
            plan = attn_ops.decode_plan(q, k_cache, max_blocks, capacity)
            entry = (plan, *plan.workspace())
            self._decode[key] = entry
        plan, o_part, lse = entry
        plan(q, k_cache, v_cache, seq_lens, block_table, res, self.scale, o_part, lse)
        return res

    def __repr__(self) -> str:
        return (
            f"Attention(num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, scale={self.scale:.6g}, causal={self.causal}, "
            f"sliding_window={self.sliding_window})"
        )

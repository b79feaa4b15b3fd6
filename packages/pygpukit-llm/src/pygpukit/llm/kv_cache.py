"""The static KV cache: per layer, keys and values ``[batch, kv_heads, capacity, head_dim]``.

Preallocated once at load for ``max_seq_len`` tokens (capped by a memory budget), so decoding
never allocates. A sliding-window model keeps only its window: token ``p`` lives in slot
``p % capacity``; attention is order-free over the cached keys (RoPE is applied before they are
cached), so the rolling buffer needs no reordering and ``decode_attention`` reads it unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from .config import ModelConfig

__all__ = ["StaticKVCache", "plan_max_seq_len"]


def _bytes_per_token(cfg: ModelConfig, dtype: Any) -> int:
    return 2 * cfg.num_layers * cfg.kv_size * np.dtype(dtype).itemsize


def plan_max_seq_len(
    cfg: ModelConfig, dtype: Any, requested: int | None, budget_bytes: int, batch: int = 1
) -> int:
    """The context length to preallocate: ``requested`` (default: the config's), within budget.

    A sliding window needs only ``window`` slots, whatever the length. Raises ``ValueError``
    when an explicitly requested length does not fit the budget.
    """
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0
    ):
        raise ValueError(f"max_seq_len must be a positive int, got {requested!r}")
    length = requested or cfg.max_position_embeddings
    per_slot = _bytes_per_token(cfg, dtype) * batch
    slots = min(length, cfg.sliding_window or length)
    if slots * per_slot <= budget_bytes:
        return length
    fits = budget_bytes // per_slot
    if requested is not None or fits < 1:
        raise ValueError(
            f"a KV cache of {slots} tokens needs {slots * per_slot / 2**20:.1f} MiB, over the "
            f"budget of {budget_bytes / 2**20:.1f} MiB; lower max_seq_len (at most {fits} fit) "
            "or raise kv_cache_memory"
        )
    return int(fits)


class StaticKVCache:
    """Keys and values of every layer for ``batch`` sequences of up to ``max_seq_len`` tokens."""

    def __init__(self, cfg: ModelConfig, batch: int, max_seq_len: int, dtype: Any) -> None:
        self.max_seq_len = max_seq_len
        self.capacity = min(max_seq_len, cfg.sliding_window or max_seq_len)
        shape = (batch, cfg.num_kv_heads, self.capacity, cfg.head_dim)
        self.k = [gp.zeros(shape, dtype) for _ in range(cfg.num_layers)]
        self.v = [gp.zeros(shape, dtype) for _ in range(cfg.num_layers)]

    @property
    def nbytes(self) -> int:
        """Device bytes held by the cache."""
        return sum(a.nbytes for a in self.k + self.v)

    def prefill_slots(self, length: int) -> GPUArray:
        """int32 ``[1, length]``: the slot of each prompt token, -1 for those a window drops."""
        p = np.arange(length)
        keep = p >= length - self.capacity
        return gp.from_numpy(np.where(keep, p % self.capacity, -1).astype(np.int32)[None, :])

    def write(self, layer: int, k: GPUArray, v: GPUArray, slots: GPUArray) -> None:
        """Store ``k``/``v`` ``[B, Hkv, T, D]`` at ``slots`` (``[B]`` first slot or ``[B, T]``)."""
        ops.kv_cache_append(k, v, self.k[layer], self.v[layer], slots)

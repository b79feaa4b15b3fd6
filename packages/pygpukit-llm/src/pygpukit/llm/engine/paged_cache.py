"""The paged KV cache's device memory: per layer, keys and values ``[num_blocks, Hkv, 16, D]``.

One array per layer and kind, allocated once from the memory pool (inside the model's
scheduler partition when the engine has one, so the partition's limit and reservation cover
it); blocks are indices into it, handed out by the
:class:`~pygpukit.llm.engine.block_manager.BlockManager`. The layout is the one
``ops.paged_kv_cache_write`` and ``ops.decode_attention(block_table=...)`` take.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from ..config import ModelConfig

__all__ = ["BLOCK_SIZE", "PagedKVCache", "block_bytes"]

#: Tokens per KV block.
BLOCK_SIZE = 16


def block_bytes(cfg: ModelConfig, dtype: Any, block_size: int = BLOCK_SIZE) -> int:
    """Device bytes of one block: keys and values of ``block_size`` tokens in every layer."""
    return 2 * cfg.num_layers * cfg.kv_size * block_size * np.dtype(dtype).itemsize


class PagedKVCache:
    """Keys and values of ``num_blocks`` blocks of ``block_size`` tokens, for every layer."""

    def __init__(
        self, cfg: ModelConfig, num_blocks: int, dtype: Any, block_size: int = BLOCK_SIZE
    ) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        shape = (num_blocks, cfg.num_kv_heads, block_size, cfg.head_dim)
        self.k = [gp.zeros(shape, dtype) for _ in range(cfg.num_layers)]
        self.v = [gp.zeros(shape, dtype) for _ in range(cfg.num_layers)]

    @property
    def nbytes(self) -> int:
        """Device bytes held by the cache."""
        return sum(a.nbytes for a in self.k + self.v)

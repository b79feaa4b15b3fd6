"""One forward pass over a flattened batch: every scheduled token of every request, in one row.

A step's tokens (one per decoding request, a chunk per prefilling one) are laid end to end as
a ``[1, N]`` sequence. Each token carries its own position, the cache slot its key and value
go to, and the block table and length its query attends over, so decode tokens and prefill
chunks share every matrix product of the step. Attention writes the step's keys and values into
the paged cache, then runs paged decode attention with one query per token: token ``p`` of a
request sees the request's cached tokens ``0 .. p`` (causal within a chunk by construction,
and over a shared cached prefix without copying it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from ..models.llama import LlamaModel
from .paged_cache import PagedKVCache
from .request import Request

__all__ = ["BatchInputs", "ModelRunner", "ScheduledChunk"]


@dataclass(frozen=True)
class ScheduledChunk:
    """``count`` tokens of ``request`` from token ``start`` on.

    ``sample``: the chunk's last token is the request's last known one, so the step samples
    the next.
    """

    request: Request
    start: int
    count: int
    sample: bool


@dataclass(frozen=True)
class BatchInputs:
    """Host arrays of one step (built by :func:`build_inputs`, uploaded once)."""

    ids: np.ndarray  # int32 [N]
    positions: np.ndarray  # int32 [N]
    slots: np.ndarray  # int32 [N]: block * block_size + offset
    seq_lens: np.ndarray  # int32 [N]: position + 1
    block_table: np.ndarray  # int32 [N, max_blocks]
    sample_rows: np.ndarray  # int32 [R]: rows whose logits are sampled


def _bucket(n: int) -> int:
    """``n`` rounded up to a power of two (few distinct shapes: cached plans stay few)."""
    return 1 << max(0, (n - 1).bit_length())


def build_inputs(chunks: Sequence[ScheduledChunk], block_size: int) -> BatchInputs:
    """The step's flattened token rows."""
    ids, pos, slots, rows = [], [], [], []
    tables: list[list[int]] = []
    n = 0
    for c in chunks:
        r = c.request
        p = np.arange(c.start, c.start + c.count)
        blocks = np.asarray(r.blocks, np.int64)
        ids.append(np.asarray(r.tokens[c.start : c.start + c.count], np.int32))
        pos.append(p)
        slots.append(blocks[p // block_size] * block_size + p % block_size)
        tables.extend([r.blocks] * c.count)
        n += c.count
        if c.sample:
            rows.append(n - 1)
    width = _bucket(max(len(t) for t in tables))
    table = np.zeros((n, width), np.int32)
    for i, t in enumerate(tables):
        table[i, : len(t)] = t
    positions = np.concatenate(pos).astype(np.int32)
    return BatchInputs(
        ids=np.concatenate(ids),
        positions=positions,
        slots=np.concatenate(slots).astype(np.int32),
        seq_lens=positions + 1,
        block_table=table,
        sample_rows=np.asarray(rows, np.int32),
    )


class ModelRunner:
    """Runs the decoder over a flattened batch and returns the sampled rows' float32 logits."""

    def __init__(self, model: LlamaModel, cache: PagedKVCache) -> None:
        self.model, self.cache = model, cache

    def logits(self, inputs: BatchInputs) -> GPUArray:
        """float32 ``[R, vocab]`` logits of the rows in ``inputs.sample_rows``.

        Writes every token's key and value into the cache on the way.
        """
        cfg = self.model.config
        n = int(inputs.ids.shape[0])
        slots = gp.from_numpy(inputs.slots)
        seq_lens = gp.from_numpy(inputs.seq_lens)
        table = gp.from_numpy(inputs.block_table)
        k_cache, v_cache = self.cache.k, self.cache.v
        # The functional op, not the model's Attention layer: that layer keeps a plan and its
        # workspace per query shape, and a step's token count changes every step.

        def attend(layer: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
            ops.paged_kv_cache_write(
                k.reshape(n, cfg.num_kv_heads, cfg.head_dim),
                v.reshape(n, cfg.num_kv_heads, cfg.head_dim),
                k_cache[layer], v_cache[layer], slots,
            )  # fmt: skip
            o = ops.decode_attention(
                q.reshape(n, cfg.num_heads, cfg.head_dim),
                k_cache[layer],
                v_cache[layer],
                seq_lens,
                scale=self.model.attention.scale,
                block_table=table,
            )
            return o.reshape(1, n, cfg.q_size)

        x = self.model.hidden_states(
            gp.from_numpy(inputs.ids[None, :]), gp.from_numpy(inputs.positions[None, :]), attend
        )
        x = x.reshape(n, cfg.hidden_size)
        if inputs.sample_rows.shape[0] != n:
            x = gp.take(x, gp.from_numpy(inputs.sample_rows), axis=0)
        return self.model.logits(x)

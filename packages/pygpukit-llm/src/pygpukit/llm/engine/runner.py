"""One forward pass over a flattened batch: every scheduled token of every request, in one row.

A step's tokens (one per decoding request, a chunk per prefilling one) are laid end to end as
a ``[1, N]`` sequence. Each token carries its own position, the cache slot its key and value
go to, and the block table and length its query attends over, so decode tokens and prefill
chunks share every matrix product of the step. Attention writes the step's keys and values into
the paged cache, then runs paged decode attention with one query per token: token ``p`` of a
request sees the request's cached tokens ``0 .. p`` (causal within a chunk by construction,
and over a shared cached prefix without copying it).

Prompt chunks that start a request (no cached token before them) at the end of the row set
attend with the flash prefill kernel over their own keys and values instead (causal): one
kernel per chunk rather than one query row per token over the cache, which a long prompt
makes quadratic in cache reads. Consecutive fresh chunks of one length share that kernel as
one batch (``[chunks, heads, length, D]``), so 64 equal prompts cost one call per layer.
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
from .side_stream import upload

__all__ = ["BatchInputs", "ModelRunner", "ScheduledChunk", "build_inputs", "fresh_groups"]


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
    #: ``(first row, rows)`` of the chunks at the end that start their request (position 0);
    #: rows from the first of them on attend by flash prefill.
    fresh: tuple[tuple[int, int], ...] = ()

    @property
    def fresh_from(self) -> int:
        """The first row of the fresh chunks (N when there is none)."""
        return self.fresh[0][0] if self.fresh else int(self.ids.shape[0])

    @property
    def fresh_groups(self) -> tuple[tuple[int, int, int], ...]:
        """The fresh chunks as ``(first row, rows per chunk, chunks)`` runs of equal length.

        Prompts of one length (a benchmark's, or a batch of equal requests) then attend in one
        batched prefill call per layer instead of one call (and four copies) per prompt.
        """
        return fresh_groups(self.fresh)


def fresh_groups(fresh: Sequence[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """Consecutive ``(row, count)`` chunks merged into ``(first row, count, chunks)`` runs."""
    groups: list[tuple[int, int, int]] = []
    for row, count in fresh:
        if groups:
            first, c, g = groups[-1]
            if c == count and first + c * g == row:
                groups[-1] = (first, c, g + 1)
                continue
        groups.append((row, count, 1))
    return tuple(groups)


def _bucket(n: int) -> int:
    """``n`` rounded up to a power of two (few distinct shapes: cached plans stay few)."""
    return 1 << max(0, (n - 1).bit_length())


def build_inputs(chunks: Sequence[ScheduledChunk], block_size: int) -> BatchInputs:
    """The step's flattened token rows."""
    ids, pos, slots, rows = [], [], [], []
    tables: list[list[int]] = []  # per chunk
    n = 0
    for c in chunks:
        r = c.request
        p = np.arange(c.start, c.start + c.count)
        blocks = np.asarray(r.blocks, np.int64)
        # A token not known on the host yet (sampled by a step still in flight: the engine's
        # lookahead) packs as id 0; the step's ``token_ids`` put the device's in its place.
        row_ids = np.zeros(c.count, np.int32)
        known = r.tokens[c.start : c.start + c.count]
        row_ids[: len(known)] = known
        ids.append(row_ids)
        pos.append(p)
        slots.append(blocks[p // block_size] * block_size + p % block_size)
        tables.append(r.blocks)
        n += c.count
        if c.sample:
            rows.append(n - 1)
    width = _bucket(max(len(t) for t in tables))
    table = np.zeros((n, width), np.int32)
    row = 0
    for c, t in zip(chunks, tables, strict=True):  # one broadcast per chunk, not per row
        table[row : row + c.count, : len(t)] = t
        row += c.count
    positions = np.concatenate(pos).astype(np.int32)
    fresh: list[tuple[int, int]] = []
    row = n
    for c in reversed(chunks):
        if c.start != 0:
            break
        row -= c.count
        fresh.insert(0, (row, c.count))
    return BatchInputs(
        ids=np.concatenate(ids),
        positions=positions,
        slots=np.concatenate(slots).astype(np.int32),
        seq_lens=positions + 1,
        block_table=table,
        sample_rows=np.asarray(rows, np.int32),
        fresh=tuple(fresh),
    )


class ModelRunner:
    """Runs the decoder over a flattened batch and returns the sampled rows' float32 logits.

    ``flash_prefill``: fresh prompt chunks attend with the flash prefill kernel (off: every
    row with paged decode attention; the same attention, computed another way).
    """

    def __init__(
        self, model: LlamaModel, cache: PagedKVCache, *, flash_prefill: bool = True
    ) -> None:
        self.model, self.cache = model, cache
        self.flash_prefill = flash_prefill

    def logits(self, inputs: BatchInputs, *, token_ids: GPUArray | None = None) -> GPUArray:
        """float32 ``[R, vocab]`` logits of the rows in ``inputs.sample_rows``.

        Writes every token's key and value into the cache on the way. ``token_ids`` (int32
        ``[K]`` on the device): the ids of the first K rows, copied over the uploaded ones on
        the stream, so a step can run on ids a step still in flight samples.
        """
        cfg = self.model.config
        n = int(inputs.ids.shape[0])
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        split = inputs.fresh_from if self.flash_prefill else n
        # Uploads on the side stream: a blocking one on this stream would hold the host (that
        # has the rest of the step to launch) until the GPU is idle.
        slots = upload(inputs.slots)
        seq_lens = upload(inputs.seq_lens[:split]) if split else None
        table = upload(inputs.block_table[:split]) if split else None
        k_cache, v_cache = self.cache.k, self.cache.v
        scale = self.model.attention.scale

        groups = inputs.fresh_groups

        def heads_first(t: GPUArray, a: int, c: int, g: int, h: int) -> GPUArray:
            """Rows ``a .. a + g * c`` of ``t`` ``[1, N, h, D]`` as ``[g, h, c, D]``."""
            return t[0, a : a + g * c].reshape(g, c, h, d).transpose(0, 2, 1, 3).contiguous()

        # The functional ops, not the model's Attention layer: that layer keeps a plan and its
        # workspace per query shape, and a step's token count changes every step.
        def attend(layer: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
            ops.paged_kv_cache_write(
                k.reshape(n, hkv, d), v.reshape(n, hkv, d), k_cache[layer], v_cache[layer], slots
            )
            q3 = q.reshape(n, hq, d)
            if split == n:
                assert seq_lens is not None  # made above whenever some rows decode
                o = ops.decode_attention(
                    q3, k_cache[layer], v_cache[layer], seq_lens, scale=scale, block_table=table
                )
                return o.reshape(1, n, cfg.q_size)
            o = gp.empty((n, hq, d), q.dtype)
            if split:
                assert seq_lens is not None
                ops.decode_attention(
                    q3[:split], k_cache[layer], v_cache[layer], seq_lens,
                    scale=scale, block_table=table, out=o[:split],
                )  # fmt: skip
            for a, c, g in groups:
                ot = ops.scaled_dot_product_attention(
                    heads_first(q, a, c, g, hq), heads_first(k, a, c, g, hkv),
                    heads_first(v, a, c, g, hkv), is_causal=True, scale=scale,
                )  # fmt: skip
                # One strided copy back into the rows (token-major), for the whole group.
                o[a : a + g * c].reshape(g, c, hq, d)[...] = ot.transpose(0, 2, 1, 3)
            return o.reshape(1, n, cfg.q_size)

        ids = upload(inputs.ids)
        if token_ids is not None:
            ids[0 : token_ids.shape[0]] = token_ids
        x = self.model.hidden_states(ids.reshape(1, n), upload(inputs.positions[None, :]), attend)
        x = x.reshape(n, cfg.hidden_size)
        if inputs.sample_rows.shape[0] != n:
            x = gp.take(x, upload(inputs.sample_rows), axis=0)
        return self.model.logits(x)

"""Decode steps (and steps mixing decode rows with prompt chunks), one CUDA graph per shape.

A step where every running request adds one token (the common case once prompts are in) has
the same shape from step to step: ``B`` tokens, each with its id, position, cache slot, length
and block table. Its batch is padded up to a bucket (1, 16, 32, 64) and its block table to a
power-of-two width, and each ``(bucket, width)`` gets persistent device inputs, filled by one
upload per step, and a CUDA graph of the whole forward pass over them (every layer's GEMMs with
``M = bucket`` rows, the paged KV writes and paged decode attention with per-sequence lengths,
the float32 logits): the step costs one upload, one graph launch and the small download of the
sampled ids, whatever the model's depth.

Padding rows compute a token of their own that nobody reads: id 0 at position 0, its key and
value written into a scratch block that no request owns (the cache has one block more than the
block manager hands out), attending over that one slot.

Mixed steps (some chunk holds several prompt tokens; not batch-invariant): every chunk is
expanded into its token rows, decode rows and prompt rows alike, and the rows are padded to a
row bucket (16 .. 256, :data:`MIXED_ROW_BUCKETS`). Each row attends with paged decode
attention over its request's cache up to its own position (the step writes every row's key and
value first, so a prompt row sees the chunk's earlier tokens: causal by construction). The
logits are computed for each chunk's last row only, gathered by indices that are inputs too
(padded to a batch bucket): the head's GEMM and the download stay those of a decode step. Up
to a few hundred rows the linear layers stay bound by the weight read, so a step that carries
a prompt chunk beside 64 decode rows costs the GPU little more than a decode step, and replayed
it costs the host one launch instead of one per kernel. A graph keeps every intermediate it
allocated while captured (the pool defers frees during a capture), roughly 5-6 MB a row at
the Llama-3.1-8B shape, about 1.5 GB for a 256-row graph: the buckets stop there.

The first step of a shape runs eagerly (its plans and kernels are made then, which a capture
cannot do) and is captured right after; replays follow. Without CUDA graphs (the CPU backend,
or a capture the runtime refuses) the same padded step runs eagerly, so both paths compute the
same thing.

Batch-invariant steps (``batch_invariant=True``): every row runs the batched twins of the
one-token kernels of ``CausalLM.generate`` (``ops.decode_linear_rows``: RMSNorm, q/k/v with RoPE
and the paged KV write, o_proj + residual, gate/up + SwiGLU, down + residual, the float32 head;
``ops.decode_attention_paged_single``), so a row's logits are bitwise those of the same token
decoded alone by ``generate``'s fused step (with its one-launch attention), whatever the bucket
and whatever the other rows hold. The linear layers then run on CUDA cores rather than tensor
cores: docs/serve.md gives the cost.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from ..models import llama_decode
from ..models.llama import LlamaModel
from .paged_cache import PagedKVCache
from .request import Request
from .runner import ScheduledChunk
from .side_stream import upload

__all__ = [
    "BATCH_BUCKETS",
    "MIXED_ROW_BUCKETS",
    "DecodeGraphs",
    "batch_bucket",
    "invariant_support",
    "row_bucket",
    "table_width",
]

log = logging.getLogger("pygpukit.llm.engine")

#: Batch sizes a decode step is padded to; a larger decode batch runs on the flattened path.
#: From 2 to 16 rows the step is padded to 16: the linear layers then run on tensor cores,
#: which beat the multi-row GEMV kernels there (Llama-3.1-8B shape on an H200: a graph step of
#: 4 rows took 6.98 ms, of 16 rows 5.23 ms; one row, the one-row GEMV, 4.65 ms).
BATCH_BUCKETS = (1, 16, 32, 64)

#: Token rows a mixed step (decode rows and prompt chunks) is padded to; more rows run on the
#: flattened path. Up to about 256 rows a step's GEMMs on an H100 stay bound by the weight
#: read; a graph holds its intermediates for good, which grow with the rows.
MIXED_ROW_BUCKETS = (16, 32, 64, 128, 256)

#: The narrowest block table of a graph (256 tokens): short contexts share one width.
MIN_TABLE_WIDTH = 16


def batch_bucket(n: int) -> int | None:
    """The smallest bucket holding ``n`` rows, or None above the largest."""
    for b in BATCH_BUCKETS:
        if n <= b:
            return b
    return None


def row_bucket(n: int) -> int | None:
    """The smallest mixed-step row bucket holding ``n`` rows, or None above the largest."""
    for b in MIXED_ROW_BUCKETS:
        if n <= b:
            return b
    return None


def table_width(blocks: int) -> int:
    """Block-table width for a step whose longest request holds ``blocks`` blocks."""
    return max(MIN_TABLE_WIDTH, 1 << max(0, (blocks - 1).bit_length()))


@dataclass
class _Shape:
    """Persistent inputs of one ``(rows, samples, width)`` and, once captured, its graph.

    ``samples`` 0: a decode-only step (logits of every row); else a mixed step whose logits are
    those of ``samples`` gathered rows (each chunk's last).
    """

    bucket: int  # rows
    width: int
    # int32 [bucket * (4 + width) + samples]: ids, positions, slots, lengths, table, gathered
    packed: GPUArray
    samples: int = 0
    graph: Any = None
    logits: GPUArray | None = None  # the graph's float32 [bucket or samples, vocab] output
    eager_only: bool = False
    invariant: _InvariantStep | None = None  # the batch-invariant step's bound calls

    @staticmethod
    def size(bucket: int, width: int, samples: int) -> int:
        """int32 elements of the packed inputs of such a shape."""
        return bucket * (4 + width) + samples

    def views(self) -> tuple[GPUArray, GPUArray, GPUArray, GPUArray, GPUArray]:
        """The inputs: ids and positions ``[1, B]``, slots, lengths ``[B]``, table ``[B, W]``."""
        b, p = self.bucket, self.packed
        return (
            p[0:b].reshape(1, b),
            p[b : 2 * b].reshape(1, b),
            p[2 * b : 3 * b],
            p[3 * b : 4 * b],
            p[4 * b : b * (4 + self.width)].reshape(b, self.width),
        )

    def sample_rows(self) -> GPUArray:
        """The rows whose logits a mixed step returns ``[samples]`` (each chunk's last)."""
        return self.packed[self.bucket * (4 + self.width) :]


def invariant_support(model: LlamaModel) -> str | None:
    """Why the batch-invariant step cannot run ``model`` (None when it can).

    It needs what ``generate``'s fused step needs (``llama_decode.supports``) and a head dim the
    one-launch attention is built for.
    """
    if not llama_decode.supports(model):
        return (
            "the model needs the unfused decode step (float32 weights, q/k norm, partial RoPE or "
            "sizes the fused kernels do not take)"
        )
    if model.config.head_dim not in ops.SINGLE_PASS_HEAD_DIMS:
        return f"head dim {model.config.head_dim} has no one-launch decode attention kernel"
    return None


@dataclass
class _InvariantBuffers:
    """The intermediates of a batch-invariant step of ``bucket`` rows.

    Shared by every table width of the bucket: steps run one after the other on the engine's
    stream, and a step's logits are consumed (sampled) before the next step is enqueued.
    """

    residual: GPUArray
    normed: GPUArray  # each norm prologue's output
    q: GPUArray
    attn: GPUArray
    act: GPUArray
    logits: GPUArray

    @classmethod
    def make(cls, model: LlamaModel, b: int) -> _InvariantBuffers:
        """Zeroed buffers for ``b`` rows of ``model``."""
        cfg, dtype = model.config, model.dtype
        hidden = cfg.hidden_size
        return cls(
            gp.zeros((b, hidden), dtype), gp.zeros((b, hidden), dtype),
            gp.zeros((b, cfg.num_heads * cfg.head_dim), dtype),
            gp.zeros((b, cfg.num_heads, cfg.head_dim), dtype),
            gp.zeros((b, cfg.intermediate_size), dtype), gp.zeros((b, cfg.vocab_size), gp.float32),
        )  # fmt: skip


class _InvariantStep:
    """The bound calls of one batch-invariant step over a shape's inputs (see the module doc).

    Bound once per shape over the bucket's buffers, so the step allocates nothing and is
    captured in a CUDA graph like the other steps.
    """

    def __init__(
        self, model: LlamaModel, cache: PagedKVCache, shape: _Shape, bufs: _InvariantBuffers
    ) -> None:
        cfg = model.config
        b = shape.bucket
        hq, d = cfg.num_heads, cfg.head_dim
        ids, positions, slots, lens, table = shape.views()
        self.model, self.cache = model, cache
        self.ids, self.lens, self.table = ids.reshape(b), lens, table
        self.residual, hidden_normed, self.q = bufs.residual, bufs.normed, bufs.q
        self.attn, self.act, self.logits = bufs.attn, bufs.act, bufs.logits
        resid, rotary = self.residual, model.rotary
        attn_rows = self.attn.reshape(b, hq * d)
        pos = positions.reshape(b)
        self.layers: list[tuple[ops.BoundDecodeLinearRows, ...]] = []
        for i, layer in enumerate(model.layers):
            rope = ops.PagedRopeKV(rotary.cos, rotary.sin, pos, slots, cache.k[i], cache.v[i], hq)
            self.layers.append((
                ops.bind_decode_linear_rows(
                    resid, layer.qkv.weight, layer.qkv.bias, norm_weight=layer.input_norm.weight,
                    eps=layer.input_norm.eps, epilogue="rope_kv", rope_kv=rope, out=self.q,
                    normed=hidden_normed,
                ),
                ops.bind_decode_linear_rows(attn_rows, layer.o_proj.weight, layer.o_proj.bias,
                                            epilogue="residual", residual=resid),
                ops.bind_decode_linear_rows(
                    resid, layer.mlp.gate_up.weight, norm_weight=layer.post_norm.weight,
                    eps=layer.post_norm.eps, epilogue="swiglu", out=self.act,
                    normed=hidden_normed,
                ),
                ops.bind_decode_linear_rows(self.act, layer.mlp.down.weight,
                                            epilogue="residual", residual=resid),
            ))  # fmt: skip
        self.head = ops.bind_decode_linear_rows(
            resid, model.lm_head.weight, norm_weight=model.norm.weight, eps=model.norm.eps,
            out_dtype=gp.float32, out=self.logits, normed=hidden_normed,
        )  # fmt: skip

    def __call__(self) -> GPUArray:
        """Enqueue the step; returns the float32 logits ``[bucket, vocab]`` (always the same)."""
        m = self.model
        m.embed(self.ids, out=self.residual)
        cfg = m.config
        q = self.q.reshape(self.q.shape[0], cfg.num_heads, cfg.head_dim)
        for i, (qkv, o_proj, gate_up, down) in enumerate(self.layers):
            qkv()
            ops.decode_attention_paged_single(
                q, self.cache.k[i], self.cache.v[i], self.lens, self.table,
                scale=m.attention.scale, out=self.attn,
            )  # fmt: skip
            o_proj()
            gate_up()
            down()
        return self.head()


class _PagedAttend:
    """Decode attention of a padded step over the paged cache (an ``Attend`` strategy).

    :meth:`from_projection` takes the fused q/k/v projection: one kernel
    (:func:`pygpukit.ops.rope_kv_paged_write`) splits it, rotates q and k at each row's position
    and writes k and v into the cache at the row's slot, where the three split copies, RoPE and
    the paged write took five. Called with q, k and v (models with q/k norms), the keys and
    values are written with :func:`pygpukit.ops.paged_kv_cache_write`.
    """

    def __init__(
        self, model: LlamaModel, cache: PagedKVCache, b: int, slots: GPUArray, lens: GPUArray,
        table: GPUArray,
    ) -> None:  # fmt: skip
        self.model, self.cache, self.b = model, cache, b
        self.slots, self.lens, self.table = slots, lens, table

    def from_projection(
        self, i: int, qkv: GPUArray, positions: GPUArray, *, last_query_only: bool = False
    ) -> GPUArray:
        """Attention output ``[1, B, Hq * D]`` of layer ``i`` from its projection ``[1, B, W]``.

        ``last_query_only`` changes nothing here: each of the ``B`` sequences has one query in a
        decode step, which is already its last.
        """
        m, rot = self.model, self.model.rotary
        q = ops.rope_kv_paged_write(
            qkv, rot.cos, rot.sin, positions, self.cache.k[i], self.cache.v[i], self.slots,
            q_heads=m.config.num_heads,
        )  # fmt: skip
        return self._attend(i, q)

    def __call__(self, i: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
        """Attention output ``[1, B, Hq * D]`` of layer ``i`` from its rotated q, k and v."""
        cfg, b = self.model.config, self.b
        ops.paged_kv_cache_write(
            k.reshape(b, cfg.num_kv_heads, cfg.head_dim),
            v.reshape(b, cfg.num_kv_heads, cfg.head_dim),
            self.cache.k[i], self.cache.v[i], self.slots,
        )  # fmt: skip
        return self._attend(i, q.reshape(b, cfg.num_heads, cfg.head_dim))

    def _attend(self, i: int, q: GPUArray) -> GPUArray:
        cfg = self.model.config
        o = ops.decode_attention(
            q, self.cache.k[i], self.cache.v[i], self.lens, scale=self.model.attention.scale,
            block_table=self.table,
        )  # fmt: skip
        return o.reshape(1, self.b, cfg.q_size)


class DecodeGraphs:
    """Runs decode and mixed steps padded to a bucket, replaying one CUDA graph per shape.

    ``scratch_block``: a cache block no request uses (padding rows write there).
    ``use_graphs``: capture and replay (default: on the CUDA backend); off, every step runs
    eagerly on the same padded inputs. ``batch_invariant``: run the batch-invariant step (see
    the module docstring; ``ValueError`` for a model it cannot run, :func:`invariant_support`).
    ``mixed``: also take steps with prompt chunks (up to :data:`MIXED_ROW_BUCKETS`' last
    rows; never batch-invariant ones, whose prompts run whole and alone).
    """

    def __init__(
        self,
        model: LlamaModel,
        cache: PagedKVCache,
        scratch_block: int,
        *,
        use_graphs: bool | None = None,
        batch_invariant: bool = False,
        mixed: bool = True,
    ) -> None:
        if not 0 <= scratch_block < cache.num_blocks:
            raise ValueError(f"scratch block {scratch_block} is not in the cache's blocks")
        if batch_invariant and (why := invariant_support(model)) is not None:
            raise ValueError(f"batch-invariant decode cannot run this model: {why}")
        self.batch_invariant = batch_invariant
        #: Whether steps with prompt chunks run here (see the class docstring).
        self.mixed = mixed and not batch_invariant
        self.model, self.cache, self.scratch = model, cache, scratch_block
        self.use_graphs = gp.backend_name() == "cuda" if use_graphs is None else use_graphs
        self._shapes: dict[tuple[int, int, int], _Shape] = {}
        self._invariant_buffers: dict[int, _InvariantBuffers] = {}
        #: Steps run by graph replay, and eagerly (first use of a shape, or no graphs).
        self.replays = 0
        self.eager_steps = 0
        #: Of those, the mixed steps (with prompt chunks).
        self.mixed_replays = 0
        self.mixed_eager_steps = 0

    def accepts(self, chunks: Sequence[ScheduledChunk]) -> bool:
        """Whether this step runs here: decode-only, or mixed within the row buckets.

        At most ``BATCH_BUCKETS[-1]`` chunks either way.
        """
        if not 0 < len(chunks) <= BATCH_BUCKETS[-1]:
            return False
        rows = 0
        for c in chunks:
            rows += c.count
        if rows == len(chunks):
            return True
        return self.mixed and rows <= MIXED_ROW_BUCKETS[-1]

    def takes_device_ids(self, chunks: Sequence[ScheduledChunk]) -> bool:
        """Whether this step can run on token ids still on the device.

        Every step :meth:`logits` runs can (``token_ids``: copied into the step's first rows on
        the stream), the batch-invariant step too: its rows read the same inputs.
        """
        return self.accepts(chunks)

    def shape_key(
        self, chunks: Sequence[ScheduledChunk], grow: Collection[Request] = ()
    ) -> tuple[int, int, int]:
        """``(rows, samples, width)`` of the step ``chunks`` (one it :meth:`accepts`).

        ``samples`` is 0 for a decode-only step. ``grow``: requests that get one more block
        before the step runs.
        """
        n = len(chunks)
        rows = sum(c.count for c in chunks)
        blocks = max(len(c.request.blocks) + (c.request in grow) for c in chunks)
        width = table_width(blocks)
        bucket = batch_bucket(n)
        if bucket is None:
            raise ValueError(f"a step of {n} chunks; at most {BATCH_BUCKETS[-1]} run here")
        if rows == n:
            return bucket, 0, width
        rb = row_bucket(rows)
        if rb is None or not self.mixed:
            raise ValueError(
                f"a step of {rows} token rows; mixed steps of at most {MIXED_ROW_BUCKETS[-1]} "
                "rows run here"
            )
        return rb, bucket, width

    def captured(self, chunks: Sequence[ScheduledChunk], grow: Collection[Request] = ()) -> bool:
        """Whether the step ``chunks`` replays a captured graph (True without graphs).

        False for a step this class does not take (:meth:`accepts`). A step of a shape not
        captured yet runs eagerly and is captured right after.
        """
        if not self.accepts(chunks):
            return False
        if not self.use_graphs:
            return True
        shape = self._shapes.get(self.shape_key(chunks, grow))
        return shape is not None and shape.graph is not None

    def pack(
        self, chunks: Sequence[ScheduledChunk], bucket: int, width: int, samples: int = 0
    ) -> np.ndarray:
        """The host image of a shape's ``packed`` inputs for these chunks (padding included).

        A token not known on the host yet (its id still on the device) packs as id 0.
        ``samples``: a mixed step's gathered rows (each chunk's last row; padding gathers
        row 0), 0 for a decode-only step.
        """
        bs = self.cache.block_size
        host = np.zeros(_Shape.size(bucket, width, samples), np.int32)
        ids, pos, slots, lens = (host[i * bucket : (i + 1) * bucket] for i in range(4))
        table = host[4 * bucket : bucket * (4 + width)].reshape(bucket, width)
        gathered = host[bucket * (4 + width) :]
        row = 0
        for i, c in enumerate(chunks):
            r, p, k = c.request, c.start, c.count
            if k == 1:  # the common case, without numpy's per-call overhead
                ids[row] = r.tokens[p] if p < len(r.tokens) else 0
                pos[row] = p
                slots[row] = r.blocks[p // bs] * bs + p % bs
                table[row, : len(r.blocks)] = r.blocks
            else:
                known = r.tokens[p : p + k]
                ids[row : row + len(known)] = known
                where = np.arange(p, p + k)
                pos[row : row + k] = where
                slots[row : row + k] = np.asarray(r.blocks)[where // bs] * bs + where % bs
                table[row : row + k, : len(r.blocks)] = r.blocks
            row += k
            if samples:
                gathered[i] = row - 1
        lens[:row] = pos[:row] + 1
        slots[row:] = self.scratch * bs
        lens[row:] = 1
        table[row:, 0] = self.scratch
        return host

    def logits(
        self,
        chunks: Sequence[ScheduledChunk],
        *,
        token_ids: GPUArray | None = None,
        capture: bool = True,
    ) -> GPUArray:
        """float32 logits ``[len(chunks), vocab]`` of the step (row i: chunk i's last token).

        Writes every token's key and value into the cache on the way. ``token_ids`` (int32
        ``[K]`` on the device): the ids of the first K rows (the first K chunks are single
        tokens), copied into the inputs on the stream after the upload, so a step can run on
        the ids the previous step sampled before the host has read them. ``capture``: capture
        a new shape's graph after its eager step (off: the shape stays uncaptured).
        """
        n = len(chunks)
        if not self.accepts(chunks):
            raise ValueError(
                f"not a step of at most {BATCH_BUCKETS[-1]} requests (and at most "
                f"{MIXED_ROW_BUCKETS[-1]} token rows with prompt chunks)"
            )
        key = self.shape_key(chunks)
        shape = self._shapes.get(key)
        if shape is None:
            bucket, samples, width = key
            packed = gp.empty((_Shape.size(bucket, width, samples),), gp.int32)
            shape = self._shapes[key] = _Shape(bucket, width, packed, samples)
        # Uploaded on the side stream (see .side_stream): with a step queued ahead (the engine's
        # lookahead), a blocking upload on this stream would wait for that step too.
        shape.packed[...] = upload(self.pack(chunks, shape.bucket, shape.width, shape.samples))
        if token_ids is not None:
            k = int(token_ids.shape[0])
            if any(c.count != 1 for c in chunks[:k]):
                raise ValueError("device-side token ids go to single-token chunks only")
            shape.packed[0:k] = token_ids
        if shape.graph is not None:
            shape.graph.replay()
            self.replays += 1
            self.mixed_replays += shape.samples > 0
            assert shape.logits is not None
            return shape.logits[0:n]
        out = self._forward(shape)
        self.eager_steps += 1
        self.mixed_eager_steps += shape.samples > 0
        if capture and self.use_graphs and not shape.eager_only:
            self._capture(shape)
        return out[0:n]

    def _capture(self, shape: _Shape) -> None:
        try:
            with gp.graph_capture() as g:
                logits = self._forward(shape)
        except Exception as exc:  # keep serving eagerly: slower, same results
            shape.eager_only = True
            log.warning(
                "step of %d rows (%d sampled, table width %d) could not be captured as a CUDA "
                "graph (%s: %s); it runs eagerly",
                shape.bucket, shape.samples, shape.width, type(exc).__name__, exc,
            )  # fmt: skip
            return
        shape.graph, shape.logits = g, logits

    def _forward(self, shape: _Shape) -> GPUArray:
        """Enqueue the padded step over ``shape``'s inputs; float32 logits.

        ``[bucket, vocab]`` for a decode-only step, ``[samples, vocab]`` for a mixed one.
        """
        if self.batch_invariant:
            if shape.invariant is None:
                bufs = self._invariant_buffers.get(shape.bucket)
                if bufs is None:
                    bufs = _InvariantBuffers.make(self.model, shape.bucket)
                    self._invariant_buffers[shape.bucket] = bufs
                shape.invariant = _InvariantStep(self.model, self.cache, shape, bufs)
            return shape.invariant()
        m, b = self.model, shape.bucket
        ids, positions, slots, lens, table = shape.views()
        attend = _PagedAttend(m, self.cache, b, slots, lens, table)
        x = m.hidden_states(ids, positions, attend).reshape(b, m.config.hidden_size)
        if shape.samples:
            # "clip", not "raise": a raising take checks its indices on the host, a copy a
            # capture refuses (they are valid rows by construction).
            x = gp.take(x, shape.sample_rows(), axis=0, mode="clip")
        return m.logits(x)

    def shapes(self) -> list[tuple[int, int, bool]]:
        """``(bucket, width, captured)`` of every decode-only shape seen so far."""
        return [
            (s.bucket, s.width, s.graph is not None) for s in self._shapes.values() if not s.samples
        ]

    def mixed_shapes(self) -> list[tuple[int, int, int, bool]]:
        """``(rows, samples, width, captured)`` of every mixed shape seen so far."""
        return [
            (s.bucket, s.samples, s.width, s.graph is not None)
            for s in self._shapes.values()
            if s.samples
        ]

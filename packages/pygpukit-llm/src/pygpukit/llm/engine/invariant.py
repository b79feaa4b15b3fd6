"""A batch-invariant engine step: each request's rows computed as ``CausalLM.generate`` does.

In batch-invariant mode the planner schedules every prompt whole (no chunking, no prefix
cache) and every later token alone, so a step is decode tokens (one per running request) and
whole prompts. Rather than one
flattened forward pass over all of them (whose GEMMs round each row by the step's total row
count), the step runs:

- the decode tokens through :class:`~.decode_graphs.DecodeGraphs`' batch-invariant step (each
  row bitwise ``generate``'s fused one-token step), the known tokens of a preempted request
  being recomputed among them (one a step, not sampled: its keys and values come out as they
  were first written);
- each prompt alone through the model's own prefill (:func:`prefill_like_generate`: the same
  ``hidden_states`` over the prompt's tokens with ``attend_uncached``, as ``generate``'s
  prefill runs it: the same GEMM shapes, the same fused RoPE and flash prefill attention), its
  keys and values then copied into its paged blocks, so they and its first token are
  ``generate``'s.

The sampled rows' logits come back in chunk order, as the flattened path returns them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from ..models.llama import LlamaModel
from .decode_graphs import DecodeGraphs
from .paged_cache import PagedKVCache
from .runner import ModelRunner, ScheduledChunk

__all__ = ["invariant_step_logits", "prefill_like_generate"]


def _is_decode(chunk: ScheduledChunk) -> bool:
    """One token after a computed prefix: a decode token (prompts start at 0, whole)."""
    return chunk.count == 1 and chunk.start > 0


def invariant_step_logits(
    chunks: Sequence[ScheduledChunk], decode: DecodeGraphs, runner: ModelRunner, block_size: int
) -> GPUArray:
    """float32 logits ``[R, vocab]`` of the step's sampled chunks, in chunk order.

    ``chunks`` are decode tokens (a recomputed request's known tokens among them, not sampled)
    and whole prompts; ``ValueError`` for a prompt chunk that does not start its request (the
    planner of a batch-invariant engine never makes one).
    """
    for c in chunks:
        if not _is_decode(c) and c.start != 0:
            raise ValueError(
                f"a batch-invariant step got a prompt chunk of tokens {c.start}.."
                f"{c.start + c.count - 1}; prompts must be scheduled whole"
            )
    decoding = [c for c in chunks if _is_decode(c)]
    sampled = [c for c in chunks if c.sample]
    if decoding and len(decoding) == len(sampled) == len(chunks):
        return decode.logits(decoding)  # the usual step: one sampled token per request
    logits = decode.logits(decoding) if decoding else None
    out = gp.empty((len(sampled), runner.model.config.vocab_size), gp.float32)
    row = r = 0
    for c in chunks:
        if _is_decode(c):
            if c.sample:
                assert logits is not None
                out[r : r + 1] = logits[row : row + 1]
            row += 1
        else:
            # A prompt alone, as generate prefills it (its logits row is made even when a
            # recomputed request does not sample it: the forward pass is the same).
            one = prefill_like_generate(runner.model, runner.cache, c, block_size)
            if c.sample:
                out[r : r + 1] = one
        r += c.sample
    return out


def prefill_like_generate(
    model: LlamaModel, cache: PagedKVCache, chunk: ScheduledChunk, block_size: int
) -> GPUArray:
    """float32 logits ``[1, vocab]`` of a whole prompt's last token, computed as ``generate``.

    ``CausalLM.generate`` prefills with ``model.hidden_states(..., model.attend_uncached(...))``
    over the prompt alone; this runs the same, with the keys and values each layer makes
    (``[1, Hkv, S, D]``, the values ``generate`` writes into its cache) copied into the
    request's paged blocks. The engine's flattened runner computes the same attention another
    way (its own RoPE and attention calls), which rounds differently.
    """
    r, s = chunk.request, chunk.count
    cfg = model.config
    p = np.arange(s)
    blocks = np.asarray(r.blocks, np.int64)
    slots = gp.from_numpy((blocks[p // block_size] * block_size + p % block_size).astype(np.int32))

    def store(i: int, k: GPUArray, v: GPUArray) -> None:
        def tokens_first(t: GPUArray) -> GPUArray:
            return t.reshape(cfg.num_kv_heads, s, cfg.head_dim).transpose(1, 0, 2).contiguous()

        ops.paged_kv_cache_write(tokens_first(k), tokens_first(v), cache.k[i], cache.v[i], slots)

    ids = gp.from_numpy(np.asarray(r.tokens[:s], np.int32)[None, :])
    positions = gp.from_numpy(p.astype(np.int32)[None, :])
    x = model.hidden_states(ids, positions, model.attend_uncached(store), last_position_only=True)
    return model.logits(x[:, 0])

"""One sequence's prefill at a padded length, replayed from a captured CUDA graph.

An eager prefill launches every kernel of every layer from Python (about 330 for an 8B model):
the GPU waits for the host before the first kernel, between the first layer's short kernels,
and a launch latency between any two. A graph of the whole prefill is one launch. A graph fixes
its shapes and addresses, so the prompt is padded to a multiple of :data:`PAD_MULTIPLE` tokens
(id 0 after it) and copied into the graph's input buffer with the index of its last token; the
model's last layer keeps that row (``LlamaModel.hidden_states``' ``last_row``). Causal
attention keeps the padding out of every real row, and the padding's keys and values land in
cache slots past the prompt, which a decode step overwrites before it attends to them (a step
attends to the slots before its own only).

A padded length is captured the second time it is seen: its first prefill runs the same padded
work eagerly, which also makes every launch plan the capture needs. At most
:data:`MAX_LENGTHS` lengths are kept, the least recently used dropped first (a graph holds its
activations' memory), so prompts of ever-new lengths run eagerly and never pay a capture.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import env
from pygpukit.array import GPUArray

from .kv_cache import StaticKVCache
from .models.llama import LlamaModel

__all__ = ["GRAPHS_ENV", "MAX_LENGTHS", "PAD_MULTIPLE", "PaddedPrefill", "enabled"]

GRAPHS_ENV = "PYGPUKIT_LLM_PREFILL_GRAPHS"
env.register(
    GRAPHS_ENV,
    "flag",
    default=False,
    read="each model load (`CausalLM`)",
    package="pygpukit-llm",
    description="Run a single sequence's prefill (`generate`, `stream`, `chat`) of a "
    "float16/bfloat16 model padded to a multiple of 64 tokens and replayed from a CUDA graph "
    "per padded length, captured the second time a length is seen (at most 4 kept); off: every "
    "prefill launches its kernels one by one.",
)

#: Prompt lengths round up to a multiple of this many tokens (one graph serves each multiple).
PAD_MULTIPLE = 64

#: Padded lengths (and their graphs) kept at once, the least recently used dropped first.
MAX_LENGTHS = 4


def enabled() -> bool:
    """Whether models loaded now replay their prefills from graphs (:data:`GRAPHS_ENV`)."""
    return env.flag(GRAPHS_ENV)


@dataclass
class _Length:
    """A padded length's input buffer, positions and (once captured) graph and logits."""

    inputs: GPUArray  # int32 [P + 1]: the padded ids, then the row of the prompt's last token
    positions: GPUArray  # int32 [1, P]: 0 .. P - 1, also the cache slots
    graph: Any = None
    logits: GPUArray | None = None


class PaddedPrefill:
    """Prefill logits of a padded prompt, from a graph per padded length (see the module).

    ``capture=False`` runs the padded work eagerly every time (the CPU backend has no graphs).
    """

    def __init__(self, model: LlamaModel, cache: StaticKVCache, *, capture: bool) -> None:
        self.model, self.cache, self.capture = model, cache, capture
        self._lengths: OrderedDict[int, _Length] = OrderedDict()

    def padded_length(self, s: int) -> int | None:
        """The rows a prompt of ``s`` tokens runs as, or None when it must run unpadded.

        Unpadded: the padded length would not fit the cache's slots, the model has a sliding
        window (its mask is made on the host at the first call of a shape), or it is captured
        and the model is float32 (float32 prefill attention composes matmul and softmax with
        a causal mask uploaded at each call, which a graph cannot capture).
        """
        n = -(-s // PAD_MULTIPLE) * PAD_MULTIPLE
        if s <= 0 or n > self.cache.capacity or self.model.config.sliding_window is not None:
            return None
        if self.capture and self.model.dtype == np.float32:
            return None
        return n

    def logits(self, block: GPUArray, n: int) -> GPUArray:
        """Enqueue the prefill; float32 logits ``[1, vocab]`` of the prompt's last token.

        ``block`` (int32 on the device) starts with the ``n`` padded ids and the last token's
        row. The logits live in a buffer the next prefill of this length overwrites.
        """
        entry = self._lengths.pop(n, None)
        seen = entry is not None
        if entry is None:
            positions = gp.from_numpy(np.arange(n, dtype=np.int32).reshape(1, n))
            entry = _Length(gp.empty((n + 1,), gp.int32), positions)
        self._lengths[n] = entry  # the most recently used last
        while len(self._lengths) > MAX_LENGTHS:
            self._lengths.popitem(last=False)
        entry.inputs[...] = block[: n + 1]
        if entry.graph is not None and entry.logits is not None:
            entry.graph.replay()
            return entry.logits
        if not (self.capture and seen):
            return self._body(entry, n)
        with gp.graph_capture() as graph:
            logits = self._body(entry, n)
        entry.graph, entry.logits = graph, logits
        graph.replay()
        return logits

    def _body(self, entry: _Length, n: int) -> GPUArray:
        """The padded prefill's work on the entry's buffers (what a graph captures)."""
        m = self.model
        ids, last = entry.inputs[:n].reshape(1, n), entry.inputs[n:]
        attend = m.attend_uncached(cache=(self.cache.k, self.cache.v), slots=entry.positions)
        x = m.hidden_states(ids, entry.positions, attend, last_row=last)
        return m.logits(x[:, 0])

"""Generation: prefill, the decode step (captured once in a CUDA graph), and the token loop.

Device state lives in small int32 arrays that the step itself advances: the last token, its
position, the cache slot and length it implies, and ``history`` (every token by position, which
is also the repetition penalty's input). A step reads them from device memory, so the same
captured graph serves every position; the sampled token never leaves the GPU to feed the next
step. The host reads finished ids with a non-blocking download into pinned memory, issued
before it queues the next steps, so the GPU always has work queued while Python detokenizes and
never waits for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from . import padded_prefill
from .kv_cache import StaticKVCache
from .models import llama_decode
from .models.llama import LlamaModel
from .padded_prefill import PaddedPrefill

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "Decoder",
    "Generation",
    "GenerationOptions",
    "GenerationRequest",
    "GenerationStats",
    "SamplingParams",
]

#: Decode steps queued beyond the ids being read back: the GPU's lead over the host.
STEPS_AHEAD = 8


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generation, validated (``ValueError`` says which is wrong)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        def number(name: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not np.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
            return float(value)

        if number("temperature", self.temperature) < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature!r}")
        if not 0 < number("top_p", self.top_p) <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 keeps every token), got {self.top_p!r}")
        if not 0 <= number("min_p", self.min_p) <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 turns it off), got {self.min_p!r}")
        if number("repetition_penalty", self.repetition_penalty) <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (1 turns it off), got {self.repetition_penalty!r}"
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)):
            raise TypeError(f"top_k must be an int, got {type(self.top_k).__name__}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 keeps every token), got {self.top_k}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise TypeError(f"seed must be an int or None, got {type(self.seed).__name__}")

    @property
    def greedy(self) -> bool:
        """Argmax of the raw logits: the whole step, sampling included, is one graph."""
        return self.temperature == 0 and self.repetition_penalty == 1


#: Tokens a generation produces at most unless ``max_new_tokens`` says otherwise.
DEFAULT_MAX_NEW_TOKENS = 256


class GenerationOptions(TypedDict, total=False):
    """The keyword arguments of ``generate``, ``stream`` and ``chat`` (all optional).

    ``max_new_tokens`` (default 256) bounds the generated tokens; ``stop`` is a string or
    strings that end the text (not included); the others are :class:`SamplingParams`' fields,
    with its defaults (greedy).
    """

    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    seed: int | None
    stop: str | Sequence[str] | None


@dataclass(frozen=True)
class GenerationRequest:
    """:class:`GenerationOptions` validated: the length bound, stop strings and sampling."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    stop: str | Sequence[str] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> GenerationRequest:
        """Parse keyword arguments; ``TypeError`` / ``ValueError`` name the wrong one."""
        unknown = sorted(set(options) - set(GenerationOptions.__annotations__))
        if unknown:
            raise TypeError(
                f"unknown generation option(s) {', '.join(unknown)}; the options are "
                f"{', '.join(GenerationOptions.__annotations__)}"
            )
        sampling = dict(options)
        max_new = sampling.pop("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if isinstance(max_new, bool) or not isinstance(max_new, int):
            raise TypeError(f"max_new_tokens must be an int, got {type(max_new).__name__}")
        if max_new < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new}")
        stop = sampling.pop("stop", None)
        return cls(max_new, stop, SamplingParams(**sampling))


@dataclass(frozen=True)
class GenerationStats:
    """Counts and timings of one generation (seconds, tokens per second)."""

    prompt_tokens: int
    generated_tokens: int
    time_to_first_token_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


@dataclass(frozen=True)
class Generation:
    """The result of :meth:`CausalLM.generate`.

    ``token_ids`` are the generated ids only (an EOS that ended it included); ``text`` their
    text (special tokens skipped, cut before a stop string; ``""`` without a tokenizer);
    ``finish_reason`` is ``"stop"`` (an EOS id or a stop string) or ``"length"``.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    stats: GenerationStats = field(repr=False)


class Decoder:
    """Prefill and decode steps of one sequence over a :class:`StaticKVCache`."""

    def __init__(self, model: LlamaModel, cache: StaticKVCache) -> None:
        self.model, self.cache = model, cache
        length = cache.max_seq_len
        i32 = gp.int32
        self.token = gp.zeros((1,), i32)  # the last sampled token, not yet in the cache
        self.pos = gp.zeros((1,), i32)  # its position
        self.slot = gp.zeros((1,), i32)  # its cache slot: pos % capacity
        self.lens = gp.zeros((1,), i32)  # cached tokens it attends to: min(pos + 1, capacity)
        self.next_token = gp.zeros((1,), i32)
        self.history = gp.full((length,), -1, i32)  # token at each position, -1 past the end
        self._graphs: dict[tuple[str, str], Any] = {}  # by (step kind, step variant)
        self._graph_logits: GPUArray | None = None
        self.use_graphs = gp.backend_name() == "cuda"
        #: The fused step (four GEMVs and the attention a layer), where the model allows it.
        self.fused: llama_decode.FusedDecodeStep | None = None
        if llama_decode.supports(model):
            self.fused = llama_decode.FusedDecodeStep(
                model, cache, self.token, self.pos, self.lens, self.next_token, self.history
            )
        self.use_fused = self.fused is not None
        #: Prompts padded to a graph-replayed length (:mod:`.padded_prefill`); None: eager.
        self.padded: PaddedPrefill | None = None
        if self.use_graphs and padded_prefill.enabled():
            self.padded = PaddedPrefill(model, cache, capture=True)

    # --- the device-side steps --------------------------------------------------------------

    def _sample(self, logits: GPUArray, p: SamplingParams, gen: ops.Generator | None) -> None:
        if p.greedy:
            ops.argmax(logits, out=self.next_token)
            return
        penalty = p.repetition_penalty != 1
        ops.sample(
            logits,
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            min_p=p.min_p,
            repetition_penalty=p.repetition_penalty,
            prev_tokens=self.history.reshape(1, -1) if penalty else None,
            generator=gen,
            out=self.next_token,
        )

    def _advance(self) -> None:
        """Record next_token at pos + 1, make it the current token, set the next step's length.

        One launch on the device (``ops.decode_advance``).
        """
        ops.decode_advance(
            self.next_token, self.token, self.pos, self.lens, self.history, self.cache.capacity
        )

    def _attend_cached(self, i: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
        cfg = self.model.config
        self.cache.write(
            i, k.reshape(1, cfg.num_kv_heads, 1, cfg.head_dim),
            v.reshape(1, cfg.num_kv_heads, 1, cfg.head_dim), self.slot,
        )  # fmt: skip
        o = self.model.attention.decode(
            q.reshape(1, cfg.num_heads, cfg.head_dim), self.cache.k[i], self.cache.v[i], self.lens
        )
        return o.reshape(1, 1, cfg.q_size)

    def _step_logits(self) -> GPUArray:
        if self.use_fused and self.fused is not None:
            return self.fused()
        cap = self.cache.capacity
        gp.remainder(self.pos, cap, out=self.slot)
        gp.add(self.pos, 1, out=self.lens)
        gp.minimum(self.lens, cap, out=self.lens)
        x = self.model.hidden_states(
            self.token.reshape(1, 1), self.pos.reshape(1, 1), self._attend_cached
        )
        return self.model.logits(x.reshape(1, -1))

    # --- the host-side API ---------------------------------------------------------------------

    def prefill(
        self, prompt: Sequence[int] | np.ndarray, p: SamplingParams, gen: ops.Generator | None
    ) -> None:
        """Run the prompt through the model in one pass, fill the cache, sample the first token."""
        s, length = len(prompt), self.cache.max_seq_len
        padded = self.padded.padded_length(s) if self.padded is not None else None
        n = s if padded is None else padded  # the rows the prefill runs
        # One upload: the (padded) ids, the last token's row (also its position), the
        # positions (also the cache slots) and the history; the state arrays take theirs by
        # device copies, which need no host wait (every host-to-device copy is one the GPU
        # idles through at the start of a prefill), queued after the layers: only the sampling
        # and the state's advance read them, and the host's time before the first layer is
        # time the GPU waits.
        ids_host = np.asarray(prompt, np.int32)  # no copy for the int32 ids generate passes
        host = np.empty(2 * n + 1 + length, np.int32)
        host[:s] = ids_host
        host[s:n] = 0  # padding: any id in range
        host[n] = s - 1
        host[n + 1 : 2 * n + 1] = np.arange(n)
        host[2 * n + 1 :] = -1
        host[2 * n + 1 : 2 * n + 1 + s] = ids_host
        block = gp.from_numpy(host)
        if padded is not None and self.padded is not None:
            logits = self.padded.logits(block, n)
        else:
            logits = self._unpadded_logits(block, s)
        self.history[...] = block[2 * n + 1 :]
        self.pos[...] = block[n : n + 1]
        self._sample(logits, p, gen)
        self._advance()

    def _unpadded_logits(self, block: GPUArray, s: int) -> GPUArray:
        """float32 logits ``[1, vocab]`` of the last of ``s`` tokens, prefilled eagerly.

        Their ids and positions are in ``block``, as :meth:`prefill` lays it out.
        """
        ids, positions = block[:s].reshape(1, s), block[s + 1 : 2 * s + 1].reshape(1, s)
        if s <= self.cache.capacity:  # keys and values go straight into slots 0 .. s - 1
            cache = (self.cache.k, self.cache.v)
            attend = self.model.attend_uncached(cache=cache, slots=positions)
        else:  # a sliding window keeps the last tokens only: written through the slot map
            slots = self.cache.prefill_slots(s)

            def store(i: int, k: GPUArray, v: GPUArray) -> None:
                self.cache.write(i, k, v, slots)

            attend = self.model.attend_uncached(store)
        x = self.model.hidden_states(ids, positions, attend, last_position_only=True)
        return self.model.logits(x[:, 0])

    def decode_step(self, p: SamplingParams, gen: ops.Generator | None = None) -> None:
        """Queue one decode step: the current token in, the next one sampled on the device.

        On the GPU this replays a CUDA graph captured on first use (greedy: one graph for the
        whole step; sampling: the model's graph, the sampling kernel with a fresh random
        offset, then a small graph that advances the state). No host wait, no allocation.
        """
        if not self.use_graphs:
            if p.greedy:
                self._greedy_step()
            else:
                self._sample(self._step_logits(), p, gen)
                self._advance()
            return
        if p.greedy:
            self._graph("greedy", self._capture_greedy).replay()
            return
        logits = self._graph("logits", self._capture_logits)
        advance = self._graph("advance", self._advance)
        logits.replay()
        assert self._graph_logits is not None
        self._sample(self._graph_logits, p, gen)
        advance.replay()

    def _greedy_step(self) -> None:
        """The step, its argmax and the state's advance.

        The fused step picks the token and advances the state in the head's launch.
        """
        if self.use_fused and self.fused is not None and self.fused.has_greedy:
            self.fused.greedy()
            return
        ops.argmax(self._step_logits(), out=self.next_token)
        self._advance()

    def _capture_greedy(self) -> None:
        self._greedy_step()

    def _capture_logits(self) -> None:
        self._graph_logits = self._step_logits()

    def _variant(self) -> str:
        """Which step the graphs capture: unfused, fused, or fused with one-launch attention."""
        if not self.use_fused or self.fused is None:
            return "unfused"
        return "fused_single" if self.fused.single_pass else "fused"

    def _graph(self, kind: str, body: Any) -> Any:
        """The graph of ``body`` for this step kind and variant, captured on first use."""
        key = (kind, self._variant())
        if key not in self._graphs:
            with gp.graph_capture() as g:
                body()
            self._graphs[key] = g
        return self._graphs[key]

    def run(
        self,
        prompt: Sequence[int] | np.ndarray,
        max_new: int,
        p: SamplingParams,
        eos: frozenset[int],
    ) -> Iterator[tuple[int, float]]:
        """Yield ``(token id, arrival time)`` for up to ``max_new`` tokens; stops after an EOS.

        Reads ids back with non-blocking downloads: each read is issued after the steps queued
        so far, then ``STEPS_AHEAD`` more steps are queued before the host waits on it.
        """
        s = len(prompt)
        n = min(max_new, self.cache.max_seq_len - s)
        if n <= 0:
            return
        gen = ops.Generator(p.seed) if not p.greedy else None
        self.prefill(prompt, p, gen)
        view = self.history[s : s + n]
        host = gp.memory.pinned_empty((n,), np.int32) if self.use_graphs else np.empty(n, np.int32)
        queued, delivered = 1, 0  # prefill sampled the first token
        while delivered < n:
            ready = queued
            pending = view.to_numpy(blocking=False, out=host)
            while queued < min(n, ready + STEPS_AHEAD):
                self.decode_step(p, gen)
                queued += 1
            ids = pending.result()[delivered:ready].tolist()
            now = time.perf_counter()
            for t in ids:
                delivered += 1
                yield int(t), now
                if t in eos:
                    return

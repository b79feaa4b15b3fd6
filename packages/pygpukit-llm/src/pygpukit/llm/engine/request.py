"""One request inside the engine: its tokens, its KV blocks, its text, and what it has reported.

Tokens are the prompt followed by what was generated; ``num_computed`` of them have their keys
and values in the request's blocks. Prefill chunks, decode steps and the recomputation after a
preemption are all "compute the next tokens, and sample when none is left", so a request needs
no other state. Text is assembled as :class:`~pygpukit.llm.CausalLM` assembles it (incremental
detokenizer, stop strings held back until they cannot match), so both give the same text.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pygpukit import ops

from .params import RequestParams

__all__ = ["Request", "RequestOutput", "RequestStatus", "TokenLogprob"]


class RequestStatus(enum.Enum):
    """Where a request is: waiting for admission, in the running batch, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability and the ``top`` most likely alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RequestOutput:
    """What a request produced in one step (delivered to its sink, in order).

    ``text``: new text (may be empty); ``token_ids``: new token ids; ``logprobs``: one entry
    per new token when asked for; ``finish_reason``: None while running, else ``"stop"`` (EOS
    or a stop string), ``"length"`` (max_tokens or the context), ``"abort"`` (cancelled) or
    ``"error"`` (``error`` says what failed). The final output carries the counts.
    """

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    error: str | None = None


Sink = Callable[[RequestOutput], None]


@dataclass(eq=False)
class Request:
    """Engine-side state of one request (owned by the engine thread)."""

    request_id: str
    prompt_ids: list[int]
    params: RequestParams
    sink: Sink
    eos_token_ids: frozenset[int]
    tokenizer: Any = None
    arrival: float = field(default_factory=time.perf_counter)
    status: RequestStatus = RequestStatus.WAITING
    tokens: list[int] = field(init=False)
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    cached_tokens: int = 0
    generator: ops.Generator | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    preemptions: int = 0
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt_ids)
        s = self.params.sampling
        if not s.greedy:
            self.generator = ops.Generator(s.seed)
        tok = self.tokenizer
        self._detok = tok.detokenizer(context=self.prompt_ids[-4:]) if tok is not None else None
        self._stops = tok.stop_strings(self.params.stop) if tok is not None else None

    @property
    def num_output(self) -> int:
        """Tokens generated so far."""
        return len(self.tokens) - len(self.prompt_ids)

    def append(self, token: int) -> tuple[str, str | None]:
        """Record a sampled token; the new text and the finish reason it causes (None: go on)."""
        return self.text_of(token, self.add(token))

    def add(self, token: int) -> str | None:
        """Record a sampled token's id, no text yet; the finish reason it causes.

        ``"stop"`` for an EOS id, ``"length"`` at ``max_tokens``, else None. :meth:`text_of`
        then gives its text (tokens in order).
        """
        self.tokens.append(token)
        if token in self.eos_token_ids and not self.params.ignore_eos:
            return "stop"
        if self.num_output >= self.params.max_tokens:
            return "length"
        return None

    def text_of(self, token: int, reason: str | None) -> tuple[str, str | None]:
        """The new text of ``token`` and the finish reason once stop strings are looked at.

        ``token`` was recorded by :meth:`add`, which gave ``reason``. An EOS id adds no text
        of its own; a stop string ends the request even when the length limit was reached by
        the same token.
        """
        if reason == "stop":  # add() says "stop" for an EOS id only
            return self._final_text(), "stop"
        text = ""
        if self._detok is not None and self._stops is not None:
            text, cut = self._stops.feed(self._detok.add(token))
            if cut:
                return text, "stop"
        if reason is not None:
            return text + self._final_text(), reason
        return text, None

    def _final_text(self) -> str:
        """What the detokenizer and the stop-string filter still hold, at the end."""
        if self._detok is None or self._stops is None:
            return ""
        piece, cut = self._stops.feed(self._detok.flush())
        return piece + ("" if cut else self._stops.flush())

    def final_text_at_limit(self) -> str:
        """The held-back text when the request ends for lack of room (the context is full)."""
        return self._final_text()

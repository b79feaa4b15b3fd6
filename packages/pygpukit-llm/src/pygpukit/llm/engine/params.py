"""What one request asks for: its sampling settings, its length limit, stop strings, logprobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..generate import SamplingParams

__all__ = ["MAX_LOGPROBS", "RequestParams"]

#: Most alternatives per token a request may ask log-probabilities for (OpenAI's chat limit).
MAX_LOGPROBS = 5


@dataclass(frozen=True)
class RequestParams:
    """A request's generation settings, validated at construction (``ValueError``/``TypeError``).

    ``max_tokens``: generated tokens at most (>= 1); ``sampling``: a :class:`SamplingParams`
    (greedy by default; its ``seed`` makes a sampled answer reproducible whatever else runs in
    the batch); ``stop``: strings that end the answer (not included); ``logprobs``: None, or
    how many most likely alternatives (0 to :data:`MAX_LOGPROBS`) to report with each token's
    own log-probability; ``ignore_eos``: keep going past an EOS id (benchmarks).
    """

    max_tokens: int = 16
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise TypeError(f"max_tokens must be an int, got {type(self.max_tokens).__name__}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not isinstance(self.sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams")
        stops: Sequence[object] = self.stop
        if isinstance(stops, str) or any(not isinstance(s, str) for s in stops):
            raise TypeError(f"stop must be a tuple of strings, got {self.stop!r}")
        if self.logprobs is not None:
            if isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int):
                raise TypeError(f"logprobs must be an int or None, got {self.logprobs!r}")
            if not 0 <= self.logprobs <= MAX_LOGPROBS:
                raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")

"""Batched sampling: one token per sampled row, each with its request's parameters and seed.

Greedy rows (most requests) take one argmax over the whole ``[R, vocab]`` logits. Each
sampling row is drawn from its own request's :class:`~pygpukit.ops.Generator`, as row 0 of a
one-row call: the numbers a seed gives then depend only on the request (its seed and how many
tokens it drew), never on which other requests share the step, and equal
:meth:`CausalLM.generate`'s for the same seed. Log-probabilities, asked by few requests, come
from the rows copied to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from .request import Request, TokenLogprob
from .side_stream import side_stream

__all__ = ["SampledTokens"]


def _logprobs(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    x = row.astype(np.float64)
    x = x - x.max()
    lp = x - np.log(np.exp(x).sum())
    best = np.argsort(-lp, kind="stable")[:top] if top else np.zeros(0, np.int64)
    return TokenLogprob(
        token_id=token,
        logprob=float(lp[token]),
        top=tuple((int(i), float(lp[i])) for i in best),
    )


class SampledTokens:
    """The tokens of a step, sampled on the device.

    :meth:`result` brings them to the host (the step's one host wait) and computes the
    asked-for log-probabilities.
    """

    def __init__(self, logits: GPUArray, requests: Sequence[Request]) -> None:
        self.logits, self.requests = logits, list(requests)
        ids = ops.argmax(logits)
        for i, r in enumerate(self.requests):
            s = r.params.sampling
            if s.greedy:
                continue
            penalty = s.repetition_penalty != 1
            prev = gp.from_numpy(np.asarray(r.tokens, np.int32)[None, :]) if penalty else None
            ops.sample(
                logits[i : i + 1],
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                min_p=s.min_p,
                repetition_penalty=s.repetition_penalty,
                prev_tokens=prev,
                generator=r.generator,
                out=ids[i : i + 1],  # one download for every row
            )
        self._ids = ids
        self._host = gp.memory.pinned_empty(tuple(ids.shape), ids.dtype)
        # Marks the end of this step on its stream: the engine may queue the next step behind
        # it before reading these ids, and the read must not wait for that one too.
        self._ready = gp.Event().record()

    def ready(self) -> bool:
        """Whether the step's ids are computed (any thread may ask; never waits)."""
        return bool(self._ready.query())

    @property
    def ids(self) -> GPUArray:
        """The sampled ids on the device (int32 ``[R]``), ready in stream order."""
        return self._ids

    def result(self) -> tuple[list[int], list[TokenLogprob | None]]:
        """Token ids and, per request, its :class:`TokenLogprob` (None unless asked)."""
        self._ready.synchronize()  # this step only, not what was queued behind it
        with side_stream():
            host = self._ids.to_numpy(out=self._host)  # pinned: one small direct copy
        tokens = [int(t) for t in host.tolist()]
        requests = self.requests
        wanted = [i for i, r in enumerate(requests) if r.params.logprobs is not None]
        logprobs: list[TokenLogprob | None] = [None] * len(requests)
        if wanted:
            index = gp.from_numpy(np.asarray(wanted, np.int32))
            rows = gp.take(self.logits, index, axis=0).to_numpy()
            for j, i in enumerate(wanted):
                top = requests[i].params.logprobs or 0
                logprobs[i] = _logprobs(rows[j], tokens[i], top)
        return tokens, logprobs

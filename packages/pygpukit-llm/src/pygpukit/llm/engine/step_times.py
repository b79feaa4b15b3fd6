"""When each phase of an engine step ended, for a step observer (``Engine.step_observer``).

The engine's host work and its one wait per step are what a model sharing the process with
another model loses time in (the interpreter lock, the other model's kernels): an observer
that gets these five host clock readings per step can tell which, without slowing the step
(five ``time.perf_counter()`` calls).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StepTimes"]


@dataclass(frozen=True)
class StepTimes:
    """``time.perf_counter()`` readings (seconds) of one step that ran a forward pass.

    ``start``: the step began (commands taken, then planning); ``enqueued``: its forward
    pass and sampling were queued on the device (with lookahead: the step was queued by the
    previous call, and by now the next decode step is queued behind it); ``flushed``: the
    previous step's text was handed out (host work done while the device computes);
    ``sampled``: the sampled ids were on the host (the step's one wait ended, the lock taken
    back); ``end``: the ids were recorded. ``tokens``: requests that got a token;
    ``decode_only``: the step ran the bucketed (graph-replayed) decode path;
    ``batch_tokens``: tokens the forward pass computed (decode tokens and prefill chunks);
    ``launch_s``: seconds the host took to queue the step's inputs, forward pass and
    sampling (with lookahead this happened during the previous call).
    """

    start: float
    enqueued: float
    flushed: float
    sampled: float
    end: float
    tokens: int
    decode_only: bool
    batch_tokens: int = 0
    launch_s: float = 0.0

    @property
    def host_s(self) -> float:
        """Seconds of host work in the step (everything but the wait for the sampled ids)."""
        return (self.flushed - self.start) + (self.end - self.sampled)

    @property
    def wait_s(self) -> float:
        """Seconds from the end of the overlapped host work to the sampled ids on the host."""
        return self.sampled - self.flushed

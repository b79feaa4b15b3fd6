"""Clocks: device events for GPU time, ``perf_counter`` for host and wall time.

Each timer's :meth:`~Timer.measure` runs ``fn`` ``inner`` times back to back and
returns milliseconds *per call*. Device timers bracket the calls with two
events on the current stream (``gp.Event(timing=True)``,
``torch.cuda.Event``, ``cupy.cuda.Event``) and wait on the second, so the
result is GPU time, free of host jitter. The host timer measures what the
calling thread spends per call without waiting for the GPU (launch overhead);
the wall timer synchronizes before and after (what a caller waits for).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["EventTimer", "HostTimer", "Timer", "WallTimer"]


class Timer(Protocol):
    """Something that times ``inner`` back-to-back calls of ``fn``."""

    def measure(self, fn: Callable[[], object], inner: int) -> float:
        """Milliseconds per call of ``fn`` over ``inner`` calls."""
        ...


class EventTimer:
    """GPU time between two device events recorded around the calls.

    ``make_event`` builds one timing-enabled event with ``record()`` and
    ``synchronize()``; ``elapsed_ms(start, end)`` reads the time between two
    completed events. The two events are made once and reused.
    """

    def __init__(
        self, make_event: Callable[[], Any], elapsed_ms: Callable[[Any, Any], float]
    ) -> None:
        self._start = make_event()
        self._end = make_event()
        self._elapsed_ms = elapsed_ms

    def measure(self, fn: Callable[[], object], inner: int) -> float:
        """GPU milliseconds per call of ``fn`` (waits for the end event)."""
        self._start.record()
        for _ in range(inner):
            fn()
        self._end.record()
        self._end.synchronize()
        return float(self._elapsed_ms(self._start, self._end)) / inner


class HostTimer:
    """Host time per call, without waiting for the device inside the timed region.

    ``sync`` runs before the timed loop (an idle queue at the start) and after
    it, outside the timing (no backlog carried into the next measurement).
    """

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync

    def measure(self, fn: Callable[[], object], inner: int) -> float:
        """Host milliseconds per call of ``fn``."""
        self._sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        t1 = time.perf_counter()
        self._sync()
        return (t1 - t0) * 1e3 / inner


class WallTimer:
    """Host clock from a synchronized start to a synchronized end, per call."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync

    def measure(self, fn: Callable[[], object], inner: int) -> float:
        """Wall milliseconds per call of ``fn``, the device's completion included."""
        self._sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        self._sync()
        return (time.perf_counter() - t0) * 1e3 / inner

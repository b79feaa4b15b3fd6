"""Host turns between engines of one process: a protected model's host work goes first.

Every engine thread and the HTTP event loop of a server run Python under one interpreter lock.
A Guaranteed model's step needs the lock for a short host phase (record the sampled ids, queue
the next step, hand out the text) between its waits for the device; beside a saturated
BestEffort model, whose engine thread and 64 client streams want the lock all the time, that
phase waits for the lock at every hand-over (each launch and copy gives the lock up), so the
promised model's inter-token latency grows with the other model's load.

:class:`HostPriority` gives the protected engines' host phases precedence without any help
from the interpreter: a protected engine marks its host phase (:meth:`HostPriority.host_phase`)
and tells when its device work is done and its thread is about to want the lock back
(:meth:`Engine.host_due`). Everything else that runs Python for the other models (their engine
threads, the event loop's writes of their streams) calls :meth:`HostPriority.yield_turn` at
points where stopping is safe: while a protected engine is in its host phase, or its step's
sampled ids are ready, the caller waits (the lock released) until it is done, at most
``max_wait_s`` per call, so a protected model that runs without pause slows the others down
but never stops them.

Host turns only order the threads at those points; inside its host phase a protected engine
still gives the lock up at every kernel launch and graph replay (the runtime releases it in
case the dispatch controller holds the launch), and each time waits to get it back while
another thread runs Python: up to the interpreter's switch interval per launch, a dozen times
a decode step. So the protected engine's thread keeps the lock through its launches during
its host phase (``launches_keep_gil``): its launches are never held (a protected partition is
never paced behind another), and a thread that wants the lock still gets it after a switch
interval, as from any thread running Python.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from pygpukit.stream import set_launches_keep_gil

__all__ = ["HostPriority"]

#: The longest one :meth:`HostPriority.yield_turn` waits: a few protected host phases (a small
#: model's is well under a millisecond at 4 requests).
MAX_WAIT_S = 0.003


class HostPriority:
    """Host turns of one process (see the module docstring); shared by a server's engines."""

    def __init__(self, *, max_wait_s: float = MAX_WAIT_S, launches_keep_gil: bool = True) -> None:
        if not max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0 seconds, got {max_wait_s!r}")
        self.max_wait_s = max_wait_s
        #: A protected engine's thread keeps the interpreter lock through its launches during
        #: its host phase (see the module docstring); False: they release it, as elsewhere.
        self.launches_keep_gil = launches_keep_gil
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._due: list[Callable[[], bool]] = []
        #: Calls of :meth:`yield_turn` that waited, and the seconds they waited in all.
        self.yields = 0
        self.yielded_s = 0.0
        #: Threads waiting in :meth:`yield_turn` now.
        self.waiting = 0

    def watch(self, due: Callable[[], bool]) -> None:
        """Register a protected engine's ``host_due`` (true: its thread wants the lock now).

        Registering the same predicate again changes nothing.
        """
        if due not in self._due:
            self._due.append(due)

    @contextlib.contextmanager
    def host_phase(self) -> Iterator[None]:
        """Mark a protected engine's host work: others yield to it until the block ends.

        Called on the protected engine's thread, whose launches keep the interpreter lock
        meanwhile (when ``launches_keep_gil``).
        """
        with self._cond:
            self._busy += 1
        kept = set_launches_keep_gil(True) if self.launches_keep_gil else None
        try:
            yield
        finally:
            if kept is not None:
                set_launches_keep_gil(kept)
            with self._cond:
                self._busy -= 1
                if self._busy == 0:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Inside :meth:`host_phase`: the protected engine waits for the device meanwhile.

        The phase goes on (others yield again) before the block's end returns, so a thread
        that sees the engine's step done (``host_due``) keeps yielding until the phase ends.
        """
        with self._cond:
            self._busy -= 1
            if self._busy == 0:
                self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._busy += 1

    def contended(self) -> bool:
        """Whether a protected engine is in its host phase or about to be."""
        return self._busy > 0 or any(due() for due in self._due)

    def yield_turn(self, max_wait_s: float | None = None) -> bool:
        """Wait while :meth:`contended`, at most ``max_wait_s`` (default: the object's).

        Returns True when it waited.
        """
        if not self.contended():
            return False
        start = time.perf_counter()
        deadline = start + (self.max_wait_s if max_wait_s is None else max_wait_s)
        with self._cond:
            self.waiting += 1
            while self.contended():
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                # Woken at the end of a host phase; a due engine that has not begun its
                # phase yet is polled at a short period.
                self._cond.wait(min(left, 2e-4))
            self.waiting -= 1
        self.yields += 1
        self.yielded_s += time.perf_counter() - start
        return True

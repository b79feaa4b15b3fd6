"""Streams and events.

Every thread has a current stream per device (by default a non-blocking stream
the runtime owns); ``with stream:`` makes another one current for the block.
Work on different streams may overlap; order it with events
(``stream.wait_event(event)``). Waiting calls release the GIL on CUDA.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from . import validation as _v
from .backend.select import backend as _backend

__all__ = [
    "Event",
    "Stream",
    "StreamLocal",
    "current_stream",
    "host_wait_count",
    "set_launches_keep_gil",
]

V = TypeVar("V")

_host_waits = 0
_host_waits_lock = threading.Lock()


def count_host_wait() -> None:
    """Record that the calling thread waits for the GPU (runtime-internal; see host_wait_count)."""
    global _host_waits
    with _host_waits_lock:
        _host_waits += 1


def host_wait_count() -> int:
    """How many times this process has waited on the host for GPU work so far.

    Counts :meth:`Stream.synchronize`, :meth:`Event.synchronize`, ``gp.synchronize`` and
    blocking downloads (``to_numpy``, ``item``, ``get``, ``np.asarray``). A loop that must never
    wait for the GPU (an LLM decode step, say) keeps it constant; tests assert exactly that.
    Non-blocking downloads (``to_numpy(blocking=False)``) are not counted: their worker waits,
    not the caller.
    """
    return _host_waits


def set_launches_keep_gil(keep: bool) -> bool:
    """Whether the calling thread's launches keep the interpreter lock; returns the old setting.

    Off by default: each kernel launch, graph replay and matmul enqueue gives the lock up, in
    case the scheduler's kernel pacing holds it, and takes it back after. A thread whose launches
    are never held (a Guaranteed partition's) and whose host work must not wait to get the lock
    back after each one, while other threads run Python, turns it on around that work
    (``pygpukit.llm`` does, for a served model with a latency promise). Other threads still get
    the lock after a switch interval (``sys.setswitchinterval``), as from any Python code.
    """
    return bool(_backend().set_launches_keep_gil(bool(keep)))


class Stream:
    """A non-blocking stream.

    Lower ``priority`` numbers are served first, within the device's
    :meth:`priority_range` (``(0, -5)`` on SM 80+ GPUs, and simulated so on the CPU
    backend); a value outside it is a ``ValueError`` (CUDA would clamp it silently).
    """

    __slots__ = ("__weakref__", "_impl", "_previous")

    def __init__(self, priority: int = 0, device: int | None = None) -> None:
        from .device import _check_ordinal

        b = _backend()
        ordinal = int(b.get_device()) if device is None else _check_ordinal(device)
        priority = _v.index(priority, "priority", "Stream")
        least, greatest = b.priority_range(ordinal)
        if not greatest <= priority <= least:
            raise ValueError(
                f"Stream: priority must be in [{greatest}, {least}] on device {ordinal}"
                f" (lower numbers are served first), got {priority}"
            )
        self._impl = b.Stream(ordinal, priority)
        self._previous: list[Any] = []

    @classmethod
    def _from_impl(cls, impl: Any) -> Stream:
        out = object.__new__(cls)
        out._impl = impl
        out._previous = []
        return out

    @staticmethod
    def priority_range(device: int | None = None) -> tuple[int, int]:
        """Return ``(least, greatest)`` priority of ``device``; greatest is the smallest number."""
        from .device import _check_ordinal

        b = _backend()
        ordinal = int(b.get_device()) if device is None else _check_ordinal(device)
        least, greatest = b.priority_range(ordinal)
        return int(least), int(greatest)

    @property
    def handle(self) -> int:
        """The ``CUstream`` handle as an int (0 on the CPU backend)."""
        return int(self._impl.handle)

    @property
    def device(self) -> int:
        """The device ordinal."""
        return int(self._impl.device)

    @property
    def priority(self) -> int:
        """The stream's priority."""
        return int(self._impl.priority)

    def synchronize(self) -> None:
        """Wait until all work queued on this stream has finished."""
        count_host_wait()
        self._impl.synchronize()

    def query(self) -> bool:
        """Return whether all queued work has finished (does not wait)."""
        return bool(self._impl.query())

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event`` (the host does not wait)."""
        if not isinstance(event, Event):
            raise TypeError(f"wait_event: event must be a gp.Event, got {_v.describe(event)}")
        self._impl.wait_event(event._impl)

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for the work queued so far on ``other``."""
        if not isinstance(other, Stream):
            raise TypeError(f"wait_stream: other must be a gp.Stream, got {_v.describe(other)}")
        event = Event()
        event.record(other)
        self.wait_event(event)

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        b = _backend()
        self._previous.append(b.current_stream())
        b.set_current_stream(self._impl)
        return self

    def __exit__(self, *exc: object) -> None:
        _backend().set_current_stream(self._previous.pop())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and bool(other._impl == self._impl)

    def __hash__(self) -> int:
        return hash(self._impl)

    def __repr__(self) -> str:
        return f"Stream(device={self.device}, priority={self.priority}, handle={self.handle:#x})"


def current_stream() -> Stream:
    """Return the calling thread's current stream on its current device."""
    return Stream._from_impl(_backend().current_stream())


#: The default stream of each device StreamLocal has seen, held so that its backend object stays
#: the one every lookup gets (the runtime never destroys a default stream anyway).
_defaults: dict[int, Any] = {}


class StreamLocal(Generic[V]):
    """One value per stream (a workspace, say), made on first use there; it goes with its stream.

    ``local.get(make)`` returns the current stream's value, calling ``make(stream)`` the first time
    on that stream. An entry is held by the stream, not the other way round: a stream made with
    ``gp.Stream()`` and dropped takes its values with it, while a dictionary keyed by streams
    would keep every stream it saw (and its arrays) alive for the dictionary's life. A device's
    default stream lives as long as the process, and so do its values.
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: weakref.WeakKeyDictionary[Any, V] = weakref.WeakKeyDictionary()

    def get(self, make: Callable[[Stream], V]) -> V:
        """The current stream's value; ``make(stream)`` makes it on the first call there."""
        b = _backend()
        impl = b.current_stream()
        found = self._values.get(impl)
        if found is None:
            device = int(impl.device)
            if device not in _defaults:
                _defaults[device] = b.default_stream(device)
            found = self._values[impl] = make(Stream._from_impl(impl))
        return found

    def values(self) -> list[V]:
        """The values of the streams still alive."""
        return list(self._values.values())

    def __len__(self) -> int:
        return len(self._values)


class Event:
    """A marker in a stream's work; ``timing=True`` lets two events measure elapsed time."""

    __slots__ = ("__weakref__", "_impl", "_recorded", "timing")

    def __init__(self, timing: bool = False, device: int | None = None) -> None:
        from .device import _check_ordinal

        b = _backend()
        ordinal = int(b.get_device()) if device is None else _check_ordinal(device)
        self.timing = _v.boolean(timing, "timing", "Event")
        self._impl = b.Event(ordinal, self.timing)
        self._recorded = False

    def record(self, stream: Stream | None = None) -> Event:
        """Record on ``stream`` (the current stream by default); returns self."""
        impl = _v.stream(stream, "stream", "Event.record")
        if impl is None:
            impl = _backend().current_stream()
        self._impl.record(impl)
        self._recorded = True
        return self

    def query(self) -> bool:
        """Return whether the recorded work has finished (does not wait)."""
        return bool(self._impl.query())

    def synchronize(self) -> None:
        """Wait on the host until the recorded work has finished."""
        count_host_wait()
        self._impl.synchronize()

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds between this event and ``end`` (both recorded, both ``timing=True``)."""
        if not isinstance(end, Event):
            raise TypeError(f"elapsed_time: end must be a gp.Event, got {_v.describe(end)}")
        if not (self.timing and end.timing):
            raise ValueError("elapsed_time() needs two events created with timing=True")
        if not (self._recorded and end._recorded):
            raise RuntimeError("elapsed_time() needs both events recorded first")
        return float(self._impl.elapsed_time(end._impl))

    def __repr__(self) -> str:
        return f"Event(timing={self.timing}, recorded={self._recorded})"

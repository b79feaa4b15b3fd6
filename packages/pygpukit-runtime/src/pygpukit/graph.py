"""CUDA graphs: capture the work enqueued on a stream once, replay it cheaply.

::

    with gp.graph_capture() as g:      # captures the current stream
        y = step(x)                    # no sync points inside
    g.replay()                         # reruns the captured kernels on the same buffers

Buffers allocated during capture stay alive as long as the graph. A sync point
inside the block raises a ``CudaError`` and leaves the stream usable. Needs
the CUDA backend (``DeviceNotSupportedError`` on CPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import validation
from .backend.select import backend as _backend
from .stream import Stream

__all__ = ["Graph", "graph_capture"]


class Graph:
    """A captured graph; call :meth:`replay` to run it again."""

    __slots__ = ("_impl", "_stream")

    def __init__(self) -> None:
        self._impl: Any = None
        self._stream: Any = None

    @property
    def captured(self) -> bool:
        """Whether capture has finished (replay is possible)."""
        return self._impl is not None

    def replay(self, stream: Stream | None = None) -> None:
        """Enqueue the captured work on ``stream`` (the capture stream by default)."""
        if self._impl is None:
            raise RuntimeError("the graph is still being captured; replay it after the with block")
        impl = validation.stream(stream, "stream", "Graph.replay")
        self._impl.replay(self._stream if impl is None else impl)


@contextmanager
def graph_capture(stream: Stream | None = None) -> Iterator[Graph]:
    """Capture the work enqueued on ``stream`` (the current stream) into a :class:`Graph`."""
    impl = validation.stream(stream, "stream", "graph_capture")
    b = _backend()
    if impl is None:
        impl = b.current_stream()
    graph = Graph()
    b.begin_capture(impl)
    try:
        yield graph
    except BaseException:
        b.end_capture(impl)  # close capture so the stream stays usable; the graph is dropped
        raise
    graph._impl = b.end_capture(impl)
    graph._stream = impl

"""The engine thread's side stream, for its small host transfers beside the compute stream.

A step's inputs (a few kilobytes) and its sampled ids cross the bus every step. A blocking copy
on the compute stream synchronizes that stream, so with a step queued ahead (lookahead) it
would wait for that step too; a stream-ordered upload goes through the transfer engine's copy
stream, which every engine of the process shares, so one model's upload could wait behind
another model's unfinished step. The side stream has neither problem: it is idle whenever a
copy is made on it, the copy runs at once on the copy engine, and the compute stream then
reads the data in its own order.
"""

from __future__ import annotations

import threading

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

__all__ = ["side_stream", "upload"]

_local = threading.local()


def side_stream() -> gp.Stream:
    """The calling thread's side stream on the current device (made at its first use)."""
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    device = gp.get_device()
    stream = streams.get(device)
    if stream is None:
        stream = streams[device] = gp.Stream()
    return stream


def upload(host: np.ndarray) -> GPUArray:
    """``host`` on the device, copied on the side stream (it waits for nothing queued).

    The copy is done when this returns; work queued on any stream afterwards sees it.
    """
    with side_stream():
        return gp.from_numpy(np.ascontiguousarray(host))

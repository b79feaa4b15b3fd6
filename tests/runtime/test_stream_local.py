"""gp.stream.StreamLocal: one value per stream, made on first use there, gone with its stream.

Runs on the current backend (host streams here; the GPU twin is
``gpu/test_gpu_stream_local.py``, where the backend's stream objects are native).
"""

from __future__ import annotations

import gc
import weakref

import pygpukit as gp
from pygpukit.stream import StreamLocal


class _Value:
    """A value that can be watched for collection (weak-referenceable)."""

    def __init__(self, stream: gp.Stream) -> None:
        self.stream_handle = stream.handle


def test_each_stream_gets_its_own_value_made_once() -> None:
    local: StreamLocal[_Value] = StreamLocal()
    made: list[gp.Stream] = []

    def make(stream: gp.Stream) -> _Value:
        made.append(stream)
        return _Value(stream)

    first = local.get(make)
    assert local.get(make) is first and len(made) == 1  # the default stream's, made once
    assert made[0] == gp.current_stream()
    side = gp.Stream()
    with side:
        other = local.get(make)
        assert other is not first and local.get(make) is other
    assert made[1] == side and len(made) == 2
    assert local.get(make) is first  # back on the default stream
    assert len(local) == 2 and {id(v) for v in local.values()} == {id(first), id(other)}


def test_a_dropped_stream_takes_its_value_and_is_not_kept_alive() -> None:
    local: StreamLocal[_Value] = StreamLocal()
    kept = local.get(_Value)
    side = gp.Stream()
    with side:
        value = weakref.ref(local.get(_Value))
    stream_object = weakref.ref(side._impl)
    del side
    gc.collect()
    assert stream_object() is None  # nothing (the local included) holds the stream
    assert value() is None and len(local) == 1 and local.values() == [kept]

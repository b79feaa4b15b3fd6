"""gp.stream.StreamLocal on the GPU, where a stream's backend object is a native wrapper.

``gp.current_stream()`` hands out a new wrapper per call, so what must hold here (and cannot be
seen on the host backend) is: the default stream's value is made once however many calls ask
for it, a side stream's value lives while its ``gp.Stream`` does, and a dropped stream leaves
nothing behind, neither in a StreamLocal nor in a decode plan's per-stream workspaces.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import attention, config
from pygpukit.stream import StreamLocal

pytestmark = pytest.mark.gpu


class _Value:
    def __init__(self, stream: gp.Stream) -> None:
        self.handle = stream.handle


def test_default_stream_value_is_made_once_and_side_stream_values_go_with_it() -> None:
    local: StreamLocal[_Value] = StreamLocal()
    calls: list[int] = []

    def make(stream: gp.Stream) -> _Value:
        calls.append(stream.handle)
        return _Value(stream)

    first = local.get(make)
    gc.collect()  # the wrapper current_stream() made for that call is gone by now
    assert all(local.get(make) is first for _ in range(5)) and len(calls) == 1
    assert first.handle == gp.current_stream().handle
    side = gp.Stream()
    with side:
        value = local.get(make)
        gc.collect()
        assert local.get(make) is value and value.handle == side.handle != first.handle
    held = weakref.ref(value)
    native = weakref.ref(side._impl)
    del side, value
    gc.collect()
    assert native() is None and held() is None
    assert len(local) == 1 and local.get(make) is first and len(calls) == 2


@pytest.mark.parametrize("combine", ["fused", "kernel"])
def test_decode_workspaces_go_with_their_stream(rand, combine: str) -> None:
    """A split decode plan run on a side stream: the same output as on the default stream, and
    the side stream's partials (and counters) freed when the stream is dropped."""
    b, hq, hkv, d, n = 2, 32, 8, 128, 8192
    q = gp.from_numpy(rand((b, hq, d), "bfloat16"))
    kc, vc = (gp.from_numpy(rand((b, hkv, n, d), "bfloat16")) for _ in range(2))
    lens = gp.from_numpy(np.array([n, n // 3], np.int32))
    with config.override(decode_combine=combine):
        max_blocks, capacity, _ = attention.check_decode(q, kc, vc, lens, None, None)
        plan = attention.decode_plan(q, kc, max_blocks, capacity)
        assert isinstance(plan, attention.DecodePlan) and plan.partials[2] > 1  # split
        want = ops.decode_attention(q, kc, vc, lens).to_numpy()
        before = (len(plan.workspaces), len(plan.counters))
        side = gp.Stream()
        with side:
            got = ops.decode_attention(q, kc, vc, lens)
            side.synchronize()
        np.testing.assert_array_equal(got.to_numpy(), want)
        assert len(plan.workspaces) == before[0] + 1
        native = weakref.ref(side._impl)
        del side
        gc.collect()
        assert native() is None
        assert (len(plan.workspaces), len(plan.counters)) == before

"""Isolation between the engines of one process on the GPU: a step's sampled ids come back
once that step is done, never behind another engine's download that waits for its unfinished
work (the transfer engine's copy stream is shared by the whole process)."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.llm.engine import RequestParams
from pygpukit.llm.engine.request import Request
from pygpukit.llm.engine.sampler import SampledTokens

pytestmark = pytest.mark.gpu


def test_sampled_ids_do_not_wait_behind_another_streams_download(rng):
    least, greatest = gp.Stream.priority_range()
    busy, mine = gp.Stream(priority=least), gp.Stream(priority=greatest)
    a = gp.from_numpy(rng.standard_normal((8192, 8192)).astype(np.float32)).astype(gp.bfloat16)
    other_ids = gp.from_numpy(rng.integers(0, 1000, 64).astype(np.int32))
    host_logits = rng.standard_normal((4, 1000)).astype(np.float32)
    logits = gp.from_numpy(host_logits)
    requests = [Request(f"r{i}", [1, 2, 3], RequestParams(max_tokens=1), lambda out: None,
                        frozenset()) for i in range(4)]  # fmt: skip
    # Everything a first call does once (the matmul's algorithm choice, which times on the
    # device and waits; kernel loading; the pool's segments for two products; pinned
    # buffers; the reading thread's stream) is done here, so that below only the queued work
    # and the two downloads remain.
    with busy:
        first, second = a @ a, a @ a
    del first, second
    theirs_host = gp.memory.pinned_empty((64,), np.int32)
    with mine:
        SampledTokens(logits, requests).result()
    gp.synchronize()
    with busy:  # another model's long step (~50 ms), then its download of the step's ids
        for _ in range(40):
            product = a @ a
        finished = gp.Event().record()
        theirs = other_ids.to_numpy(blocking=False, out=theirs_host)
    with mine:
        tokens, _ = SampledTokens(logits, requests).result()
    assert tokens == host_logits.argmax(axis=1).tolist()
    # The ids came back while the other stream was still computing, and its download is
    # still to land (it lands once that work is done).
    assert not finished.query()
    assert not theirs.done()
    assert theirs.result(timeout=120).tolist() == other_ids.to_numpy().tolist()
    assert finished.query()
    del product


def test_a_steps_ids_are_ready_only_once_its_work_is_done(rng):
    # What host turns rely on (Engine.host_due): another thread can tell, without waiting,
    # whether a protected engine's step is done on the device.
    a = gp.from_numpy(rng.standard_normal((8192, 8192)).astype(np.float32)).astype(gp.bfloat16)
    host_logits = rng.standard_normal((4, 1000)).astype(np.float32)
    logits = gp.from_numpy(host_logits)
    requests = [Request(f"r{i}", [1, 2, 3], RequestParams(max_tokens=1), lambda out: None,
                        frozenset()) for i in range(4)]  # fmt: skip
    stream = gp.Stream()
    with stream:
        product = a @ a  # the matmul's one-time setup, outside what is checked below
    gp.synchronize()
    with stream:
        for _ in range(40):  # the step's forward pass (~50 ms), then its sampling
            product = a @ a
        pending = SampledTokens(logits, requests)
    assert not pending.ready()
    tokens, _ = pending.result()
    assert pending.ready() and tokens == host_logits.argmax(axis=1).tolist()
    del product


def test_launches_that_keep_the_interpreter_lock_compute_the_same(rng):
    """A protected engine's thread keeps the lock through its launches (host turns): kernel
    launches, cuBLASLt matmuls and graph replays then run as they do when they release it."""
    from pygpukit.stream import set_launches_keep_gil

    a = gp.from_numpy(rng.standard_normal((256, 320)).astype(np.float32)).astype(gp.bfloat16)
    b = gp.from_numpy(rng.standard_normal((320, 192)).astype(np.float32)).astype(gp.bfloat16)
    expected = ((a @ b) * 2.0).astype(gp.float32).to_numpy()
    stream = gp.Stream()
    was = set_launches_keep_gil(True)
    try:
        eager = ((a @ b) * 2.0).astype(gp.float32).to_numpy()
        with stream, gp.graph_capture() as graph:
            out = ((a @ b) * 2.0).astype(gp.float32)
        graph.replay(stream)
        stream.synchronize()
        replayed = out.to_numpy()
    finally:
        kept = set_launches_keep_gil(was)
    assert was is False and kept is True
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(replayed, expected)

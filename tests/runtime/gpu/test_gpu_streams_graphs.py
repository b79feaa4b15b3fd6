"""Streams, events and CUDA graphs on the GPU."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

AFFINE = """
extern "C" __global__ void affine(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}
"""


def _chain(kernel, x, steps):
    for i in range(steps):
        kernel(x, 1.0 + 0.001 * (i % 7), 0.01 * (i % 5) - 0.02, x.size)


def test_graph_of_100_ops_equals_eager(make):
    host = make((1 << 16,), "float32")
    kernel = gp.jit(AFFINE, func="affine")
    eager = gp.from_numpy(host)
    _chain(kernel, eager, 100)
    expected = eager.to_numpy()

    captured = gp.from_numpy(host)
    stream = gp.Stream()
    with stream, gp.graph_capture() as graph:
        _chain(kernel, captured, 100)
        scratch = gp.empty((1024,), dtype="float32")  # allocated in the graph's pool region
        scratch.fill(1.0)
    stream.synchronize()
    np.testing.assert_array_equal(captured.to_numpy(), host)  # capture runs nothing
    graph.replay(stream)
    stream.synchronize()
    np.testing.assert_array_equal(captured.to_numpy(), expected)
    np.testing.assert_array_equal(scratch.to_numpy(), np.ones(1024, np.float32))


def test_sync_inside_capture_raises_and_capture_survives(make):
    kernel = gp.jit(AFFINE, func="affine")
    host = make((4096,), "float32")
    x = gp.from_numpy(host)
    stream = gp.Stream()
    with stream, gp.graph_capture() as graph:
        kernel(x, 2.0, 0.0, x.size)
        with pytest.raises(gp.CudaError, match="captur"):
            x.to_numpy()
        with pytest.raises(gp.CudaError, match="captur"):
            gp.synchronize()
        kernel(x, 1.0, 1.0, x.size)
    graph.replay(stream)
    stream.synchronize()
    np.testing.assert_allclose(x.to_numpy(), host * 2 + 1, rtol=1e-6)


def test_eight_threads_each_with_its_own_stream(make):
    kernel = gp.jit(AFFINE, func="affine")
    hosts = [make((100_000,), "float32") for _ in range(8)]
    results: list[np.ndarray | None] = [None] * 8
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with gp.Stream():
                x = gp.from_numpy(hosts[i])
                for _ in range(20):
                    kernel(x, 1.0, float(i), x.size)
                results[i] = x.to_numpy()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(8):
        np.testing.assert_allclose(results[i], hosts[i] + 20.0 * i, rtol=1e-5, atol=1e-4)


def test_events_time_and_order_streams(make):
    kernel = gp.jit(AFFINE, func="affine")
    x = gp.from_numpy(make((1 << 20,), "float32"))
    producer, consumer = gp.Stream(), gp.Stream()
    start, end = gp.Event(timing=True), gp.Event(timing=True)
    start.record(producer)
    for _ in range(10):
        kernel(x, 1.0, 1.0, x.size, stream=producer)
    end.record(producer)
    consumer.wait_event(end)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 0
    low, high = gp.Stream.priority_range()
    assert gp.Stream(priority=low).priority == low
    assert gp.Stream(priority=high).priority == high


def test_dropped_streams_give_their_matmul_workspace_back(make, monkeypatch):
    """A stream keeps a cuBLASLt workspace (32 MiB) only while the user holds the stream.

    Forty short-lived streams, each running a cuBLASLt matmul, must not leave forty workspaces
    (1.25 GiB) allocated: at most the one of the stream the operands were last used on.
    """
    from pygpukit.backend import cuda_linalg

    monkeypatch.delenv("PYGPUKIT_GEMM_BACKEND", raising=False)
    if not cuda_linalg.cublaslt_status()["loaded"]:
        pytest.skip("cuBLASLt is not installed")
    ha, hb = make((96, 80), "float32"), make((80, 72), "float32")
    a, b = gp.from_numpy(ha), gp.from_numpy(hb)

    def one_stream() -> np.ndarray:
        with gp.Stream():
            return (a @ b).to_numpy()

    np.testing.assert_allclose(one_stream(), ha @ hb, rtol=1e-4, atol=1e-4)
    gc.collect()
    before = gp.memory.stats()["allocated_bytes"]
    for _ in range(40):
        np.testing.assert_allclose(one_stream(), ha @ hb, rtol=1e-4, atol=1e-4)
    gc.collect()
    grown = gp.memory.stats()["allocated_bytes"] - before
    assert grown <= 32 * 2**20, f"{grown / 2**20:.0f} MiB still allocated after 40 dropped streams"


class _Cycle:
    """Holds ``payload`` in a reference cycle: only the cyclic garbage collector frees it."""

    def __init__(self, payload: object) -> None:
        self.payload = payload
        self.me = self


@contextmanager
def _collector_off() -> Iterator[None]:
    """No automatic collection inside: only the test's ``gc.collect`` frees cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _capture_around_collection(kernel, y, stream):
    """Capture two kernels on ``y`` with a garbage collection between them; the graph."""
    with stream, gp.graph_capture() as graph:
        kernel(y, 3.0, 0.5, y.size)
        gc.collect()  # frees what only a cycle held, in the middle of the capture
        kernel(y, 1.0, -1.0, y.size)
    return graph


@pytest.mark.parametrize("replayed_elsewhere", [False, True])
def test_a_graph_collected_during_another_capture_leaves_it_intact(make, replayed_elsewhere):
    """The collector may free an old graph while a new one is captured (any allocation in
    Python can run it); destroying a graph's executable then would invalidate the capture."""
    kernel = gp.jit(AFFINE, func="affine")
    hx, hy = make((4096,), "float32"), make((4096,), "float32")
    x, y = gp.from_numpy(hx), gp.from_numpy(hy)
    stream = gp.Stream()
    with stream, gp.graph_capture() as old:
        kernel(x, 2.0, 1.0, x.size)
    old.replay(stream)
    if replayed_elsewhere:  # its release then also orders the capture stream after that one
        other = gp.Stream()
        old.replay(other)
        other.synchronize()
    stream.synchronize()
    with _collector_off():
        _Cycle(old)
        del old
        graph = _capture_around_collection(kernel, y, stream)
    graph.replay(stream)
    stream.synchronize()
    np.testing.assert_allclose(y.to_numpy(), (hy * 3.0 + 0.5) - 1.0, rtol=1e-6)


def test_a_module_collected_during_a_capture_leaves_it_intact(make):
    """cuModuleUnload during a capture would invalidate it as well."""
    from pygpukit.backend import select

    b = select.backend()
    cubin, _, _ = b.compile(AFFINE, "affine.cu", [], [])
    kernel = gp.jit(AFFINE, func="affine")
    hy = make((4096,), "float32")
    y = gp.from_numpy(hy)
    stream = gp.Stream()
    with _collector_off():
        _Cycle(b.load_module(bytes(cubin), gp.get_device()))
        graph = _capture_around_collection(kernel, y, stream)
    graph.replay(stream)
    stream.synchronize()
    np.testing.assert_allclose(y.to_numpy(), (hy * 3.0 + 0.5) - 1.0, rtol=1e-6)

from __future__ import annotations

import threading

import numpy as np
import pytest

import pygpukit as gp

ON_GPU = gp.is_cuda_available()


def test_backend_and_devices() -> None:
    assert gp.backend_name() in ("cpu", "cuda")
    assert gp.is_cuda_available() == (gp.backend_name() == "cuda")
    assert gp.device_count() >= 1
    info = gp.get_device_info()
    for key in ("name", "sm", "sm_count", "total_memory", "driver_version", "backend", "index"):
        assert key in info
    assert info["index"] == gp.get_device()
    assert gp.get_device_info(0)["backend"] == gp.backend_name()


def test_device_context_manager_restores() -> None:
    before = gp.get_device()
    with gp.Device(0) as dev:
        assert gp.get_device() == 0
        assert dev.index == 0 and isinstance(dev.name, str)
        dev.synchronize()
    assert gp.get_device() == before
    gp.set_device(0)
    gp.synchronize()
    gp.synchronize(0)
    assert gp.Device(0) == gp.Device(0)


def test_stream_context_sets_the_current_stream(rand) -> None:
    default = gp.current_stream()
    s = gp.Stream()
    with s as entered:
        assert entered is s
        assert gp.current_stream() == s
        inner = gp.Stream()
        with inner:
            assert gp.current_stream() == inner
        assert gp.current_stream() == s
        host = rand((64,))
        a = gp.from_numpy(host, stream=s)
        s.synchronize()
        np.testing.assert_array_equal(a.to_numpy(stream=s), host)
    assert gp.current_stream() == default
    assert s.query() is True


def test_stream_priority_outside_the_range_is_refused() -> None:
    least, greatest = gp.Stream.priority_range()
    assert greatest < least  # (0, -5) on SM 80+ GPUs, simulated so on the CPU backend
    assert gp.Stream(priority=greatest).priority == greatest
    assert gp.Stream(priority=least).priority == least
    for bad in (greatest - 1, least + 1, 99, -1000):
        with pytest.raises(ValueError, match=rf"priority must be in \[{greatest}, {least}\]"):
            gp.Stream(priority=bad)


def test_events_and_cross_stream_waits(rand) -> None:
    producer, consumer = gp.Stream(), gp.Stream()
    host = rand((1000,))
    start, end = gp.Event(timing=True), gp.Event(timing=True)
    start.record(producer)
    a = gp.from_numpy(host, stream=producer)
    end.record(producer)
    consumer.wait_event(end)
    consumer.wait_stream(producer)
    ev = consumer.record_event()
    ev.synchronize()
    assert ev.query() is True
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    np.testing.assert_array_equal(a.to_numpy(), host)


def test_event_misuse() -> None:
    a, b = gp.Event(timing=True), gp.Event(timing=True)
    with pytest.raises(RuntimeError, match="recorded"):
        a.elapsed_time(b)
    with pytest.raises(TypeError, match=r"gp\.Event"):
        gp.Stream().wait_event("event")
    with pytest.raises(TypeError, match=r"gp\.Stream"):
        a.record("stream")


def test_current_stream_is_thread_local(rand) -> None:
    errors: list[BaseException] = []
    datas = [rand((257,)) for _ in range(4)]

    def work(i: int) -> None:
        try:
            s = gp.Stream()
            with s:
                for _ in range(20):
                    assert gp.current_stream() == s
                    out = gp.from_numpy(datas[i])[::-1].copy().to_numpy()
                    np.testing.assert_array_equal(out, datas[i][::-1])
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.skipif(ON_GPU, reason="CPU-backend behaviour")
def test_graph_capture_needs_a_gpu_on_cpu() -> None:
    with pytest.raises(gp.DeviceNotSupportedError, match="CUDA graphs"), gp.graph_capture():
        pass
    g = gp.Graph()
    assert not g.captured
    with pytest.raises(RuntimeError, match="still being captured"):
        g.replay()


def test_host_wait_count_counts_every_wait(rand):
    a = gp.from_numpy(rand((4,)))
    stream, event = gp.Stream(), gp.Event()
    before = gp.host_wait_count()
    b = a + 1.0  # enqueueing work is not a wait
    assert gp.host_wait_count() == before
    b.to_numpy()
    a[0].item()
    stream.synchronize()
    event.record()
    event.synchronize()
    gp.synchronize()
    assert gp.host_wait_count() == before + 5

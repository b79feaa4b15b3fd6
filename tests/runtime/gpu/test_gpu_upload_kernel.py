"""Large pageable uploads through the upload kernel (rust/pygpukit-core/src/pull_ring.rs).

``from_numpy`` of 8 MiB or more from pageable memory is copied by host threads into a 16 MiB
pinned ring and read out of it by a kernel on the device. These check, on the GPU, that every
byte lands across many laps of the ring and across launches, that uploads from several threads
interleave correctly, that consumers on other streams are ordered after the upload, and that
``PYGPUKIT_UPLOAD_KERNEL=0`` keeps uploads on the copy engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory

pytestmark = pytest.mark.gpu

MIB = 1 << 20


def _kernel_uploads() -> int:
    return int(memory.stats(0)["upload_kernel_uploads"])


def _random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, n, dtype=np.uint8)


def test_uploads_of_many_sizes_land_intact_through_the_kernel(fresh_pool, rng) -> None:
    """Back-to-back uploads (one chunk short of a lap, several laps, odd tails) all land."""
    stream = gp.Stream()
    before = _kernel_uploads()
    sizes = [8 * MIB, 16 * MIB - 1, 16 * MIB + 17, 50 * MIB + 3, 9 * MIB + 256 * 1024]
    hosts = [_random_bytes(rng, n) for n in sizes]
    arrays = [gp.from_numpy(h, stream=stream) for h in hosts]
    for host, arr in zip(hosts, arrays, strict=True):
        got = arr.to_numpy(stream=stream)
        assert np.array_equal(got, host), f"{host.size} bytes differ"
    assert _kernel_uploads() - before == len(sizes), "not every upload took the kernel"


def test_blocking_uploads_land_intact_on_every_path(fresh_pool, rng) -> None:
    """Without a stream: direct (small), staged (1-8 MiB), the kernel (8 MiB+), pinned (direct)."""
    before = _kernel_uploads()
    for n in (512 * 1024 + 3, 3 * MIB + 5, 20 * MIB + 7):
        host = _random_bytes(rng, n)
        assert np.array_equal(gp.from_numpy(host).to_numpy(), host), f"{n} bytes"
    assert _kernel_uploads() - before == 1, "only the 20 MiB upload takes the kernel"
    pinned = memory.pinned_empty((20 * MIB,), np.uint8)
    pinned[...] = _random_bytes(rng, 20 * MIB)
    assert np.array_equal(gp.from_numpy(pinned).to_numpy(), pinned)
    assert _kernel_uploads() - before == 1, "a pinned source goes straight to the copy engine"


def test_the_host_array_may_change_once_from_numpy_returns(fresh_pool, rng) -> None:
    host = rng.standard_normal(40 * MIB // 4).astype(np.float32)
    expected = host.copy()
    arr = gp.from_numpy(host, stream=gp.Stream())
    host[:] = -1.0
    assert np.array_equal(arr.to_numpy(), expected)


def test_uploads_from_several_threads_interleave_correctly(fresh_pool) -> None:
    failures: list[str] = []

    def worker(k: int) -> None:
        rng = np.random.default_rng(100 + k)
        stream = gp.Stream()
        for r in range(3):
            host = _random_bytes(rng, (12 + 5 * k + r) * MIB + 4 * k + 1)
            arr = gp.from_numpy(host, stream=stream)
            if not np.array_equal(arr.to_numpy(stream=stream), host):
                failures.append(f"thread {k} round {r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_consumer_on_another_stream_sees_the_upload(fresh_pool, rng) -> None:
    """The upload's completion orders the consumer's stream; a kernel reads the data at once."""
    host = rng.standard_normal(64 * MIB // 4).astype(np.float32)
    stream = gp.Stream()
    arr = gp.from_numpy(host, stream=stream)
    doubled = arr + arr  # queued on the stream right after the upload
    assert np.array_equal(doubled.to_numpy(stream=stream), host * 2)


def test_a_long_kernel_on_another_stream_does_not_block_the_upload_forever(fresh_pool, rng) -> None:
    """The kernel waits for SMs behind busy work, then finishes; the data still lands."""
    busy = gp.from_numpy(rng.standard_normal((4096, 4096)).astype(np.float32) / 64)
    other = gp.Stream()
    with other:
        for _ in range(8):
            busy = gp.matmul(busy, busy)
    host = _random_bytes(rng, 48 * MIB + 5)
    arr = gp.from_numpy(host, stream=gp.Stream())
    assert np.array_equal(arr.to_numpy(), host)
    other.synchronize()


def test_the_environment_switch_keeps_uploads_on_the_copy_engine() -> None:
    code = (
        "import numpy as np, pygpukit as gp\n"
        "from pygpukit import memory\n"
        "h = np.random.default_rng(1).integers(0, 256, 40 << 20, dtype=np.uint8)\n"
        "a = gp.from_numpy(h, stream=gp.Stream())\n"
        "assert np.array_equal(a.to_numpy(), h)\n"
        "print(memory.stats(0)['upload_kernel_uploads'])\n"
    )
    env = dict(os.environ, PYGPUKIT_UPLOAD_KERNEL="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0"

"""Uploads that DMA part of a pageable source straight from where it lies (issue 5).

``from_numpy(a, stream=)`` of 64 MiB or more page-locks pieces of ``a`` with
``cuMemHostRegister`` and DMAs them without staging (rust/pygpukit-core/src/upload.rs).
These check that every byte still lands whatever the source (misaligned, read-only,
file-backed, the same array twice at once or back to back), that the source may be
modified or freed as soon as ``from_numpy`` returns, and that the knob turns it off.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory

pytestmark = pytest.mark.gpu

MIB = 1 << 20


def _registered() -> int:
    return int(memory.stats(0)["transfer_registered_bytes"])


def _random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.frombuffer(rng.bytes(n), dtype=np.uint8).copy()


def _register_on() -> bool:
    return os.environ.get("PYGPUKIT_UPLOAD_REGISTER", "").strip() != "0"


def test_a_large_misaligned_upload_sends_part_straight_and_lands_intact(fresh_pool, rng) -> None:
    host = _random_bytes(rng, 256 * MIB + 4096 + 123)
    src = host[77:]  # neither end on a page boundary
    before = _registered()
    stream = gp.Stream()
    arr = gp.from_numpy(src, stream=stream)
    got = arr.to_numpy(stream=stream)
    assert np.array_equal(got, src)
    if _register_on():
        sent = _registered() - before
        assert 16 * MIB <= sent < src.nbytes, f"{sent} bytes sent straight"


def test_the_source_may_be_modified_and_freed_once_from_numpy_returns(fresh_pool, rng) -> None:
    """from_numpy returns once every byte was read; the engine keeps the array alive itself."""
    n = 192 * MIB + 5
    for _ in range(3):
        host = _random_bytes(rng, n)
        expected = host.copy()
        stream = gp.Stream()
        arr = gp.from_numpy(host, stream=stream)
        host ^= 0x5A  # a late DMA would send these bytes
        del host
        gc.collect()
        # Likely the same addresses again, while the first array's pieces may still be
        # registered: the engine must neither DMA stale pages nor lose bytes.
        other = _random_bytes(rng, n)
        arr2 = gp.from_numpy(other, stream=stream)
        assert np.array_equal(arr.to_numpy(stream=stream), expected)
        assert np.array_equal(arr2.to_numpy(stream=stream), other)


def test_read_only_and_file_backed_sources_upload(fresh_pool, rng, tmp_path: Path) -> None:
    data = rng.bytes(96 * MIB + 1000)
    read_only = np.frombuffer(data, dtype=np.uint8)
    assert not read_only.flags.writeable
    stream = gp.Stream()
    got = gp.from_numpy(read_only, stream=stream).to_numpy(stream=stream)
    assert np.array_equal(got, read_only)
    path = tmp_path / "source.bin"
    path.write_bytes(data)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    got = gp.from_numpy(mapped, stream=stream).to_numpy(stream=stream)
    assert np.array_equal(got, read_only)
    del mapped


def test_one_array_uploaded_from_two_threads_at_once_lands_twice(fresh_pool, rng) -> None:
    host = _random_bytes(rng, 160 * MIB + 3)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def upload(k: int) -> None:
        try:
            stream = gp.Stream()
            start.wait()
            arr = gp.from_numpy(host, stream=stream)
            results[k] = arr.to_numpy(stream=stream)
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=upload, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(2):
        assert np.array_equal(results[k], host), f"thread {k}"


def test_repeated_uploads_of_one_array_stay_intact(fresh_pool, rng) -> None:
    host = _random_bytes(rng, 128 * MIB + 4099)
    stream = gp.Stream()
    arrays = [gp.from_numpy(host, stream=stream) for _ in range(5)]
    for i, arr in enumerate(arrays):
        assert np.array_equal(arr.to_numpy(stream=stream), host), f"upload {i}"


def test_the_knob_stages_everything() -> None:
    code = (
        "import numpy as np, pygpukit as gp\n"
        "from pygpukit import memory\n"
        "h = np.frombuffer(np.random.default_rng().bytes(96 << 20), np.uint8)\n"
        "s = gp.Stream()\n"
        "assert np.array_equal(gp.from_numpy(h, stream=s).to_numpy(stream=s), h)\n"
        "print(memory.stats(0)['transfer_registered_bytes'])\n"
    )
    env = dict(os.environ, PYGPUKIT_UPLOAD_REGISTER="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"

"""jit: what a run-time kernel costs before its first result.

Rows (the ``scale`` kernel; time from ``jit`` to the first launch's completion):

- ``compile_cold``: a source no cache has seen (NVRTC compile, module load,
  launch), timed inside a fresh process with an empty cache directory, after
  a warm-up compile of another source (NVRTC already loaded);
- ``load_disk_cache``: the same source again from a fresh process: the
  library finds the compiled kernel in its disk cache;
- ``load_memory_cache``: ``jit`` of an already compiled source in the same
  process (in-memory cache hit).

PyGPUkit against CuPy (``RawKernel``); PyTorch has no run-time CUDA C++
kernels. Fresh processes use a temporary cache directory
(``PYGPUKIT_CACHE_DIR``, ``CUPY_CACHE_DIR``), so the user's caches are left
alone. Every compiled kernel's output is checked.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..case import Case, CorrectnessError, Skip, Timed, unavailable
from ..checks import check_close
from ..peers import Library
from ..registry import Suite, SuiteContext
from .kernels import NO_TORCH_JIT, compile_scale, launch_scale

NAME = "jit"
N = 1 << 20
CHILD_TIMEOUT_S = 120


def _child(lib_name: str, salt: str, cache_dir: str) -> float:
    env = dict(os.environ, PYGPUKIT_CACHE_DIR=cache_dir, CUPY_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [sys.executable, "-m", f"{__package__}.jit_child", lib_name, salt],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"jit child process exited with {proc.returncode}: " + " | ".join(tail))
    reply = json.loads(lines[-1])
    if "skip" in reply:
        raise Skip(reply["skip"])
    if "error" in reply:
        raise CorrectnessError(reply["error"])
    return float(reply["ms"])


def process_case(op: str) -> Case:
    """``compile_cold`` or ``load_disk_cache``, each repetition in a fresh process."""

    def setup(lib: Library, copies: int) -> Timed:
        if not lib.on_gpu:
            raise Skip("JIT kernels need a CUDA GPU (CPU backend)")
        cache = tempfile.TemporaryDirectory(prefix="pygpukit-bench-jit-")
        token = secrets.token_hex(8)

        def salt(i: int) -> str:
            return f"{token}-{i}" if op == "compile_cold" else token

        def measure(i: int) -> float:
            return _child(lib.name, salt(i), cache.name)

        # run(0) checks the kernel (and, for load_disk_cache, fills the cache).
        return Timed(run=measure, check=lambda ms: None, measure=measure)

    setups = {"pygpukit": setup, "cupy": setup, "torch": unavailable(NO_TORCH_JIT)}
    return Case(NAME, op, {"kernel": "scale"}, setups, timing="wall", requires=("jit",))


def memory_cache_case(ctx: SuiteContext) -> Case:
    """``jit`` of a source this process has compiled already, plus one launch."""
    x_host = ctx.data.get((N,), "float32")
    ref = 2.0 * x_host.astype(np.float64)

    def setup(lib: Library, copies: int) -> Timed:
        x, y = lib.upload(x_host, "float32"), lib.upload(x_host, "float32")
        compile_scale(lib)

        def run(i: int) -> Any:
            launch_scale(lib, compile_scale(lib), x, y, 2.0, N)
            return y

        return Timed(
            run=run,
            check=lambda out: check_close(lib.download(out), ref, "float32", "scale kernel"),
        )

    setups = {"pygpukit": setup, "cupy": setup, "torch": unavailable(NO_TORCH_JIT)}
    return Case(
        NAME,
        "load_memory_cache",
        {"kernel": "scale"},
        setups,
        timing="wall",
        requires=("from_numpy", "jit"),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """The jit suite's three rows."""
    yield process_case("compile_cold")
    yield process_case("load_disk_cache")
    yield memory_cache_case(ctx)


SUITE = Suite(NAME, "run-time kernel compile, disk-cache and memory-cache load", cases)

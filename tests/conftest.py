"""Test-wide setup: the `gpu` marker and the random-data fixtures `rng` and `rand`.

Tests marked `gpu` run only when PyGPUkit's CUDA backend is active; elsewhere they
are skipped. On the GPU machine `tools/gpu_check.sh` sets PYGPUKIT_REQUIRE_GPU=1 so
a missing GPU fails the run instead of skipping every test silently.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable

import numpy as np
import pytest

# librosa's numba functions cache their compiled code beside the installed package. Parallel
# workers (pytest-xdist) compiling the same function at once can load each other's half-written
# cache (a segfault in a fresh virtualenv), so each worker of a run gets its own cache folder;
# numba reads the variable when it is first imported, after this file.
if os.environ.get("PYTEST_XDIST_WORKER") and "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(),
        f"pygpukit-tests-numba-{os.getppid()}-{os.environ['PYTEST_XDIST_WORKER']}",
    )


def _cuda_available() -> bool:
    import pygpukit as gp

    check = getattr(gp, "is_cuda_available", None)
    return bool(check and check())


def pytest_configure(config: pytest.Config) -> None:
    # The once-only CPU fallback notice is itself tested in a subprocess (runtime/test_cli.py).
    config.addinivalue_line("filterwarnings", "ignore::pygpukit.errors.BackendFallbackWarning")


#: Fixtures that load a real model (tens of MB, seconds to minutes of CPU per module).
REAL_MODEL_FIXTURES = frozenset({"kokoro_model", "kokoro_onnx_path", "tiny_en_dir", "smollm2_path"})


def _real_model_modules_first(items: list[pytest.Item]) -> None:
    """Move the modules that use a real model to the front, in place (stable otherwise).

    Parallel workers (pytest-xdist, ``--dist loadfile``) take whole files in collection order,
    so the longest files start first and the workers finish together instead of one of them
    running a real-model file alone at the end. Every worker sorts alike.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    heavy = {
        module(item)
        for item in items
        if REAL_MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    }
    items.sort(key=lambda item: module(item) not in heavy)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _real_model_modules_first(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_available():
        return
    from pygpukit import env

    if env.flag("PYGPUKIT_REQUIRE_GPU"):
        raise pytest.UsageError("PYGPUKIT_REQUIRE_GPU=1 but PyGPUkit found no usable CUDA GPU")
    skip = pytest.mark.skip(reason="needs a CUDA GPU (SM 80+)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator with a fresh seed each run; the seed is in the report when a test fails."""
    seed = secrets.randbits(64)
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    if dt == np.bool_:
        out = rng.integers(0, 2, size=shape).astype(bool)
        if out.size:
            out.flat[0] = True
        return out
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        out = rng.integers(lo, hi, size=shape, endpoint=True).astype(dt)
        out[out == 0] = 7
        return out
    return np.asarray(rng.standard_normal(shape) * 3 + 0.5).astype(dt)


@pytest.fixture
def rand(rng: np.random.Generator) -> Callable[..., np.ndarray]:
    """``rand(shape, dtype="float32")``: random host data, never all zeros."""

    def make(shape: tuple[int, ...], dtype: object = np.float32) -> np.ndarray:
        return _random(rng, tuple(shape), dtype)

    return make


# ----------------------------------------------------------------------------- concurrency

Launch = Callable[[np.random.Generator], Callable[[], "str | None"]]


def _hammer(
    seed: int, launch: Launch, *, threads: int, iterations: int, streams: str, depth: int = 3
) -> list[str]:
    """Run ``launch`` ``iterations`` times on each of ``threads`` threads; return the failures.

    ``launch(rng)`` enqueues one piece of work with fresh random inputs and returns a check
    that downloads its results and returns ``None`` or what was wrong. Each thread keeps up
    to ``depth`` checks pending, so launches of several threads overlap without a sync in
    between. ``streams``: ``"shared"`` (every thread on the default stream) or
    ``"separate"`` (each thread inside its own ``gp.Stream()``). Exceptions count as
    failures. All threads start together (a barrier); the run is bounded by the iteration
    count, never by time.
    """
    import threading
    from collections import deque

    import pygpukit as gp

    if streams not in ("shared", "separate"):
        raise ValueError(f"streams must be 'shared' or 'separate', got {streams!r}")
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def note(thread: int, i: int, what: str) -> None:
        with lock:
            failures.append(f"thread {thread}, iteration {i}: {what}")

    def body(thread: int) -> None:
        rng = np.random.default_rng([seed, thread])
        pending: deque[tuple[int, Callable[[], str | None]]] = deque()

        def check_oldest() -> None:
            i, check = pending.popleft()
            try:
                problem = check()
            except Exception as exc:  # every error is a finding, reported below
                problem = f"{type(exc).__name__}: {exc}"
            if problem is not None:
                note(thread, i, problem)

        start.wait()
        for i in range(iterations):
            try:
                pending.append((i, launch(rng)))
            except Exception as exc:
                note(thread, i, f"{type(exc).__name__}: {exc}")
            if len(pending) >= depth:
                check_oldest()
        while pending:
            check_oldest()

    def run(thread: int) -> None:
        try:
            if streams == "separate":
                with gp.Stream():
                    body(thread)
            else:
                body(thread)
        except Exception as exc:
            note(thread, -1, f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return failures


@pytest.fixture
def hammer(rng: np.random.Generator) -> Callable[..., None]:
    """``hammer(launch, streams=..., gpu_iterations=..., cpu_iterations=...)``: a thread stress run.

    Runs :func:`_hammer` with 8 threads on the GPU (4 on the CPU backend, which checks the
    thread safety of its NumPy path with fewer iterations) and fails listing the first
    wrong results. Thread seeds derive from the test's seed, which is in the report.
    """
    import pygpukit as gp

    on_gpu = gp.backend_name() == "cuda"

    def run(
        launch: Launch, *, streams: str, gpu_iterations: int = 200, cpu_iterations: int = 12
    ) -> None:
        seed = int(rng.integers(0, 2**63))
        failures = _hammer(
            seed,
            launch,
            threads=8 if on_gpu else 4,
            iterations=gpu_iterations if on_gpu else cpu_iterations,
            streams=streams,
        )
        assert not failures, f"{len(failures)} wrong results, first ones:\n" + "\n".join(
            failures[:8]
        )

    return run

"""Test-wide setup: the `gpu` marker and the random-data fixtures `rng` and `rand`.

Tests marked `gpu` run only when PyGPUkit's CUDA backend is active; elsewhere they
are skipped. On the GPU machine `tools/gpu_check.sh` sets PYGPUKIT_REQUIRE_GPU=1 so
a missing GPU fails the run instead of skipping every test silently.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np
import pytest


def _cuda_available() -> bool:
    import pygpukit as gp

    check = getattr(gp, "is_cuda_available", None)
    return bool(check and check())


def pytest_configure(config: pytest.Config) -> None:
    # The once-only CPU fallback notice is itself tested in a subprocess (runtime/test_cli.py).
    config.addinivalue_line("filterwarnings", "ignore::pygpukit.errors.BackendFallbackWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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

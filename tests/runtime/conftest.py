"""Shared fixtures for the runtime tests: fresh random data each run."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np
import pytest


def pytest_configure(config: pytest.Config) -> None:
    # The once-only CPU fallback notice is itself tested in a subprocess (test_cli.py).
    config.addinivalue_line("filterwarnings", "ignore::pygpukit.errors.BackendFallbackWarning")


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

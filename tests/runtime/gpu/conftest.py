"""Helpers of the GPU tests (each test module sets ``pytestmark = pytest.mark.gpu``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Fresh non-zero random data of any runtime dtype (bfloat16 through ml_dtypes)."""
    dt = gp.dtypes.normalize(dtype)
    if dt == np.bool_:
        out = rng.integers(0, 2, size=shape).astype(bool)
        if out.size:
            out.flat[0] = True
        return out
    if dt.kind in "iu":
        info = np.iinfo(dt)
        out = rng.integers(
            max(int(info.min), -100), min(int(info.max), 100), size=shape, endpoint=True
        ).astype(dt)
        out[out == 0] = 7
        return out
    return (rng.standard_normal(shape) * 3 + 0.5).astype(dt)


@pytest.fixture
def make(rng: np.random.Generator) -> Callable[[tuple[int, ...], str], np.ndarray]:
    """``make(shape, dtype)``: fresh random host data (the seed is in the report on failure)."""
    return lambda shape, dtype: _random_array(rng, shape, dtype)

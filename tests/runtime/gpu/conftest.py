"""Helpers of the GPU tests (each test module sets ``pytestmark = pytest.mark.gpu``)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import memory


@pytest.fixture
def make(rand: Callable[..., np.ndarray]) -> Callable[[tuple[int, ...], str], np.ndarray]:
    """``make(shape, dtype)``: the runtime tests' ``rand`` with the dtype required and checked.

    Fresh non-zero random host data of any runtime dtype (bfloat16 through ml_dtypes); the
    seed is in the report on failure.
    """
    return lambda shape, dtype: rand(shape, gp.dtypes.normalize(dtype))


def _settle() -> None:
    """Drop earlier tests' arrays and return cached memory: this test's numbers are its own."""
    gc.collect()
    gp.synchronize()
    memory.set_limit(None, device=0)
    memory.empty_cache(0)


@pytest.fixture
def fresh_pool() -> Iterator[None]:
    """No device limit and an empty cache before and after the test."""
    _settle()
    yield
    _settle()

"""Helpers of the GPU tests (each test module sets ``pytestmark = pytest.mark.gpu``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp


@pytest.fixture
def make(rand: Callable[..., np.ndarray]) -> Callable[[tuple[int, ...], str], np.ndarray]:
    """``make(shape, dtype)``: the runtime tests' ``rand`` with the dtype required and checked.

    Fresh non-zero random host data of any runtime dtype (bfloat16 through ml_dtypes); the
    seed is in the report on failure.
    """
    return lambda shape, dtype: rand(shape, gp.dtypes.normalize(dtype))

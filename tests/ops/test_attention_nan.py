"""NaN propagates through attention as in PyTorch (cases: attention_nan_cases.py).

On the CPU backend this is the NumPy path; the GPU kernels run the same cases in
gpu/test_gpu_attention_nan.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from attention_nan_cases import check_decode_nan, check_prefill_nan

Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_prefill_propagates_nan(rand: Rand, where: str, causal: bool) -> None:
    check_prefill_nan(rand, where, causal)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize(
    "where", ["q", "k inside", "v inside", "k past the length", "v past the length"]
)
def test_decode_propagates_nan(rand: Rand, where: str, paged: bool) -> None:
    check_decode_nan(rand, where, paged, capacity=64)

"""NaN propagation of every attention kernel on the GPU (cases: ../attention_nan_cases.py).

Each prefill kernel (mma.sync, and on Hopper wgmma_pipe, wgmma_tma and wgmma_persist) and each
decode kernel (mma, mma2, bulk2, simt), with one split and with a
cache long enough for flash-decoding splits and their combine kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from attention_nan_cases import check_decode_nan, check_prefill_nan

import pygpukit as gp

pytestmark = pytest.mark.gpu
Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("kernel", ["mma", "wgmma_pipe", "wgmma_tma", "wgmma_persist"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_prefill_kernels_propagate_nan(
    rand: Rand, monkeypatch: pytest.MonkeyPatch, kernel: str, d: int, causal: bool, where: str
) -> None:
    if kernel != "mma" and tuple(gp.get_device_info()["sm"]) != (9, 0):
        pytest.skip("the wgmma kernels run on SM 9.0 only")
    monkeypatch.setenv("PYGPUKIT_ATTENTION_KERNEL", kernel)
    check_prefill_nan(rand, where, causal, d)


@pytest.mark.parametrize("kernel", ["mma", "mma2", "bulk2", "bulk3", "tma2", "tma3", "simt"])
@pytest.mark.parametrize("capacity", [64, 4096])  # one split; several splits and the combine
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("where", ["q", "k inside", "v inside", "k past the length"])
def test_decode_kernels_propagate_nan(
    rand: Rand, monkeypatch: pytest.MonkeyPatch, kernel: str, capacity: int, paged: bool, where: str
) -> None:
    monkeypatch.setenv("PYGPUKIT_DECODE_KERNEL", kernel)
    check_decode_nan(rand, where, paged, capacity)

"""DLPack zero-copy with PyTorch and CuPy, both directions."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    return torch


def test_torch_to_pygpukit_shares_memory(make):
    torch = _torch()
    t = torch.arange(1000, dtype=torch.float32, device="cuda").reshape(10, 100)
    x = gp.from_dlpack(t)
    assert x.data_ptr == t.data_ptr()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), t.cpu().numpy())
    x[0, :] = 5.0
    gp.synchronize()
    assert float(t[0, 3]) == 5.0
    view = gp.from_dlpack(t.t())  # strided producer
    np.testing.assert_array_equal(view.to_numpy(), t.t().cpu().numpy())


def test_pygpukit_to_torch_shares_memory(make):
    torch = _torch()
    host = make((64, 33), "float32")
    x = gp.from_numpy(host)
    t = torch.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr
    np.testing.assert_array_equal(t.cpu().numpy(), host)
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), host * 2)
    bf = torch.from_dlpack(gp.from_numpy(host).astype("bfloat16"))
    assert bf.dtype == torch.bfloat16


def test_cupy_both_ways(make):
    cp = pytest.importorskip("cupy")
    host = make((300,), "int32")
    x = gp.from_numpy(host)
    c = cp.from_dlpack(x)
    assert c.data.ptr == x.data_ptr
    c += 1
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(x.to_numpy(), host + 1)
    c2 = cp.arange(50, dtype=cp.float64)
    y = gp.from_dlpack(c2)
    assert y.data_ptr == c2.data.ptr
    y.fill(3.0)
    gp.synchronize()
    assert float(c2[10]) == 3.0

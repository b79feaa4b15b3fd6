from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp

ON_GPU = gp.is_cuda_available()
cpu_only = pytest.mark.skipif(ON_GPU, reason="CPU-backend DLPack exchange with NumPy")


@cpu_only
def test_export_to_numpy_is_zero_copy(rand) -> None:
    a = gp.from_numpy(rand((3, 4)))
    assert a.__dlpack_device__() == (1, 0)
    view = np.from_dlpack(a)
    a[1, 2] = 42.0
    assert view[1, 2] == 42.0
    strided = np.from_dlpack(a[:, ::2])
    np.testing.assert_array_equal(strided, a.to_numpy()[:, ::2])


@cpu_only
def test_import_from_numpy_is_zero_copy(rand) -> None:
    host = rand((5,), np.int32)
    a = gp.from_dlpack(host)
    host[0] = -77
    assert a[0].item() == -77
    assert gp.from_dlpack(a) is a
    # a non-contiguous producer is copied into a fresh buffer
    b = gp.from_dlpack(host[::2])
    np.testing.assert_array_equal(b.to_numpy(), host[::2])


@cpu_only
def test_cpu_has_no_cuda_array_interface_and_refuses_streams(rand) -> None:
    a = gp.from_numpy(rand((2,)))
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(BufferError, match="stream must be None"):
        a.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="copy=True"):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(2, 0))


@cpu_only
def test_bfloat16_cannot_cross_numpy_dlpack() -> None:
    a = gp.from_numpy(np.ones(3, dtype=ml_dtypes.bfloat16))
    with pytest.raises(BufferError):
        np.from_dlpack(a)


@cpu_only
def test_asarray_copies_host_producers_and_routes_cuda_ones_to_dlpack(rand) -> None:
    host = rand((4,))
    a = gp.asarray(host)
    host[0] = 1234.0
    assert a[0].item() != 1234.0  # host data is copied, never aliased

    class CudaTensor:
        def __dlpack__(self, stream=None):
            raise AssertionError("the CPU backend must not import CUDA memory")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match="cannot share"):
        gp.asarray(CudaTensor())


def test_from_dlpack_refuses_other_devices() -> None:
    class Foreign:
        def __dlpack__(self, stream=None):
            raise AssertionError("must not be called")

        def __dlpack_device__(self):
            return (1, 0) if ON_GPU else (2, 0)

    with pytest.raises(BufferError, match="cannot share"):
        gp.from_dlpack(Foreign())

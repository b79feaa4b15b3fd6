"""Malformed calls raise the documented exception, and the runtime keeps working afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.errors import (
    CompileError,
    CudaError,
    DeviceNotSupportedError,
    LibraryNotFoundError,
    OutOfMemoryError,
    PyGPUkitError,
)

ON_GPU = gp.is_cuda_available()

SCALE = r"""
extern "C" __global__
void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor;
}
"""


def _a() -> gp.GPUArray:
    return gp.from_numpy(np.arange(1, 13, dtype=np.float32).reshape(3, 4))


def _call_kernel(*args: Any, **kwargs: Any) -> None:
    gp.jit(SCALE, "scale")(*args, **kwargs)


def _setitem(target: gp.GPUArray, key: Any, value: Any) -> None:
    target[key] = value


def _elapsed_without_timing() -> None:
    start, end = gp.Event(), gp.Event()
    start.record()
    end.record()
    start.elapsed_time(end)


def _sync_inside_capture() -> None:
    x = gp.ones((4,))
    with gp.graph_capture():
        x.to_numpy()


# The error a kernel-argument mistake raises: on the CPU backend gp.jit itself refuses.
KERNEL_ARG_ERROR = TypeError if ON_GPU else DeviceNotSupportedError
KERNEL_ARG_MATCH = "parameter|argument" if ON_GPU else "need a CUDA GPU"

CASES: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    ("negative size", lambda: gp.zeros((-1, 3)), ValueError, "negative dimensions"),
    ("non-int shape entry", lambda: gp.empty((2, "a")), TypeError, "shape entries must be ints"),
    ("float shape", lambda: gp.empty(2.5), TypeError, "shape must be an int"),
    ("None shape", lambda: gp.empty(None), TypeError, "shape must be"),
    ("complex dtype", lambda: gp.ones((2,), dtype="complex64"), TypeError, "unsupported dtype"),
    ("unknown dtype name", lambda: gp.zeros(3, dtype="nope"), TypeError, "unsupported dtype"),
    ("string fill value", lambda: gp.full((2,), "x"), TypeError, "fill value must be"),
    ("fill value out of range", lambda: gp.full((2,), 300, "uint8"), ValueError, "out of range"),
    ("arange zero step", lambda: gp.arange(0, 10, 0), ValueError, "step must not be zero"),
    ("arange of a string", lambda: gp.arange("a"), TypeError, "real number"),
    ("linspace negative num", lambda: gp.linspace(0, 1, -3), ValueError, "non-negative"),
    ("from_numpy of a list", lambda: gp.from_numpy([1, 2]), TypeError, "must be a numpy.ndarray"),
    (
        "from_numpy complex",
        lambda: gp.from_numpy(np.ones(3, np.complex64)),
        TypeError,
        "unsupported dtype",
    ),
    ("asarray of strings", lambda: gp.asarray(["a", "b"]), TypeError, "unsupported dtype"),
    ("asarray uint16", lambda: gp.asarray(np.ones(2, np.uint16)), TypeError, "unsupported dtype"),
    ("index past the end", lambda: _a()[3], IndexError, "out of bounds for axis 0"),
    ("negative index past the start", lambda: _a()[:, -5], IndexError, "out of bounds for axis 1"),
    ("too many indices", lambda: _a()[0, 0, 0], IndexError, "too many indices"),
    ("two ellipses", lambda: _a()[..., ...], IndexError, "single ellipsis"),
    ("list index", lambda: _a()[[0, 1]], TypeError, "basic indexing"),
    ("bool index", lambda: _a()[True], TypeError, "boolean indices"),
    ("float index", lambda: _a()[1.5], TypeError, "unsupported index"),
    ("reshape to a different size", lambda: _a().reshape(5, 5), ValueError, "cannot reshape"),
    ("reshape with two -1", lambda: _a().reshape(-1, -1), ValueError, "one unknown dimension"),
    ("transpose repeated axis", lambda: _a().transpose(0, 0), ValueError, "not a permutation"),
    ("transpose wrong length", lambda: _a().transpose(0, 1, 2), ValueError, "don't match"),
    ("squeeze a size-4 axis", lambda: _a().squeeze(1), ValueError, "size not equal to one"),
    ("squeeze axis out of range", lambda: _a().squeeze(5), IndexError, "out of bounds"),
    ("expand_dims axis out of range", lambda: _a().expand_dims(4), IndexError, "out of bounds"),
    ("broadcast incompatible", lambda: _a().broadcast_to((3, 5)), ValueError, "cannot broadcast"),
    ("broadcast to fewer dims", lambda: _a().broadcast_to((4,)), ValueError, "fewer dimensions"),
    ("view with another itemsize", lambda: _a().view("float16"), ValueError, "one itemsize"),
    ("astype to complex", lambda: _a().astype("complex128"), TypeError, "unsupported dtype"),
    ("truth value of many", lambda: bool(_a()), ValueError, "ambiguous"),
    ("item of many", lambda: _a().item(), ValueError, "exactly one element"),
    ("len of 0-d", lambda: len(gp.full((), 1.0)), TypeError, "0-d"),
    (
        "setitem wrong shape",
        lambda: _setitem(_a(), slice(0, 2), gp.ones((3,))),
        ValueError,
        "broadcast",
    ),
    ("fill with text", lambda: _a().fill("abc"), TypeError, "cannot fill"),
    ("device out of range", lambda: gp.get_device_info(7), ValueError, "does not exist"),
    ("negative device", lambda: gp.set_device(-1), ValueError, "does not exist"),
    ("device not an int", lambda: gp.Device("a"), TypeError, "int ordinal"),
    ("stream priority not an int", lambda: gp.Stream(priority="high"), TypeError, "priority"),
    ("elapsed_time without timing", _elapsed_without_timing, ValueError, "timing=True"),
    ("from_dlpack of a non-producer", lambda: gp.from_dlpack(object()), TypeError, "__dlpack__"),
    (
        "allocation larger than memory",
        lambda: gp.empty((2**40,), "float64"),
        MemoryError,
        "requested",
    ),
    (
        "sync point inside graph capture",
        _sync_inside_capture,
        CudaError if ON_GPU else DeviceNotSupportedError,
        "being captured" if ON_GPU else "need a CUDA GPU",
    ),
    (
        "kernel: too few arguments",
        lambda: _call_kernel(gp.ones((4,))),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
    (
        "kernel: too many arguments",
        lambda: _call_kernel(gp.ones((4,)), 0.5, 4, 1),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
    (
        "kernel: text for a float",
        lambda: _call_kernel(gp.ones((4,)), "half", 4),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
    (
        "kernel: float for an int",
        lambda: _call_kernel(gp.ones((4,)), 0.5, 4.5),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
    (
        "kernel: NumPy array for a pointer",
        lambda: _call_kernel(np.ones(4, np.float32), 0.5, 4),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
    (
        "kernel: unknown keyword",
        lambda: _call_kernel(gp.ones((4,)), factor=0.5, n=4, m=3),
        KERNEL_ARG_ERROR,
        KERNEL_ARG_MATCH,
    ),
]


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(
    ("call", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_call_raises_and_runtime_survives(call, error, match, rand) -> None:
    with pytest.raises(error, match=match):
        call()
    # a correct op right after: fresh random data through a strided view and back
    host = rand((5, 6))
    arr = gp.from_numpy(host)
    np.testing.assert_array_equal(arr[::2, 1:].T.astype("float64").to_numpy(), host[::2, 1:].T)


def test_error_hierarchy() -> None:
    for cls in (
        CudaError,
        OutOfMemoryError,
        CompileError,
        DeviceNotSupportedError,
        LibraryNotFoundError,
    ):
        assert issubclass(cls, PyGPUkitError)
    assert issubclass(OutOfMemoryError, MemoryError)
    assert issubclass(gp.BackendFallbackWarning, RuntimeWarning)


def test_cuda_error_fields_and_message() -> None:
    err = CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered")
    assert (err.code, err.name) == (700, "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "CUDA_ERROR_ILLEGAL_ADDRESS (700)" in str(err) and "out of bounds" in str(err)


def test_cuda_error_capture_hint_only_when_the_message_lacks_it() -> None:
    bare = CudaError(900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted")
    assert "while a stream is being captured" in str(bare)
    explained = CudaError(900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "sync while captured")
    assert str(explained).count("captur") == 1
    other = CudaError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument")
    assert str(other) == "CUDA_ERROR_INVALID_VALUE (1): invalid argument."


def test_out_of_memory_message_says_what_to_do() -> None:
    err = OutOfMemoryError(3 * 2**30, 2**30, 2 * 2**30, "inference")
    text = str(err)
    assert "3.0 GiB" in text and "1.0 GiB" in text and "2.0 GiB" in text
    assert "'inference'" in text and "empty_cache" in text
    assert "partition a larger memory limit" in text and "set_limit" not in text
    # Under its quota (or without one), a partition was refused by the scheduler's QoS: the
    # message points at the other partitions, not at the quota or the cache.
    qos = str(OutOfMemoryError(2**28, 2**29, None, "batch"))
    assert "'batch'" in qos and "other partitions" in qos and "empty_cache" not in qos
    assert "other partitions" in str(OutOfMemoryError(2**28, 2**29, 2**31, "batch"))
    assert "other partitions" not in text
    small = str(OutOfMemoryError(4096, 100, None))
    assert "4.0 KiB" in small and "100 B" in small and "gp.memory.set_limit" in small
    assert (err.requested, err.in_use, err.limit, err.partition) == (
        3 * 2**30,
        2**30,
        2 * 2**30,
        "inference",
    )


def test_compile_error_points_at_the_failing_line() -> None:
    source = 'extern "C" __global__ void k(float* x) {\n    x[0] = undefined_name;\n}\n'
    log = 'k.cu(2): error: identifier "undefined_name" is undefined\n\n1 error detected.\n'
    err = CompileError(log, source, "k.cu")
    text = str(err)
    assert 'k.cu(2): error: identifier "undefined_name"' in text
    assert "line 2: x[0] = undefined_name;" in text
    assert err.log == log


def test_library_not_found_lists_candidates() -> None:
    err = LibraryNotFoundError(
        "nvrtc", [("/a/libnvrtc.so.13", "no such file"), ("libnvrtc.so", "nope")]
    )
    text = str(err)
    assert "/a/libnvrtc.so.13: no such file" in text and "pygpukit-runtime[jit]" in text
    assert err.library == "nvrtc" and len(err.tried) == 2

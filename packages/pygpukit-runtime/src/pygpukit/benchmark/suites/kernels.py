"""CUDA C++ sources the launch and jit suites compile at run time (PyGPUkit and CuPy alike)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..case import Skip
from ..peers import Library

__all__ = ["NO_TORCH_JIT", "SCALE_NAME", "SCALE_SOURCE", "compile_scale", "launch_scale"]

#: ``y = factor * x``: out of place, so repeated launches give the same result.
SCALE_NAME = "scale"
SCALE_SOURCE = r"""
extern "C" __global__
void scale(const float* x, float* y, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * factor;
}
"""

BLOCK = 256

#: Why the PyTorch column of kernel rows is empty.
NO_TORCH_JIT = "PyTorch has no run-time CUDA C++ kernels without a CUDA Toolkit"


def compile_scale(lib: Library, source: str = SCALE_SOURCE) -> Any:
    """``source`` compiled into a launchable kernel object of ``lib`` (PyGPUkit or CuPy)."""
    if lib.name == "pygpukit":
        if not lib.on_gpu:
            raise Skip("JIT kernels need a CUDA GPU (CPU backend)")
        available = getattr(lib.module, "is_nvrtc_available", None)
        if available is not None and not available():
            raise Skip("NVRTC JIT compiler not available")
        return lib.require("jit")(source, func=SCALE_NAME)
    if lib.name == "cupy":
        return lib.module.RawKernel(source, SCALE_NAME)
    raise Skip(f"{lib.name} has no run-time CUDA C++ kernels")


def launch_scale(lib: Library, kernel: Any, x: Any, y: Any, factor: float, n: int) -> None:
    """One launch of a compiled ``scale`` kernel over ``n`` elements."""
    if lib.name == "pygpukit":
        kernel(x, y, factor=factor, n=n)
    else:
        grid = ((n + BLOCK - 1) // BLOCK,)
        kernel(grid, (BLOCK,), (x, y, np.float32(factor), np.int32(n)))

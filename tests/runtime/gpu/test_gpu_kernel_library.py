"""pygpukit.kernels on the GPU: a package-style kernel built, loaded from its cubin or JIT-compiled
from the shipped source when no cubin fits, and launched with the manifest's argument types."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.kernels import KernelLibrary, target_arch
from pygpukit.kernels import build as kbuild

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include "pygpukit/kernel.cuh"

constexpr int kBlock = 128;

template <typename T>
__device__ __forceinline__ void axpy(T* y, const T* x, float a, long long n) {
    long long i = blockIdx.x * (long long)kBlock + threadIdx.x;
    if (i < n) y[i] = T(a * float(x[i]) + float(y[i]));
}

#define PGK_AXPY(sfx, T)                                                                   \
    PGK_KERNEL_BOUNDS(axpy_##sfx, (T* y, const T* x, float a, long long n), kBlock) {      \
        axpy<T>(y, x, a, n);                                                               \
    }
PGK_FLOAT_TYPES(PGK_AXPY)
PGK_CONSTANT(AXPY_BLOCK, kBlock);
"""


def build_library(root: Path, archs: list[str]) -> KernelLibrary:
    src = root / "kernels" / "axpy.cu"
    src.parent.mkdir(parents=True)
    src.write_text(SOURCE)
    kbuild.build([src], root / "_kernels", archs)
    return KernelLibrary(root / "_kernels", "test-package")


def run_axpy(lib: KernelLibrary, dtype: str, rng: np.random.Generator) -> None:
    n = 10_007
    hx = rng.standard_normal(n).astype(np.float32)
    hy = rng.standard_normal(n).astype(np.float32)
    x, y = gp.from_numpy(hx).astype(dtype), gp.from_numpy(hy).astype(dtype)
    ref = 0.75 * x.astype("float32").to_numpy() + y.astype("float32").to_numpy()
    block = lib.constant("axpy", "AXPY_BLOCK")
    sfx = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    kernel = lib.kernel("axpy", f"axpy_{sfx}")
    assert kernel is lib.kernel("axpy", f"axpy_{sfx}")  # cached
    kernel.launch(-(-n // block), block, (y, x, 0.75, n))
    out = y.astype("float32").to_numpy()
    tol = {"float32": 1e-6, "float16": 3e-3, "bfloat16": 1e-2}[dtype]
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < tol


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cubin_for_this_device(tmp_path: Path, rng: np.random.Generator, dtype: str) -> None:
    lib = build_library(tmp_path, [target_arch().removeprefix("sm_")])
    assert lib.cubin_arch() == target_arch()
    run_axpy(lib, dtype, rng)


def test_jit_fallback_without_a_fitting_cubin(tmp_path: Path, rng: np.random.Generator) -> None:
    """A wheel without this SM's cubin compiles the shipped source (through gp.jit's cache)."""
    if not gp.is_nvrtc_available():
        pytest.skip("NVRTC is not available")
    lib = build_library(tmp_path, ["80"])
    manifest = json.loads((tmp_path / "_kernels" / "manifest.json").read_text())
    manifest["archs"] = ["999"]  # no cubin fits any device
    (tmp_path / "_kernels" / "manifest.json").write_text(json.dumps(manifest))
    lib = KernelLibrary(tmp_path / "_kernels", "test-package")
    assert lib.cubin_arch() is None
    run_axpy(lib, "float32", rng)


def test_wrong_argument_names_the_parameter(tmp_path: Path) -> None:
    lib = build_library(tmp_path, [target_arch().removeprefix("sm_")])
    kernel = lib.kernel("axpy", "axpy_f32")
    y = gp.zeros((16,), "float32")
    with pytest.raises(TypeError, match="'a'"):
        kernel.launch(1, 128, (y, y, "0.5", 16))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernel.launch(1, 128, (y, y, 0.5))

"""JIT kernels on the GPU: the README's scale kernel, templates, attributes, the disk cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

SCALE = """
extern "C" __global__
void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor;
}
"""


def test_readme_scale_kernel(make):
    host = make((1024, 1024), "float32")
    x = gp.from_numpy(host)
    kernel = gp.jit(SCALE, func="scale")
    kernel(x, factor=0.5, n=x.size)
    np.testing.assert_array_equal(x.to_numpy(), host * np.float32(0.5))


def test_lean_launch_with_positional_arguments(make):
    host = make((3000,), "float32")
    x = gp.from_numpy(host)
    kernel = gp.jit(SCALE, func="scale")
    stream = gp.Stream()
    kernel.launch((3000 + 127) // 128, 128, (x, 2.0, 3000), stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), host * np.float32(2.0))
    with pytest.raises(TypeError, match="takes 3 arguments, got 2"):
        kernel.launch(1, 128, (x, 2.0))
    with pytest.raises(TypeError, match="'factor'"):
        kernel.launch(1, 128, (x, "2", 3000))
    np.testing.assert_array_equal(x.to_numpy(), host * np.float32(2.0))  # nothing ran


def test_explicit_grid_stream_and_scalar_types(make):
    src = """
    #include <cuda_fp16.h>
    extern "C" __global__ void axpb(double* y, const float* x, __half a, long long b,
                                    unsigned char flag, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = (double)x[i] * (double)__half2float(a) + (double)b + flag;
    }
    """
    host = make((5000,), "float32")
    x = gp.from_numpy(host)
    y = gp.zeros((5000,), dtype="float64")
    stream = gp.Stream()
    k = gp.jit(src, func="axpb")
    k(y, x, np.float16(1.5), np.int64(-7), True, 5000, grid=(20, 1, 1), block=256, stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(y.to_numpy(), host.astype(np.float64) * 1.5 - 7 + 1, rtol=1e-12)


def test_templates_through_name_expressions(make):
    src = """
    template <typename T>
    __global__ void twice(T* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = x[i] + x[i];
    }
    """
    mod = gp.jit_module(src, name_expressions=["twice<float>", "twice<int>"])
    for dtype, expr in (("float32", "twice<float>"), ("int32", "twice<int>")):
        host = make((777,), dtype)
        x = gp.from_numpy(host)
        mod[expr](x, x.size)
        np.testing.assert_array_equal(x.to_numpy(), host + host)


def test_kernel_attributes():
    attrs = gp.jit(SCALE, func="scale").attributes()
    assert attrs["num_regs"] > 0
    assert attrs["max_threads_per_block"] >= 256


def test_disk_cache_hit_in_second_process(tmp_path):
    probe = textwrap.dedent(
        f"""
        import json, time
        import pygpukit as gp
        src = {SCALE!r} + "// cache probe {os.getpid()}"
        x = gp.ones((1000,), dtype="float32")
        t0 = time.perf_counter()
        k = gp.jit(src, func="scale")
        elapsed = time.perf_counter() - t0
        k(x, 2.0, x.size)
        assert (x.to_numpy() == 2).all()
        print(json.dumps({{"seconds": elapsed}}))
        """
    )
    env = dict(os.environ, PYGPUKIT_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
    assert any(tmp_path.rglob("*")), "the first process wrote no cache entry"
    print(f"\nJIT compile {runs[0] * 1e3:.1f} ms, cache load {runs[1] * 1e3:.1f} ms")
    assert runs[1] < runs[0]


_FALLBACK_PROBE = """
import json, os, shutil, sys, tempfile
import numpy as np
import pygpukit as gp
from pygpukit._environment import include_dirs, library_candidates
from pygpukit.backend import cuda
native = cuda._native
kernels = tempfile.mkdtemp()
shutil.copytree(os.path.join(cuda._KERNEL_DIR, "src"), os.path.join(kernels, "src"))
manifest = open(os.path.join(cuda._KERNEL_DIR, "manifest.json")).read()
nvrtc = [c.path for c in library_candidates("nvrtc")] if sys.argv[1] == "jit" else []
# Only sources, no cubins: the built-in kernels must be compiled (or refused) on first use.
native.set_kernel_dir(kernels, manifest, [c.path for c in include_dirs()], nvrtc)
try:
    x = gp.full((1000,), 3.0, dtype="float32")
    print(json.dumps({"ok": bool((x.to_numpy() == 3).all())}))
except RuntimeError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@pytest.mark.parametrize("mode", ["jit", "no-nvrtc"])
def test_builtin_kernels_without_cubins(mode):
    out = subprocess.run(
        [sys.executable, "-c", _FALLBACK_PROBE, mode], capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "jit":
        assert result == {"ok": True}
    else:
        assert "sm_" in result["error"] and "pygpukit-runtime[jit]" in result["error"]

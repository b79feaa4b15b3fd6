"""``python -m pygpukit demo``: a short tour that runs on whichever backend is present."""

from __future__ import annotations

import sys
import warnings
from argparse import Namespace
from typing import TextIO

import numpy as np

__all__ = ["command", "main", "run"]

_SCALE = r"""
extern "C" __global__
void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor;
}
"""


def run(out: TextIO) -> None:
    """Run the tour, writing what happens to ``out``; raises if a result is wrong."""
    import pygpukit as gp

    w = out.write
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gp.BackendFallbackWarning)
        backend = gp.backend_name()
    w(f"backend: {backend}\n")
    for warning in caught:
        w(f"  note: {warning.message}\n")
    info = gp.get_device_info()
    w(f"device: {info['name']}\n\n")

    rng = np.random.default_rng()
    host = rng.standard_normal((4, 6)).astype(np.float32)
    x = gp.from_numpy(host)
    w(f"1. from_numpy: {x.shape} {x.dtype} on {x.device}\n")
    w(
        f"2. views without copies: x[1:, ::2].T has shape {x[1:, ::2].T.shape}, strides "
        f"{x[1:, ::2].T.strides}\n"
    )
    if not np.array_equal(x[1:, ::-2].T.to_numpy(), host[1:, ::-2].T):
        raise AssertionError("strided view differs from NumPy")
    w("   ...and it round-trips to NumPy exactly\n")
    error = np.abs(x.astype(gp.bfloat16).to_numpy().astype(np.float32) - host).max()
    w(f"3. astype(bfloat16): max abs error {error:.3g}\n")
    z = gp.arange(0, 12, dtype="int32").reshape(3, 4)
    w(f"4. arange + reshape:\n{z!r}\n")
    e = gp.eye(3, dtype="float16")
    w(f"5. eye: {e.to_numpy().tolist()}\n")

    start, end = gp.Event(timing=True), gp.Event(timing=True)
    with gp.Stream(priority=-1) as s:
        start.record()
        y = gp.from_numpy(host, stream=s)
        end.record()
        s.synchronize()
    w(f"6. copy on a high-priority stream took {start.elapsed_time(end):.3f} ms\n")

    if gp.is_nvrtc_available():
        kernel = gp.jit(_SCALE, "scale")
        kernel(y, factor=0.5, n=y.size)
        ok = np.allclose(y.to_numpy(), host * 0.5)
        w(
            f"7. JIT kernel {kernel.signature()}: {'correct' if ok else 'WRONG'}, "
            f"{kernel.num_regs} registers\n"
        )
        if not ok:
            raise AssertionError("JIT kernel result differs from NumPy")
    else:
        w("7. JIT kernels: skipped (need a CUDA GPU and NVRTC; see `python -m pygpukit info`)\n")

    a = gp.from_numpy(rng.standard_normal((256, 128)).astype(np.float32))
    b = gp.from_numpy(rng.standard_normal((128, 64)).astype(np.float32))
    c = gp.softmax(a @ b * 0.1 + 1.0, axis=-1)  # matmul, elementwise with scalars, a reduction
    ref = a.to_numpy().astype(np.float64) @ b.to_numpy().astype(np.float64) * 0.1 + 1.0
    ref = np.exp(ref - ref.max(axis=-1, keepdims=True))
    ref /= ref.sum(axis=-1, keepdims=True)
    err = np.linalg.norm(c.to_numpy() - ref) / np.linalg.norm(ref)
    w(f"8. softmax(a @ b * 0.1 + 1.0): relative error vs float64 NumPy {err:.1e}\n")
    if not err < 1e-5:
        raise AssertionError("matmul/softmax result differs from NumPy")
    w(f"\ndone on the {backend} backend\n")


def command(args: Namespace) -> int:
    """``pygpukit demo``: the tour (the command takes no options)."""
    return main([])


def main(argv: list[str] | None = None) -> int:
    """Run the tour on stdout; exit status 0."""
    run(sys.stdout)
    return 0

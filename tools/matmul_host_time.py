"""Host time per call of small matmuls, layer by layer of the call path, against PyTorch.

Where the microseconds of ``a @ b`` and ``ops.linear`` go on the CUDA backend: each line times
one layer of the path in a loop with no synchronization inside (the host's cost per call, as the
benchmark's ``host`` timing), so the difference between two lines is what that layer adds.

    python tools/matmul_host_time.py [--sizes 256,1024] [--rows 16,128] [--calls 2000]

Lines (bfloat16):

- ``a @ b``: the public operator (one native call after a few attribute checks);
- ``linalg general path``: the step-by-step path (views, allocation, product) that products with
  ``out=``, broadcasting, vectors or promotion take;
- ``_native.matmul_new``: the native call alone (views, allocation, cuBLASLt launch in C++);
- ``torch a @ b`` (when PyTorch is installed);
- ``ops.linear x[M, K] @ W.T`` and ``linalg.matmul_nt`` for M rows of 4096 x 4096, and
  ``F.linear``.
"""

from __future__ import annotations

import argparse
import operator
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np


def per_call_us(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Median over 5 runs of the host microseconds per call of ``fn`` (synchronized around)."""
    for _ in range(min(calls, 200)):
        fn()
    sync()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
        sync()
    return float(np.median(runs))


def main() -> None:
    """Print the host time per call of each layer of the matmul path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024", help="n of the n x n x n products")
    parser.add_argument("--rows", default="16,128", help="M of ops.linear x[M, 4096]")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed run")
    args = parser.parse_args()

    import pygpukit as gp
    from pygpukit.backend import cuda_linalg
    from pygpukit.linalg import _matmul_general, matmul_nt
    from pygpukit.ops.linear import linear

    if gp.backend_name() != "cuda":
        raise SystemExit("needs the CUDA backend")
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    sync = gp.synchronize
    tsync = torch.cuda.synchronize if torch is not None else sync
    bf16 = gp.bfloat16

    def line(name: str, fn: Callable[[], Any], s: Callable[[], None] = sync) -> None:
        print(f"{name:<44} {per_call_us(fn, args.calls, s):8.1f} us")

    for n in (int(v) for v in args.sizes.split(",")):
        host = (rng.standard_normal((n, n)) * 0.1).astype(np.float32)
        a, b = gp.from_numpy(host.astype(bf16)), gp.from_numpy(host.T.copy().astype(bf16))
        choice = cuda_linalg.gemm_backend()
        native = cuda_linalg._native
        print(f"-- {n} x {n} x {n} bfloat16 (GEMM backend {choice})")
        line("a @ b", partial(operator.matmul, a, b))
        line("linalg general path", partial(_matmul_general, a, b, None, None))
        line("_native.matmul_new", partial(native.matmul_new, a._impl, b._impl, False, choice))
        if torch is not None:
            ta = torch.from_numpy(host).cuda().to(torch.bfloat16)
            tb = torch.from_numpy(host.T.copy()).cuda().to(torch.bfloat16)
            line("torch a @ b", partial(operator.matmul, ta, tb), tsync)
    k = 4096
    w_host = (rng.standard_normal((k, k)) * 0.02).astype(np.float32)
    w = gp.from_numpy(w_host.astype(bf16))
    for m in (int(v) for v in args.rows.split(",")):
        x_host = (rng.standard_normal((m, k)) * 0.1).astype(np.float32)
        x = gp.from_numpy(x_host.astype(bf16))
        y = gp.empty((m, k), bf16)
        print(f"-- linear {m} x {k} @ ({k} x {k}).T bfloat16")
        line("ops.linear", partial(linear, x, w))
        line("linalg.matmul_nt into out", partial(matmul_nt, x, w, y))
        if torch is not None:
            tx = torch.from_numpy(x_host).cuda().to(torch.bfloat16)
            tw = torch.from_numpy(w_host).cuda().to(torch.bfloat16)
            line("torch F.linear", partial(torch.nn.functional.linear, tx, tw), tsync)


if __name__ == "__main__":
    main()

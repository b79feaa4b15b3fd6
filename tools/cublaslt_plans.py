"""Which cuBLASLt algorithm each matmul shape runs, and what the one-time timing measured.

Runs one product per requested shape (square ``n x n x n`` for ``--sizes``, and
``ops.linear``-style ``x [M, K] @ W[N, K].T`` for ``--linear M,N,K`` triples), then prints every
cuBLASLt plan the process made: the problem, each candidate the heuristic returned (cuBLASLt's
algorithm, tile, stages, split-K, reduction and swizzle ids) with the GPU and host
microseconds per call the timed pass measured (``-1``: not timed; shapes below 64^3
multiply-adds run the heuristic's first choice untimed), and ``*`` on the one that runs.

    python tools/cublaslt_plans.py [--sizes 256,1024] [--dtypes bfloat16,float16]
                                   [--linear 1024,4096,4096 --linear 16,4096,4096]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    """Make the plans of the requested shapes and print every plan of the current device."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024", help="n of the n x n x n products")
    parser.add_argument("--dtypes", default="bfloat16,float16", help="dtypes of the products")
    parser.add_argument(
        "--linear", action="append", default=[], metavar="M,N,K", help="an x @ W.T shape"
    )
    args = parser.parse_args()

    import pygpukit as gp
    from pygpukit.backend import cuda_linalg
    from pygpukit.linalg import matmul_nt

    if gp.backend_name() != "cuda" or not cuda_linalg.cublaslt_status()["loaded"]:
        raise SystemExit("needs the CUDA backend with cuBLASLt")
    rng = np.random.default_rng(0)

    def rand(shape: tuple[int, ...], dtype: str) -> gp.GPUArray:
        return gp.from_numpy(rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    for dtype in args.dtypes.split(","):
        for n in (int(v) for v in args.sizes.split(",")):
            rand((n, n), dtype) @ rand((n, n), dtype)
        for triple in args.linear:
            m, n, k = (int(v) for v in triple.split(","))
            matmul_nt(rand((m, k), dtype), rand((n, k), dtype))
    gp.synchronize()
    for plan in cuda_linalg._native.cublaslt_plans(gp.get_device()):
        print(
            f"{plan['dtype']} m={plan['m']} n={plan['n']} k={plan['k']} batch={plan['batch']}"
            f"{' tf32' if plan['tf32'] else ''}: runs candidate {plan['chosen']}"
            f" ({'timed' if plan['tuned'] else 'heuristic first'})"
        )
        for i, c in enumerate(plan["candidates"]):
            mark = "*" if i == plan["chosen"] else " "
            print(
                f"  {mark}{i:2d} algo {c['algo_id']:3d} tile {c['tile']:3d} stages {c['stages']:3d}"
                f" splitk {c['splitk']:2d} reduction {c['reduction']} swizzle {c['swizzle']}"
                f"  gpu {c['gpu_us']:8.2f} us  host {c['host_us']:6.2f} us"
            )


if __name__ == "__main__":
    main()

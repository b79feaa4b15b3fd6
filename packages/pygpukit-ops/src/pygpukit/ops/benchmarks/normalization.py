"""ops_norm: row-wise layer ops (rmsnorm, layernorm, softmax) against PyTorch.

Shapes are ``rows x width`` (default 8192 x 8192; ``--sizes`` sets the widths, rows stay 8192);
dtype bfloat16 unless ``--dtypes`` says otherwise. PyTorch runs ``torch.nn.functional.rms_norm``,
``torch.nn.functional.layer_norm`` (with bias) and ``torch.softmax`` on the same data. Bytes
moved are the input read plus the output written (and the weight and bias, read once); the
ceiling is the card's copy bandwidth, the rate a single read-and-write pass can reach. Outputs
are checked on a sample of rows against float64 NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed, unavailable
from pygpukit.benchmark.checks import check_close
from pygpukit.benchmark.data import storage_dtype
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_norm"
SUPPORTED = ("float32", "float16", "bfloat16")
ROWS = 8192
#: Rows whose outputs are checked against float64 NumPy.
CHECK_ROWS = 64


def _rms_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def _ln_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _softmax_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class RowOp:
    """A row op: its PyGPUkit and PyTorch spellings, its float64 reference, its extra reads."""

    name: str
    pygpukit: Callable[[Any, Any, Any], Any]  # (x, weight, bias) -> y
    torch: Callable[[Any, Any, Any, Any], Any]  # (torch, x, weight, bias) -> y
    reference: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    params_read: int  # weight/bias vectors read per call


def _ops_module() -> Any:
    try:
        from pygpukit import ops
    except ImportError as exc:  # pragma: no cover - pygpukit-ops is this module's package
        raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
    return ops


OPS = (
    RowOp(
        "rmsnorm",
        lambda x, w, b: _ops_module().rmsnorm(x, w, 1e-6),
        lambda t, x, w, b: t.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
        _rms_ref,
        1,
    ),
    RowOp(
        "layernorm",
        lambda x, w, b: _ops_module().layernorm(x, w, b, 1e-5),
        lambda t, x, w, b: t.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        _ln_ref,
        2,
    ),
    RowOp(
        "softmax",
        lambda x, w, b: _ops_module().softmax(x),
        lambda t, x, w, b: t.softmax(x, dim=-1),
        _softmax_ref,
        0,
    ),
)


def row_case(ctx: SuiteContext, op: RowOp, rows: int, width: int, dtype: str) -> Case:
    """``op`` over ``rows`` rows of ``width`` elements of ``dtype``."""
    params: dict[str, int | float | str] = {"shape": f"{rows}x{width}", "dtype": dtype}
    if dtype not in SUPPORTED:
        return Case(NAME, op.name, params, {}, skip=f"{dtype} is not a {op.name} dtype")
    itemsize = storage_dtype(dtype).itemsize
    nbytes = 2 * rows * width * itemsize + op.params_read * width * itemsize

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [ctx.data.get((rows, width), dtype, k) for k in range(copies)]
        w_host = ctx.data.get((width,), dtype, 100)
        b_host = ctx.data.get((width,), dtype, 101)
        xs = [lib.upload(h, dtype) for h in hosts]
        w, b = lib.upload(w_host, dtype), lib.upload(b_host, dtype)
        check_rows = np.unique(ctx.rng.integers(0, rows, size=min(rows, CHECK_ROWS)))
        ref = op.reference(
            hosts[0][check_rows].astype(np.float64),
            w_host.astype(np.float64),
            b_host.astype(np.float64),
        )
        if lib.name == "torch":
            torch = lib.module

            def run(i: int) -> Any:
                return op.torch(torch, xs[i % copies], w, b)

        else:
            _ops_module()

            def run(i: int) -> Any:
                return op.pygpukit(xs[i % copies], w, b)

        def check(out: Any) -> float:
            got = lib.download(out)[check_rows]
            return check_close(got, ref, dtype, f"{op.name} ({lib.name})")

        return Timed(run=run, check=check)

    setups = {"pygpukit": setup, "torch": setup, "cupy": unavailable("CuPy has no fused row norm")}
    return Case(
        NAME,
        op.name,
        params,
        setups,
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        requires=("from_numpy",),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Every op for every dtype and width, 8192 rows each."""
    widths = ctx.pick_sizes(gpu=[8192], gpu_quick=[8192], cpu=[1024], cpu_quick=[256])
    rows = ROWS if ctx.on_gpu else 64
    for dtype in ctx.pick_dtypes(gpu=["bfloat16"], cpu=["float32"]):
        for width in widths:
            for op in OPS:
                yield row_case(ctx, op, rows, width, dtype)


SUITE = Suite(NAME, "bandwidth of rmsnorm, layernorm and softmax rows vs PyTorch", cases)

"""ops_launch: host time per call of the decode-time ops, through the function API and a layer.

A decode step is dozens of small launches whose GPU time is a few microseconds each, so what
the host spends per call (argument checks, planning, kernel lookup, packing) bounds the step.
Rows (host time per call, nothing synchronized inside the timed loop; PyTorch's
``F.linear`` in the same run for the GEMV):

- ``gemv``: ``ops.gemv`` of x [1, 4096] and W [4096, 4096] bfloat16 (``api=function``), and
  the same product through ``ops.layers.Linear`` (``api=layer``);
- ``linear``: ``ops.linear`` of x [M, 4096] (M = 16, 128: prefill chunks and batched decode,
  the cuBLASLt path) and W [4096, 4096] bfloat16, against ``F.linear``;
- ``decode_attention``: one query token, batch 1, Hq 32, Hkv 8, D 128 over 4096 cached tokens
  in a contiguous cache: ``ops.decode_attention`` (``api=function``) and
  ``ops.layers.Attention.decode`` (``api=layer``).

The layer rows skip where ``pygpukit.ops.layers`` does not exist, so the function rows can be
measured against an older ops package in the same run (``PYGPUKIT_BENCHMARK_PLUGINS`` naming
this module's ``SUITE`` with that package first on ``sys.path``). CPU runs use small sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed, case_key
from pygpukit.benchmark.checks import check_close
from pygpukit.benchmark.data import storage_dtype
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_launch"
DTYPE = "bfloat16"
APIS = ("function", "layer")


def _ops() -> Any:
    try:
        from pygpukit import ops
    except ImportError as exc:  # pragma: no cover - the suite ships inside pygpukit-ops
        raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
    return ops


def _layers() -> Any:
    try:
        from pygpukit.ops import layers
    except ImportError as exc:
        raise Skip(f"pygpukit.ops.layers does not exist in this ops package ({exc})") from exc
    return layers


def gemv_case(ctx: SuiteContext, n: int, k: int, api: str) -> Case:
    """``y = x @ W.T`` for one row of x: host time of one call."""
    params: dict[str, int | float | str] = {"m": 1, "n": n, "k": k, "dtype": DTYPE}
    peer_key = case_key(NAME, "gemv", params)
    params["api"] = api

    def setup(lib: Library, copies: int) -> Timed:
        xh = ctx.data.get((1, k), DTYPE, 0)
        wh = ctx.data.get((n, k), DTYPE, 1)
        x, w = lib.upload(xh, DTYPE), lib.upload(wh, DTYPE)
        call: Callable[[], Any]
        if lib.name == "torch":
            linear = lib.module.nn.functional.linear

            def call() -> Any:
                return linear(x, w)
        elif api == "layer":
            layer = _layers().Linear(w)

            def call() -> Any:
                return layer(x)
        else:
            gemv = _ops().gemv

            def call() -> Any:
                return gemv(x, w)

        ref = xh.astype(np.float64) @ wh.astype(np.float64).T

        def check(out: Any) -> float:
            got = lib.download(out).astype(np.float64).reshape(1, n)
            return check_close(got, ref, DTYPE, f"gemv ({lib.name}, {api})", 1.0)

        return Timed(run=lambda i: call(), check=check)

    libs = ("pygpukit", "torch") if api == "function" else ("pygpukit",)
    return Case(NAME, "gemv", params, dict.fromkeys(libs, setup), timing="host", peer_key=peer_key)


def linear_case(ctx: SuiteContext, m: int, n: int, k: int) -> Case:
    """``y = x @ W.T`` for ``m`` rows of x (the GEMM path): host time of one call."""
    params: dict[str, int | float | str] = {"m": m, "n": n, "k": k, "dtype": DTYPE}
    params["api"] = "function"

    def setup(lib: Library, copies: int) -> Timed:
        xh = ctx.data.get((m, k), DTYPE, 0)
        wh = ctx.data.get((n, k), DTYPE, 1)
        x, w = lib.upload(xh, DTYPE), lib.upload(wh, DTYPE)
        linear = lib.module.nn.functional.linear if lib.name == "torch" else _ops().linear
        ref = xh.astype(np.float64) @ wh.astype(np.float64).T

        def check(out: Any) -> float:
            got = lib.download(out).astype(np.float64)
            return check_close(got, ref, DTYPE, f"linear ({lib.name})", 1.0)

        return Timed(run=lambda i: linear(x, w), check=check)

    return Case(NAME, "linear", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="host")  # fmt: skip


def decode_case(ctx: SuiteContext, hq: int, hkv: int, n: int, d: int, api: str) -> Case:
    """One decode-attention step for one sequence over ``n`` cached tokens: host time."""
    params: dict[str, int | float | str] = {
        "B": 1, "Hq": hq, "Hkv": hkv, "ctx": n, "D": d, "dtype": DTYPE, "api": api
    }  # fmt: skip

    def setup(lib: Library, copies: int) -> Timed:
        gp = lib.module
        # q scaled down so that the softmax is neither one-hot nor flat.
        qh = (ctx.data.get((1, hq, d), DTYPE, 0).astype(np.float32) * 0.3).astype(
            storage_dtype(DTYPE)
        )
        kh = ctx.data.get((1, hkv, n, d), DTYPE, 1)
        vh = ctx.data.get((1, hkv, n, d), DTYPE, 2)
        q, kc, vc = (lib.upload(a, DTYPE) for a in (qh, kh, vh))
        lens = gp.from_numpy(np.full(1, n, np.int32))
        call: Callable[[], Any]
        if api == "layer":
            attn = _layers().Attention(hq, hkv, d)

            def call() -> Any:
                return attn.decode(q, kc, vc, lens)
        else:
            decode = _ops().decode_attention

            def call() -> Any:
                return decode(q, kc, vc, lens)

        group = hq // hkv
        qf = qh.astype(np.float64).reshape(hkv, group, d)
        kf, vf = kh.astype(np.float64)[0], vh.astype(np.float64)[0]
        s = np.einsum("hgd,hnd->hgn", qf, kf) / math.sqrt(d)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        ref = np.einsum("hgn,hnd->hgd", p / p.sum(axis=-1, keepdims=True), vf).reshape(1, hq, d)

        def check(out: Any) -> float:
            got = lib.download(out).astype(np.float64)
            return check_close(got, ref, DTYPE, f"decode_attention ({api})", 1.0)

        return Timed(run=lambda i: call(), check=check)

    return Case(NAME, "decode_attention", params, {"pygpukit": setup}, timing="host")


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """GEMV, linear (16 and 128 rows) and batch-1 decode attention rows.

    GEMV and linear are 4096 x 4096 (256 on the CPU); decode attention spans 4096 tokens.
    """
    n = k = 4096 if ctx.on_gpu else 256
    ctx_len = 4096 if ctx.on_gpu else 128
    for api in APIS:
        yield gemv_case(ctx, n, k, api)
    for m in (16, 128):
        yield linear_case(ctx, m, n, k)
    for api in APIS:
        yield decode_case(ctx, 32, 8, ctx_len, 128, api)


SUITE = Suite(NAME, "host time per call of decode-time ops: function API and layers", cases)

"""ops_attention: flash-attention prefill vs PyTorch SDPA, decode attention vs a PyTorch decode.

- ``sdpa_prefill``: ``q, k, v [B, H, S, D]``, causal, once per PyGPUkit kernel on the GPU
  (``kernel=mma``: mma.sync; ``kernel=wgmma_tma``: warp-specialized, one TMA producer thread
  feeding two consumer warpgroups that take turns at the tensor cores (ping-pong);
  ``kernel=wgmma_persist``: the same, persistent, one CTA per SM running a list of query tiles,
  the default on SM 9.0; ``kernel=wgmma_pipe``: each warpgroup overlaps its softmax with its
  own P V; the Hopper rows skipped elsewhere), vs
  ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``. Default B=4, H=32,
  S=4096, D=128 bfloat16 (``--seq-lens`` sets S). TFLOP/s count ``4 B H S^2 D`` multiply-adds
  as flops, halved for causal; the ceiling is the card's bfloat16/float16 GEMM rate.
- ``decode`` (contiguous cache) and ``decode_paged`` (16-token blocks in shuffled order):
  one query token per sequence, B=8, 32 query / 8 KV heads, D=128, 8192 cached tokens
  (``--seq-lens`` sets the context), once per PyGPUkit decode kernel on the GPU
  (``kernel=mma``: tensor cores, one K/V stage per CTA; ``kernel=mma2``: two stages;
  ``kernel=bulk2``: two stages filled by bulk copies, one per cached row, the default on SM
  9.0; ``kernel=tma2``: the same stages filled by tensor copies of whole swizzled tiles;
  ``kernel=simt``; their splits merged by the last CTA to finish, and once more,
  ``kernel=bulk2, combine=kernel``, by a second kernel). On the GPU also ``decode_paged`` at the
  serving engine's shape: batch 64 over 256 cached tokens each, every kernel.
  Bytes moved are the K and V cache read once; the ceiling is the copy bandwidth. PyTorch has
  no fused (paged) decode: its row is SDPA with ``enable_gqa`` on ``q [B, Hq, 1, D]`` (on older
  PyTorch, KV heads repeated first), the paged row gathers the blocks first, as a framework
  without a paged kernel would.

PyTorch is timed again in every row, just after the PyGPUkit kernel of that row, so the two run
at the same clocks. Checks: prefill on 64 sampled rows of two (batch, head) pairs, decode on two
sequences, against float64 NumPy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed, unavailable
from pygpukit.benchmark.checks import check_close
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_attention"
SUPPORTED = ("float16", "bfloat16")
SAMPLE_ROWS = 64
NO_CUPY = unavailable("CuPy has no attention op")


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def _ops(lib: Library) -> Any:
    try:
        from pygpukit import ops
    except ImportError as exc:  # pragma: no cover - the suite ships inside pygpukit-ops
        raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
    return ops


def prefill_case(
    ctx: SuiteContext, b: int, h: int, s: int, d: int, dtype: str, kernel: str | None = None
) -> Case:
    """Causal self-attention ``[B, H, S, D]``; ``kernel`` sets PyGPUkit's prefill kernel."""
    params: dict[str, int | float | str] = {"B": b, "H": h, "S": s, "D": d, "dtype": dtype}
    if kernel is not None:
        params["kernel"] = kernel
    if dtype not in SUPPORTED:
        return Case(NAME, "sdpa_prefill", params, {}, skip=f"{dtype}: attention is fp16/bf16")
    shape = (b, h, s, d)
    itemsize = 2

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [ctx.data.get(shape, dtype, i) for i in range(3)]
        q, k, v = (lib.upload(x, dtype) for x in hosts)
        if lib.name == "pygpukit":
            sdpa = _ops(lib).scaled_dot_product_attention
            if kernel is not None:
                from pygpukit.ops import attention as impl

                if kernel != "mma" and impl._arch(lib.module.get_device()) != "sm_90a":
                    raise Skip("the wgmma prefill kernel needs an SM 9.0 GPU")
                impl.config.set(attention_kernel=kernel)  # cases() restores the config

            def call(i: int) -> Any:
                return sdpa(q, k, v, is_causal=True)
        else:
            fn = lib.module.nn.functional.scaled_dot_product_attention

            def call(i: int) -> Any:
                return fn(q, k, v, is_causal=True)

        rows = np.sort(ctx.rng.choice(s, size=min(SAMPLE_ROWS, s), replace=False))
        pairs = [(0, 0), (b - 1, h - 1)]

        def check(out: Any) -> float:
            got = lib.download(out)
            refs, outs = [], []
            for bi, hi in pairs:
                qh, kh, vh = (x[bi, hi].astype(np.float64) for x in hosts)
                sc = qh[rows] @ kh.T / math.sqrt(d)
                sc = np.where(np.arange(s)[None, :] <= rows[:, None], sc, -np.inf)
                refs.append(_softmax_rows(sc) @ vh)
                outs.append(got[bi, hi][rows])
            return check_close(np.stack(outs), np.stack(refs), dtype, f"sdpa ({lib.name})")

        return Timed(run=call, check=check)

    return Case(
        NAME,
        "sdpa_prefill",
        params,
        {"pygpukit": setup, "torch": setup, "cupy": NO_CUPY},
        flops=4 * b * h * s * s * d // 2,
        working_set=4 * b * h * s * d * itemsize,
        ceiling=f"gemm_{dtype}",
        requires=("from_numpy",),
        # No shared peer measurement: PyTorch is timed in every row, right after the PyGPUkit
        # kernel it is compared with, so both run at the same clocks (a heavy kernel's GPU
        # slows down as it heats up; a PyTorch time taken rows earlier would be from a cooler
        # GPU).
    )


def _torch_decode(lib: Library, group: int) -> Callable[[Any, Any, Any], Any]:
    """PyTorch SDPA of one query token over the cache (enable_gqa when this torch has it)."""
    torch = lib.module
    fn = torch.nn.functional.scaled_dot_product_attention
    probe = torch.zeros((1, group, 1, 64), device="cuda", dtype=torch.float16)
    kv = torch.zeros((1, 1, 4, 64), device="cuda", dtype=torch.float16)
    try:
        fn(probe, kv, kv, enable_gqa=True)
    except TypeError:
        return lambda q, k, v: fn(
            q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        )
    return lambda q, k, v: fn(q, k, v, enable_gqa=True)


def decode_case(
    ctx: SuiteContext,
    b: int,
    hq: int,
    hkv: int,
    n: int,
    d: int,
    dtype: str,
    block: int,
    kernel: str | None = None,
    combine: str | None = None,
) -> Case:
    """One decode step over ``n`` cached tokens per sequence; ``block`` > 0: paged cache.

    ``kernel`` sets PyGPUkit's decode kernel (``mma``, ``mma2``, ``bulk2``, ``tma2``, ``simt``),
    ``combine`` how its splits are merged (``fused`` or ``kernel``).
    """
    op = "decode_paged" if block else "decode"
    params: dict[str, int | float | str] = {
        "B": b, "Hq": hq, "Hkv": hkv, "ctx": n, "D": d, "dtype": dtype
    }  # fmt: skip
    if block:
        params["block"] = block
    if kernel is not None:
        params["kernel"] = kernel
    if combine is not None:
        params["combine"] = combine
    if dtype not in SUPPORTED:
        return Case(NAME, op, params, {}, skip=f"{dtype}: attention is fp16/bf16")
    group = hq // hkv
    cache_bytes = 2 * b * hkv * n * d * 2

    def setup(lib: Library, copies: int) -> Timed:
        qh = ctx.data.get((b, hq, d), dtype, 0)
        kh = ctx.data.get((b, hkv, n, d), dtype, 1)
        vh = ctx.data.get((b, hkv, n, d), dtype, 2)
        nb = n // block if block else 0
        perm = ctx.rng.permutation(b * nb).astype(np.int32) if block else None
        if block:
            # Block perm[i * nb + j] holds tokens [j * block, (j + 1) * block) of sequence i.
            def paged(x: np.ndarray) -> np.ndarray:
                blocks = x.reshape(b, hkv, nb, block, d).transpose(0, 2, 1, 3, 4)
                out = np.empty_like(blocks.reshape(b * nb, hkv, block, d))
                out[perm] = blocks.reshape(b * nb, hkv, block, d)
                return out

            kc, vc = lib.upload(paged(kh), dtype), lib.upload(paged(vh), dtype)
            assert perm is not None  # made above whenever block is set
            table_h = perm.reshape(b, nb)
        else:
            kc, vc = lib.upload(kh, dtype), lib.upload(vh, dtype)
        if lib.name == "pygpukit":
            ops = _ops(lib)
            gp = lib.module
            from pygpukit.ops import config

            if kernel is not None:
                config.set(decode_kernel=kernel)  # cases() restores the config
            if combine is not None:
                config.set(decode_combine=combine)
            q = lib.upload(qh, dtype)
            lens = gp.from_numpy(np.full(b, n, np.int32))
            table = gp.from_numpy(table_h) if block else None

            def call(i: int) -> Any:
                return ops.decode_attention(q, kc, vc, lens, block_table=table)
        else:
            torch = lib.module
            q = lib.upload(qh.reshape(b, hq, 1, d), dtype)
            attend = _torch_decode(lib, group)
            if block:
                idx = torch.from_numpy(table_h.astype(np.int64)).cuda()

                def gather(c: Any) -> Any:  # [B * nb, Hkv, block, D] -> [B, Hkv, n, D]
                    g = c[idx.reshape(-1)].reshape(b, nb, hkv, block, d)
                    return g.transpose(1, 2).reshape(b, hkv, n, d)

                def call(i: int) -> Any:
                    return attend(q, gather(kc), gather(vc))
            else:

                def call(i: int) -> Any:
                    return attend(q, kc, vc)

        def check(out: Any) -> float:
            got = lib.download(out).reshape(b, hq, d)
            refs, outs = [], []
            for bi in (0, b - 1):
                kk = np.repeat(kh[bi].astype(np.float64), group, axis=0)
                vv = np.repeat(vh[bi].astype(np.float64), group, axis=0)
                sc = np.einsum("hd,hnd->hn", qh[bi].astype(np.float64), kk) / math.sqrt(d)
                refs.append(np.einsum("hn,hnd->hd", _softmax_rows(sc), vv))
                outs.append(got[bi])
            return check_close(np.stack(outs), np.stack(refs), dtype, f"{op} ({lib.name})")

        return Timed(run=call, check=check)

    return Case(
        NAME,
        op,
        params,
        {"pygpukit": setup, "torch": setup, "cupy": NO_CUPY},
        bytes_moved=cache_bytes,
        working_set=cache_bytes,
        ceiling="copy_bw",
        requires=("from_numpy",),
        # PyTorch timed in every row, next to the kernel it is compared with (see prefill_case).
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Prefill at the target shape (smaller when quick or on the CPU), then decode."""
    dtypes = ctx.pick_dtypes(gpu=["bfloat16"], cpu=["bfloat16"])
    if ctx.on_gpu:
        b, h, lens = (1, 8, [1024]) if ctx.quick else (4, 32, [4096])
        db, dn = (4, [2048]) if ctx.quick else (8, [8192])
    else:
        b, h, lens = (1, 2, [128]) if ctx.quick else (1, 4, [512])
        db, dn = (2, [256]) if ctx.quick else (4, [1024])
    kernels: list[str | None] = (
        ["mma", "wgmma_pipe", "wgmma_tma", "wgmma_persist"] if ctx.on_gpu else [None]
    )
    decoders: list[str | None] = ["mma", "mma2", "bulk2", "tma2", "simt"] if ctx.on_gpu else [None]
    from pygpukit.ops import config

    saved = config.get()
    try:
        for dtype in dtypes:
            for s in ctx.seq_lens or lens:
                for kernel in kernels:
                    yield prefill_case(ctx, b, h, s, 128, dtype, kernel)
            for n in ctx.seq_lens or dn:
                for block in (0, 16) if n % 16 == 0 else (0,):
                    for kernel in decoders:
                        yield decode_case(ctx, db, 32, 8, n, 128, dtype, block, kernel)
                    if ctx.on_gpu:  # the default kernel with its splits merged by a second kernel
                        yield decode_case(ctx, db, 32, 8, n, 128, dtype, block, "bulk2", "kernel")
            if ctx.on_gpu and not ctx.seq_lens:
                # The serving engine's step: many sequences over short paged caches.
                for kernel in decoders:
                    yield decode_case(ctx, 64, 32, 8, 256, 128, dtype, 16, kernel)
    finally:
        config.set(**dataclasses.asdict(saved))


SUITE = Suite(NAME, "attention: causal flash prefill vs torch SDPA, decode vs torch", cases)

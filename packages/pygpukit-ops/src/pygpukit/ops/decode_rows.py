"""Batch-invariant decode ops: M tokens, each computed as the one-token kernels compute it alone.

A serving engine batches the decode tokens of many requests into one step. A GEMM over those
rows (cuBLASLt) picks its tiling and split-K by the row count, and the split decode attention
sizes its split by the batch, so a token's logits round differently depending on what else is in
the batch, and differently from the one-token path of ``CausalLM.generate``. These ops compute
each row with exactly the arithmetic of the one-token kernels:

- :func:`decode_linear_rows`: :func:`pygpukit.ops.decode_linear` for M rows at once (the same
  chunk-to-lane split, ``fmaf`` order, butterfly and rounding points, the same RMSNorm prologue
  and epilogues; ``"rope_kv"`` writes into a paged cache at per-row slots). Row ``m`` of the
  result is bitwise ``decode_linear(x[m], ...)``. Each weight chunk a warp loads serves 8 rows
  on CUDA cores (``kernels/decode_linear_batched.cu``): the GEMM becomes compute-bound as M
  grows, where tensor cores are not (docs/serve.md has the cost).
- :func:`decode_attention_paged_single`: :func:`pygpukit.ops.decode_attention_single` over a
  paged cache (``kernels/decode_attention_paged_single.cu``): one CTA per (head, sequence), keys
  in tiles of 256 in order; bitwise the contiguous kernel's output for the same keys.

On the CPU backend the NumPy references of the one-token ops run row by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._constants import constant
from ._plan import Launch, per_backend
from .decode_attention_single import SINGLE_PASS_HEAD_DIMS
from .decode_linear import EPILOGUES, _check_fused
from .reference import activations as ref_act
from .reference import attention as ref_attention
from .reference import linear as ref_linear
from .reference import normalization as ref_norm
from .reference import rope as ref_rope

__all__ = [
    "BoundDecodeLinearRows",
    "PagedRopeKV",
    "bind_decode_linear_rows",
    "decode_attention_paged_single",
    "decode_linear_rows",
]

_TABLE_KIND = {np.dtype(np.float32): 0, np.dtype(gp.float16): 1, np.dtype(gp.bfloat16): 2}


@dataclass(frozen=True)
class PagedRopeKV:
    """What the ``"rope_kv"`` epilogue of :func:`decode_linear_rows` needs besides the product.

    ``cos``/``sin``: :func:`pygpukit.ops.rope_cos_sin` tables ``[P, D / 2]`` (NeoX, whole head);
    ``positions``: int32 ``[M]`` (each row's RoPE angle); ``slots``: int32 ``[M]``, each row's
    cache slot ``block * block_size + offset`` (negative: not stored); ``k_cache``/``v_cache``:
    paged ``[blocks, kv_heads, block_size, D]``; ``q_heads``: query heads.
    """

    cos: GPUArray
    sin: GPUArray
    positions: GPUArray
    slots: GPUArray
    k_cache: GPUArray
    v_cache: GPUArray
    q_heads: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(q_heads, kv_heads, head_dim, block_size)``."""
        _, hkv, bs, d = self.k_cache.shape
        return self.q_heads, hkv, d, bs


@dataclass(frozen=True, slots=True)
class _Rows:
    """:func:`decode_linear_rows`'s rule: ``[M, K]`` half rows, one position and slot a row."""

    # The kernel reads two pairs of SwiGLU outputs and of rotated elements at a time.
    swiglu_multiple: int = 4

    def check_x(self, x: GPUArray) -> None:
        """float16/bfloat16 ``[M, K]``."""
        c.check_array(x, "x", dtypes=c.HALF_DTYPES, ndim=2)

    def check_rows(
        self,
        x: GPUArray,
        weight: GPUArray,
        n: int,
        k: int,
        residual: GPUArray | None,
        rope_kv: PagedRopeKV | None,
    ) -> None:
        """K a positive multiple of 8, an ``[M, N]`` residual, ``[M]`` positions and slots."""
        m = x.shape[0]
        if x.shape[1] != k or k % 8 or k == 0:
            raise ValueError(
                f"x {tuple(x.shape)} must be [M, K] with weight [N, K] {tuple(weight.shape)} and "
                "K a positive multiple of 8"
            )
        if residual is not None:
            c.check_shape(residual, "residual", (m, n))
        if rope_kv is not None:
            for name, a in (("positions", rope_kv.positions), ("slots", rope_kv.slots)):
                c.check_array(a, name, dtypes=[np.int32], ndim=1)
                c.check_shape(a, name, (m,))
            if rope_kv.shape[2] % 4:
                raise ValueError(
                    f"rope_kv's head dim must be a multiple of 4, got {rope_kv.shape[2]}"
                )


def _out_width(n: int, epilogue: str | None, rope_kv: PagedRopeKV | None) -> int:
    if epilogue == "swiglu":
        return n // 2
    if rope_kv is not None:
        return rope_kv.q_heads * rope_kv.shape[2]
    return n


class BoundDecodeLinearRows:
    """A :func:`decode_linear_rows` call with its arrays bound: ``bound()`` enqueues it again.

    Validated and planned once; the arrays are read at each call (their values may change, they
    must stay alive), so a CUDA graph can capture it.
    """

    __slots__ = ("_calls", "result")

    def __init__(self, result: GPUArray, calls: list[tuple[Any, tuple[Any, ...]]]) -> None:
        self.result = result
        self._calls = calls

    def __call__(self) -> GPUArray:
        """Enqueue the call; returns its result array (the residual for ``"residual"``)."""
        for run, args in self._calls:
            run(*args)
        return self.result


def bind_decode_linear_rows(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    norm_weight: GPUArray | None = None,
    eps: float = 1e-6,
    epilogue: str | None = None,
    residual: GPUArray | None = None,
    rope_kv: PagedRopeKV | None = None,
    out: GPUArray | None = None,
    out_dtype: Any = None,
    normed: GPUArray | None = None,
) -> BoundDecodeLinearRows:
    """:func:`decode_linear_rows`'s call validated and planned once: ``bound()`` enqueues it.

    ``normed``: an ``[M, K]`` array of x's dtype the RMSNorm prologue writes the normalised rows
    into (made when not given; a decode step shares one between its calls).
    """
    n, k = _check_fused(x, weight, bias, norm_weight, epilogue, residual, rope_kv, _Rows())
    m = x.shape[0]
    dtype = x.dtype
    f32 = out_dtype is not None and np.dtype(out_dtype) != dtype
    if f32 and (
        np.dtype(out_dtype) != np.dtype(np.float32) or epilogue is not None or bias is not None
    ):
        raise ValueError("out_dtype=float32 is for the plain product, no bias")
    if epilogue == "residual":
        assert residual is not None
        y = residual
    else:
        shape = (m, _out_width(n, epilogue, rope_kv))
        y_dtype = np.dtype(np.float32) if f32 else dtype
        c.check_out(out, shape, y_dtype)
        y = c.result(out, shape, y_dtype)
    if norm_weight is not None:
        c.check_out(normed, (m, k), dtype, "normed")
        normed = c.result(normed, (m, k), dtype)
    if m == 0 or n == 0:
        return BoundDecodeLinearRows(y, [])
    args = (x, weight, bias, norm_weight, float(eps), epilogue, residual, rope_kv, y, f32, normed)
    return BoundDecodeLinearRows(y, _bind_backend(m, n, k, args))


def decode_linear_rows(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    norm_weight: GPUArray | None = None,
    eps: float = 1e-6,
    epilogue: str | None = None,
    residual: GPUArray | None = None,
    rope_kv: PagedRopeKV | None = None,
    out: GPUArray | None = None,
    out_dtype: Any = None,
) -> GPUArray:
    """:func:`pygpukit.ops.decode_linear` for each row of ``x`` ``[M, K]``, bitwise per row.

    Arguments as :func:`~pygpukit.ops.decode_linear` (float16/bfloat16, ``K`` a multiple of 8),
    with every array one row per token: ``residual`` ``[M, N]``; the result ``[M, N]``
    (``[M, N / 2]`` for ``"swiglu"``, ``[M, q_heads * D]`` for ``"rope_kv"``), and ``rope_kv``
    a :class:`PagedRopeKV` (per-row positions and paged cache slots). Row ``m`` equals
    ``decode_linear(x[m], ...)`` bit for bit, whatever M. Returns without waiting on the GPU.
    """
    return bind_decode_linear_rows(
        x, weight, bias, norm_weight=norm_weight, eps=eps, epilogue=epilogue,
        residual=residual, rope_kv=rope_kv, out=out, out_dtype=out_dtype,
    )()  # fmt: skip


def _numpy_rows(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    norm_weight: GPUArray | None,
    eps: float,
    epilogue: str | None,
    residual: GPUArray | None,
    rope_kv: PagedRopeKV | None,
    y: GPUArray,
    f32: bool,
    normed: GPUArray | None,
) -> None:
    """The CPU backend: ``decode_linear``'s NumPy reference, one row at a time."""
    dtype = x.dtype
    w = c.host(weight)
    b = None if bias is None else c.host(bias)
    xs = c.f32(x)
    out = c.host(y)
    res = c.host(residual) if residual is not None else None
    for m in range(xs.shape[0]):
        row = xs[m : m + 1]
        if norm_weight is not None:
            row = ref_norm.norm(row, c.f32(norm_weight), None, eps, False, dtype)
            row = row.astype(np.float32)
        prod = ref_linear.linear(row, w, b, None).reshape(-1)
        if f32 or epilogue is None:
            out[m] = prod.astype(out.dtype)
            continue
        stored = prod.astype(dtype).astype(np.float32)
        if epilogue == "residual":
            assert res is not None
            res[m] = (stored + res[m].astype(np.float32)).astype(dtype)
        elif epilogue == "swiglu":
            out[m] = ref_act.gated(stored, "silu").astype(dtype)
        else:
            assert rope_kv is not None
            _rope_row(rope_kv, stored, m, out, dtype)


def _rope_row(
    rope_kv: PagedRopeKV, stored: np.ndarray, m: int, out: np.ndarray, dtype: Any
) -> None:
    hq, hkv, d, bs = rope_kv.shape
    pos = int(c.host(rope_kv.positions)[m])
    slot = int(c.host(rope_kv.slots)[m])
    inside = 0 <= pos < rope_kv.cos.shape[0]  # outside: angle 0, as the kernel
    cs = c.f32(rope_kv.cos)[pos][None] if inside else np.ones((1, d // 2), np.float32)
    sn = c.f32(rope_kv.sin)[pos][None] if inside else np.zeros((1, d // 2), np.float32)
    heads = stored.reshape(1, hq + 2 * hkv, d)
    out[m] = ref_rope.rotate(heads[:, :hq], cs, sn, d, False).reshape(-1).astype(dtype)
    if slot < 0:
        return
    k = ref_rope.rotate(heads[:, hq : hq + hkv], cs, sn, d, False)[0]
    blk, off = divmod(slot, bs)
    c.host(rope_kv.k_cache)[blk, :, off] = k.astype(dtype)
    c.host(rope_kv.v_cache)[blk, :, off] = heads[0, hq + hkv :].astype(dtype)


def _bind_numpy(m: int, n: int, k: int, args: tuple[Any, ...]) -> list[tuple[Any, tuple]]:
    return [(_numpy_rows, args)]


def _bind_cuda(m: int, n: int, k: int, args: tuple[Any, ...]) -> list[tuple[Any, tuple]]:
    x, weight, bias, norm_weight, eps, epilogue, _residual, rope_kv, y, f32, normed = args
    c.check_int32("decode_linear_rows", M=m, N=n, K=k)
    for name, a in (("x", x), ("weight", weight), ("normed", normed)):
        if a is not None and a.data_ptr % 16:
            raise ValueError(f"{name} must be 16-byte aligned (the kernel's chunk loads)")
    sfx = c.kernel_suffix(x.dtype)
    warps = constant("decode_linear_batched", "DECODE_ROWS_WARPS")
    calls: list[tuple[Any, tuple]] = []
    src = x
    if norm_weight is not None:
        norm = Launch(kl.kernel("decode_linear_batched", f"rms_norm_rows_{sfx}"), m, warps * 32)
        calls.append((norm, (x, norm_weight, eps, normed, k)))
        src = normed
    pair = 0
    if epilogue == "swiglu":
        pair = n // 2
    elif rope_kv is not None:
        pair = rope_kv.shape[2] // 2
    rows = constant("decode_linear_batched", "DECODE_ROWS_PER_WARP")
    # A warp owns 4 output rows (2 pairs of 2 rows each when paired: the same 4 rows) of
    # `batch` tokens; one token has a kernel of its own (no multiply-adds for absent rows).
    batch = 1 if m == 1 else constant("decode_linear_batched", "DECODE_ROWS_BATCH")
    row_blocks = max(1, -(-n // (warps * rows)))
    grid = (-(-m // batch), row_blocks)
    kernel = kl.kernel("decode_linear_batched", f"decode_linear_rows_b{batch}_{sfx}")
    if rope_kv is not None:
        hq, hkv, d, bs = rope_kv.shape
        table = rope_kv.cos
        rope_args: tuple[Any, ...] = (rope_kv.k_cache, rope_kv.v_cache, table, rope_kv.sin,
                                      rope_kv.positions, rope_kv.slots)  # fmt: skip
        sizes = (hq, hkv, d, bs, table.shape[0], _TABLE_KIND[table.dtype])
    else:
        rope_args, sizes = (0, 0, 0, 0, 0, 0), (0, 0, 0, 1, 0, 0)
    kargs = (
        src, weight, bias if bias is not None else 0, y, *rope_args, m, n, k, pair,
        EPILOGUES[epilogue], int(f32), *sizes,
    )  # fmt: skip
    calls.append((Launch(kernel, grid, warps * 32), kargs))
    return calls


_bind_backend = per_backend(cpu=_bind_numpy, cuda=_bind_cuda)


# --- attention ---------------------------------------------------------------------------------


def _attend_numpy(q: GPUArray, k: GPUArray, v: GPUArray, lens: GPUArray, table: GPUArray,
                  out: GPUArray, scale: float) -> None:  # fmt: skip
    capacity = table.shape[1] * k.shape[2]
    res = ref_attention.decode(
        c.host(q), c.host(k), c.host(v), np.maximum(c.host(lens).astype(np.int64), 0),
        c.host(table), scale, capacity,
    )  # fmt: skip
    c.write_into(out, res)


def _attend_cuda(q: GPUArray, k: GPUArray, v: GPUArray, lens: GPUArray, table: GPUArray,
                 out: GPUArray, scale: float) -> None:  # fmt: skip
    b, hq, d = q.shape
    _, hkv, bs, _ = k.shape
    name = f"attn_decode_paged_single_d{d}_{c.kernel_suffix(q.dtype)}"
    kernel = kl.kernel("decode_attention_paged_single", name)
    threads = constant("decode_attention_paged_single", "DECODE_PAGED_SINGLE_THREADS")
    kernel.launch((hq, b), threads, (q, k, v, lens, table, out, hq, hkv, bs, table.shape[1], scale))


_attend_backend = per_backend(cpu=_attend_numpy, cuda=_attend_cuda)


def decode_attention_paged_single(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    block_table: GPUArray,
    *,
    scale: float | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """One query token per sequence over a paged cache, bitwise per sequence at any batch.

    ``q [B, Hq, D]`` (float16/bfloat16, ``D`` 64 or 128), caches ``[blocks, Hkv, block_size,
    D]``, ``seq_lens`` int32 ``[B]`` (clamped to the table's capacity; 0 gives zeros),
    ``block_table`` int32 ``[B, max_blocks]``. Sequence ``b``'s output equals
    :func:`pygpukit.ops.decode_attention_single` over a contiguous cache holding the same keys
    and values, bit for bit. One CTA per (head, sequence) walks every key: for short and medium
    contexts. Returns ``[B, Hq, D]`` (into ``out`` when given).
    """
    c.check_array(q, "q", dtypes=c.HALF_DTYPES, ndim=3)
    c.check_array(k_cache, "k_cache", ndim=4)
    c.check_array(v_cache, "v_cache", ndim=4)
    c.check_same_dtype(q, ("k_cache", k_cache), ("v_cache", v_cache))
    c.check_shape(v_cache, "v_cache", tuple(k_cache.shape))
    c.check_array(seq_lens, "seq_lens", dtypes=[np.int32], ndim=1)
    c.check_array(block_table, "block_table", dtypes=[np.int32], ndim=2)
    b, hq, d = q.shape
    _, hkv, _, kd = k_cache.shape
    if kd != d or hkv < 1 or hq % hkv or d not in SINGLE_PASS_HEAD_DIMS:
        raise ValueError(
            f"q {tuple(q.shape)} and caches {tuple(k_cache.shape)} must be [B, Hq, D] and "
            f"[blocks, Hkv, block_size, D] with Hq a multiple of Hkv and D in "
            f"{SINGLE_PASS_HEAD_DIMS}"
        )
    c.check_shape(seq_lens, "seq_lens", (b,))
    c.check_shape(block_table, "block_table", (b, block_table.shape[1]))
    if q.data_ptr % 16 or k_cache.data_ptr % 16 or v_cache.data_ptr % 16:
        raise ValueError("q and the caches must be 16-byte aligned (the kernel's row loads)")
    c.check_out(out, (b, hq, d), q.dtype)
    y = c.result(out, (b, hq, d), q.dtype)
    s = float(d**-0.5 if scale is None else scale)
    if y.size:
        _attend_backend(q, k_cache, v_cache, seq_lens, block_table, y, s)
    return y

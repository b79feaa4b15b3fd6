"""Attention: flash attention for prefill, decode attention over a contiguous or paged KV cache.

Layouts follow PyTorch: ``q [B, Hq, Sq, D]``, ``k``/``v`` ``[B, Hkv, Sk, D]``; query head
``h`` attends with KV head ``h // (Hq // Hkv)`` (grouped-query / multi-query attention).
Head dims 64, 80, 96, 128 and 256; float16 and bfloat16, accumulated in float32.

Two rules differ from a naive reading of PyTorch and are the same on both backends:

- ``is_causal`` aligns the causal diagonal to the bottom-right: query ``i`` sees key ``j``
  when ``j <= i + (Sk - Sq)``. With ``Sq == Sk`` this is PyTorch's rule; with ``Sq < Sk``
  (a chunk of new queries after cached keys) the last query sees every key, as a KV cache
  needs. PyTorch aligns to the top-left instead when ``Sq != Sk``.
- A query row that sees no key at all (causal with ``Sq > Sk``, or a mask of ``-inf`` over
  the whole row) outputs zeros, where PyTorch outputs NaN.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray
from pygpukit.backend import select as _select
from pygpukit.jit import Kernel

from . import _kernel_loader
from ._common import (
    HALF_DTYPES,
    check_array,
    check_int32,
    check_out,
    check_same_dtype,
    host,
    kernel_suffix,
    on_cpu,
    result,
    write_into,
)

__all__ = ["decode_attention", "scaled_dot_product_attention"]

#: Head dimensions with a built-in kernel.
HEAD_DIMS = (64, 80, 96, 128, 256)

#: Picks the decode kernel: ``mma2`` (tensor cores, two K/V stages per CTA: the default, 72% of
#: the copy bandwidth for 8K cached tokens on an H200), ``mma`` (one stage, 69%) or ``simt``
#: (CUDA cores, 70%).
DECODE_KERNEL_ENV = "PYGPUKIT_DECODE_KERNEL"
#: Query heads per decode CTA: attention_decode.cu kTcHeads (mma, mma2) and kG (simt).
_DECODE_HEADS = {"mma": 16, "mma2": 16, "simt": 4}
_MAX_SPLITS = 64  # attention_decode.cu kMaxSplits
_CPU_ROWS = 512  # query rows per NumPy step: a [rows, Sk] float32 score block at a time

_dynamic_smem_set: set[tuple[int, int]] = set()


def _allow_dynamic_smem(kern: Kernel, d: int, smem: int) -> None:
    """Opt ``kern`` into ``smem`` bytes of dynamic shared memory (above 48 KiB), once."""
    key = (id(kern), d)
    if smem > 48 * 1024 and key not in _dynamic_smem_set:
        kern.set_max_dynamic_shared_memory(smem)
        _dynamic_smem_set.add(key)


#: Picks the prefill kernel. Unset or ``auto``: the Hopper kernel ``wgmma_tma`` on SM 9.0 for
#: the head dims it has (64 and 128), else ``mma`` (mma.sync, every SM 80+ GPU). ``mma`` forces
#: the mma.sync kernel everywhere; ``wgmma_tma`` and ``wgmma_pipe`` apply where ``auto`` would
#: pick a Hopper kernel and fall back to ``mma`` elsewhere. ``wgmma_tma`` is warp-specialized:
#: one producer thread loads Q, K and V by TMA for two consumer warpgroups that take turns
#: issuing their matrix multiplies (FlashAttention-3's ping-pong). ``wgmma_pipe`` has no
#: producer: each of its two warpgroups overlaps its softmax with its own matrix multiplies, and
#: all threads load with cp.async. Causal bf16 B=4 H=32 S=4096 D=128 on an H200, same run
#: (PyTorch SDPA 0.92 ms): wgmma_tma 1.06 ms, wgmma_pipe 1.40, mma 2.31 (an earlier run);
#: non-causal 2.01 against 2.64. Removed after losing: the same warp-specialized kernel with a
#: cp.async producer warpgroup (``wgmma_ws_pp``, 1.27 ms in that run), staggered warpgroups
#: (1.60 ms) and warp-specialized without ping-pong (1.48-1.50 ms).
KERNEL_ENV = "PYGPUKIT_ATTENTION_KERNEL"
_KERNEL_CHOICES = ("auto", "mma", "wgmma_pipe", "wgmma_tma")
_WGMMA_HEAD_DIMS = (64, 128)
#: Threads per CTA of each Hopper kernel (attention_prefill.cu launch bounds).
_WGMMA_THREADS = {"wgmma_pipe": 256, "wgmma_tma": 384}


@functools.cache
def _arch(device: int) -> str:
    return str(_select.backend().arch(device))


def _prefill_kernel(d: int) -> str:
    """The prefill kernel for head dim ``d`` on the current device: ``mma`` or a wgmma kernel."""
    choice = os.environ.get(KERNEL_ENV, "") or "auto"
    if choice not in _KERNEL_CHOICES:
        raise ValueError(
            f"{KERNEL_ENV} must be one of {', '.join(_KERNEL_CHOICES)} (or unset), got {choice!r}"
        )
    if choice == "mma" or d not in _WGMMA_HEAD_DIMS or _arch(gp.get_device()) != "sm_90a":
        return "mma"
    return "wgmma_tma" if choice == "auto" else choice


def _tma_maps(q: GPUArray, k: GPUArray, v: GPUArray) -> tuple[gp.TensorMap, ...]:
    """The wgmma_tma kernel's tensor maps: q, k, v as [B * H, S, D], boxes of 128 rows x 64."""
    return tuple(
        gp.TensorMap(x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]), (1, 128, 64), 128)
        for x in (q, k, v)
    )


def _check_head_dim(d: int, name: str) -> None:
    if d not in HEAD_DIMS:
        raise ValueError(
            f"{name} has head dim {d}; supported head dims are {', '.join(map(str, HEAD_DIMS))}"
            " (pad the head dim up to one of them)"
        )


def _check_scale(scale: float | None, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    return validation.real(scale, "scale", finite=True)


def _check_aligned(*named: tuple[str, GPUArray | None]) -> None:
    """The kernels load 16-byte vectors: each array must start on a 16-byte boundary."""
    for name, a in named:
        if a is not None and a.data_ptr % 16:
            raise ValueError(
                f"{name} starts at address {a.data_ptr:#x}, not 16-byte aligned (a view at an"
                " odd offset?); pass a copy"
            )


def _mask_strides(mask: GPUArray, target: tuple[int, int, int, int]) -> tuple[int, ...]:
    """Element strides of ``mask`` broadcast to ``target`` (0 on broadcast dimensions)."""
    shape = (1,) * (4 - mask.ndim) + tuple(mask.shape)
    for have, want in zip(shape, target, strict=True):
        if have not in (1, want):
            raise ValueError(
                f"attn_mask of shape {tuple(mask.shape)} does not broadcast to {target}"
                " ([B, Hq, Sq, Sk])"
            )
    strides, step = [0, 0, 0, 0], 1
    for axis in range(3, -1, -1):
        if shape[axis] != 1:
            strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


def _causal_visible(sq: int, sk: int, rows: slice) -> np.ndarray:
    """[rows, Sk] bool: key j visible to query i when j <= i + (Sk - Sq) (bottom-right)."""
    i = np.arange(sq)[rows][:, None]
    return np.arange(sk)[None, :] <= i + (sk - sq)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    """Row softmax that gives a row of zeros, not NaN, when every entry is -inf (or none exists).

    Sk = 0 (no keys at all) is the empty case of a row that sees no key: zeros, as the kernels
    give (they run zero key tiles); ``max`` of an empty row would raise.
    """
    if s.shape[-1] == 0:
        return np.zeros(s.shape, s.dtype)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    return np.divide(p, total, out=np.zeros_like(p), where=total > 0)


def _sdpa_cpu(
    q: GPUArray,
    k: GPUArray,
    v: GPUArray,
    mask: GPUArray | None,
    causal: bool,
    scale: float,
    out: GPUArray,
) -> None:
    hq_, kh, vh = host(q), host(k), host(v)
    b_, hq, sq, _ = hq_.shape
    sk, group = kh.shape[2], hq // kh.shape[1]
    mh: np.ndarray | None = None
    if mask is not None:
        mh = host(mask).reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    res = np.empty(hq_.shape, np.float32)
    # One (batch, head) and _CPU_ROWS query rows at a time: memory stays O(rows * Sk).
    for b in range(b_):
        for h in range(hq):
            kf = kh[b, h // group].astype(np.float32)
            vf = vh[b, h // group].astype(np.float32)
            for r0 in range(0, sq, _CPU_ROWS):
                rows = slice(r0, min(sq, r0 + _CPU_ROWS))
                s = (hq_[b, h, rows].astype(np.float32) @ kf.T) * np.float32(scale)
                if mh is not None:
                    mb = mh[min(b, mh.shape[0] - 1), min(h, mh.shape[1] - 1)]
                    s = s + np.broadcast_to(mb, (sq, sk))[rows].astype(np.float32)
                if causal:
                    s = np.where(_causal_visible(sq, sk, rows), s, -np.inf)
                res[b, h, rows] = _softmax_rows(s) @ vf
    write_into(out, res)


def scaled_dot_product_attention(
    q: GPUArray,
    k: GPUArray,
    v: GPUArray,
    *,
    attn_mask: GPUArray | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Attention ``softmax(q k^T * scale + attn_mask) v`` without materialising the scores.

    ``q [B, Hq, Sq, D]``, ``k``/``v`` ``[B, Hkv, Sk, D]`` (C-contiguous, float16 or
    bfloat16, ``Hq`` a multiple of ``Hkv``); returns ``[B, Hq, Sq, D]`` in q's dtype.
    ``attn_mask`` is an additive mask (float32 or q's dtype) that broadcasts to
    ``[B, Hq, Sq, Sk]``; ``is_causal`` hides key ``j`` from query ``i`` when
    ``j > i + (Sk - Sq)`` (bottom-right aligned; PyTorch's rule when ``Sq == Sk``) and
    may be combined with a mask. ``scale`` defaults to ``1 / sqrt(D)``. Rows that see
    no key output zeros. Raises ``TypeError``/``ValueError`` for wrong arguments.
    """
    check_array(q, "q", dtypes=HALF_DTYPES, ndim=4)
    check_array(k, "k", dtypes=HALF_DTYPES, ndim=4)
    check_array(v, "v", dtypes=HALF_DTYPES, ndim=4)
    check_same_dtype(q, ("k", k), ("v", v))
    b, hq, sq, d = q.shape
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(
            f"k/v {tuple(k.shape)} must be [B={b}, Hkv, Sk, D={d}] to match q {tuple(q.shape)}"
        )
    hkv, sk = k.shape[1], k.shape[2]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of the KV heads ({hkv})")
    _check_head_dim(d, "q")
    is_causal = validation.boolean(is_causal, "is_causal")
    scale_f = _check_scale(scale, d)
    strides: tuple[int, ...] = (0, 0, 0, 0)
    if attn_mask is not None:
        check_array(attn_mask, "attn_mask", dtypes=[gp.float32, q.dtype], ndim=(1, 2, 3, 4))
        strides = _mask_strides(attn_mask, (b, hq, sq, sk))
    check_out(out, tuple(q.shape), q.dtype)
    res = result(out, tuple(q.shape), q.dtype)
    if res.size == 0:
        return res
    if on_cpu(q):
        _sdpa_cpu(q, k, v, attn_mask, is_causal, scale_f, res)
        return res

    check_int32("scaled_dot_product_attention", Sq=sq, Sk=sk, Hkv=hkv)
    _check_aligned(("q", q), ("k", k), ("v", v), ("out", res))
    kind = _prefill_kernel(d)
    if kind == "wgmma_tma" and (sk == 0 or q.evictable or k.evictable or v.evictable):
        # No key tile to load (TMA cannot map an empty k), or an input whose address may change
        # (a tensor map holds the address; wgmma_pipe takes pointers made resident at launch).
        kind = "wgmma_pipe"
    if kind != "mma":
        # Kernel names: attn_prefill_<kind>_d<D>_<dtype>. Both hold Q and 3 K/V stages with
        # 1 KiB of alignment slack (wgmma_tma's mbarriers are static shared memory).
        name = f"attn_prefill_{kind}_d{d}_{kernel_suffix(q.dtype)}"
        rows, threads = 128, _WGMMA_THREADS[kind]
        smem = 7 * (d // 64) * 128 * 128 + 1024
    else:
        # attention_prefill.cu Config<D>: rows per CTA, keys per tile, padded shared rows.
        rows, threads = (128 if d <= 128 else 64), 128
        name = f"attn_prefill_d{d}_{kernel_suffix(q.dtype)}"
        block_n = 64 if d <= 80 else 32
        smem = (rows + 2 * block_n) * (d + 8) * 2
    ctas = b * hq * ((sq + rows - 1) // rows)  # a 1-d grid (kernels: PrefillOrder)
    check_int32("scaled_dot_product_attention", **{"B * Hq * row tiles": ctas})
    kern = _kernel_loader.kernel("attention_prefill", name)
    _allow_dynamic_smem(kern, d, smem)
    mask_kind = 0 if attn_mask is None else (1 if attn_mask.dtype == np.float32 else 2)
    maps = _tma_maps(q, k, v) if kind == "wgmma_tma" else ()
    kern(
        q,
        k,
        v,
        res,
        attn_mask if attn_mask is not None else 0,
        mask_kind,
        *strides,
        hq,
        hkv,
        sq,
        sk,
        scale_f,
        int(is_causal),
        *maps,
        grid=ctas,
        block=threads,
        shared_mem=smem,
    )
    return res


# --- decode -------------------------------------------------------------------------------


@functools.cache
def _sm_count(device: int) -> int:
    return int(gp.get_device_info(device)["sm_count"] or 1)


#: CTAs per SM the flash-decoding split aims for, per decode kernel. The tensor-core kernels'
#: CTAs hold 72 KiB of shared memory (3 fit on an SM): two per SM keeps every CTA resident at
#: once, so no partial last wave runs alone, and makes each CTA's key range long. Measured on an
#: H200 (B=8, Hq=32, Hkv=8, 8192 tokens, D=128, bf16; 64 head CTAs per split; copy bandwidth
#: 4224 GB/s), mma2 at 4 / 6 / 8 / 12 / 16 splits: 78.4 / 81.6 / 96.3 / 84.3 / 87.1 us (81% /
#: 78% / 66% / 75% / 73% of the copy bandwidth; 8 splits = 1.3 waves). The SIMT kernel (no
#: shared memory, many CTAs per SM) keeps the earlier eight per SM, 16 splits here (89.0 us; 84.4
#: at 8 splits, 109 at 4 in the same run).
_DECODE_CTAS_PER_SM = {"mma": 2, "mma2": 2, "simt": 8}


def _decode_split(
    batch: int, ctas: int, capacity: int, per_sm: int = _DECODE_CTAS_PER_SM["mma2"]
) -> tuple[int, int]:
    """(splits, chunk): about ``per_sm`` CTAs per SM at most, chunks of at least 256 keys.

    ``ctas`` counts the CTAs of one split for one sequence. Sized by the cache capacity: the
    lengths live on the device and are not read back.
    """
    want = max(1, per_sm * _sm_count(gp.get_device()) // max(1, batch * ctas))
    splits = max(1, min(_MAX_SPLITS, want, -(-capacity // 256)))
    chunk = -(-capacity // splits)
    chunk = -(-chunk // 64) * 64  # whole steps of the kernel's key loop
    return -(-capacity // chunk), chunk


def _check_lengths_and_blocks(
    lens: np.ndarray, table: np.ndarray | None, cache_shape: tuple[int, ...], capacity: int
) -> None:
    """The values the GPU kernels read unchecked, checked where the data is on the host.

    A negative length, or a block index outside the paged cache among the blocks a
    sequence's length reaches, is a ``ValueError`` naming the entry.
    """
    negative = np.flatnonzero(lens < 0)
    if negative.size:
        b = int(negative[0])
        raise ValueError(f"seq_lens[{b}] = {int(lens[b])} is negative; lengths are >= 0")
    if table is None:
        return
    num_blocks, block_size = cache_shape[0], cache_shape[2]
    for b, length in enumerate(np.minimum(lens, capacity)):
        used = table[b, : -(-int(length) // block_size)]
        bad = np.flatnonzero((used < 0) | (used >= num_blocks))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"block_table[{b}, {i}] = {int(used[i])} is not a block of the paged cache"
                f" (0..{num_blocks - 1}); sequence {b} of length {int(length)} reaches it"
            )


def _decode_cpu(
    q: GPUArray,
    kc: GPUArray,
    vc: GPUArray,
    lens: GPUArray,
    table: GPUArray | None,
    scale: float,
    capacity: int,
    out: GPUArray,
) -> None:
    qh, kh, vh, lh = host(q), host(kc), host(vc), host(lens)
    _check_lengths_and_blocks(lh, None if table is None else host(table), kh.shape, capacity)
    b_, hq, d = qh.shape
    hkv = kh.shape[1]
    group = hq // hkv
    res = np.zeros(qh.shape, np.float32)
    for b in range(b_):
        n = int(min(max(int(lh[b]), 0), capacity))
        if n == 0:
            continue
        if table is None:
            keys, vals = kh[b, :, :n], vh[b, :, :n]
        else:
            bs = kh.shape[2]
            blocks = host(table)[b, : -(-n // bs)]
            # [nb, Hkv, bs, D] -> [Hkv, nb * bs, D], first n keys.
            keys = kh[blocks].transpose(1, 0, 2, 3).reshape(hkv, -1, d)[:, :n]
            vals = vh[blocks].transpose(1, 0, 2, 3).reshape(hkv, -1, d)[:, :n]
        for hk in range(hkv):
            qg = qh[b, hk * group : (hk + 1) * group].astype(np.float32)
            s = (qg @ keys[hk].astype(np.float32).T) * np.float32(scale)
            res[b, hk * group : (hk + 1) * group] = _softmax_rows(s) @ vals[hk].astype(np.float32)
    write_into(out, res)


def decode_attention(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    *,
    scale: float | None = None,
    block_table: GPUArray | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Attention of one new query token per sequence over its cached keys and values.

    ``q [B, Hq, D]`` (float16 or bfloat16); ``seq_lens`` int32 ``[B]`` on the device (the
    number of cached tokens of each sequence, the new token's included if it was written).
    Caches, same dtype as q:

    - contiguous: ``[B, Hkv, max_len, D]`` (``block_table=None``);
    - paged: ``[num_blocks, Hkv, block_size, D]`` with ``block_table`` int32
      ``[B, max_blocks]``: token ``t`` of sequence ``b`` is at block
      ``block_table[b, t // block_size]``, offset ``t % block_size``. The entries a
      sequence's length reaches must be valid block indices (``[0, num_blocks)``).

    ``seq_lens`` must be >= 0. The CPU backend checks both and raises ``ValueError`` naming
    the entry; the GPU reads them without a check (checking would need a synchronisation).

    Lengths above the capacity (``max_len``, or ``max_blocks * block_size``) are clamped
    to it; a length of 0 gives zeros. Long caches are split across CTAs (flash decoding)
    and merged by a second kernel, which needs a float32 workspace of
    ``B * Hq * splits * (D + 1)`` values for that call. Returns ``[B, Hq, D]``.
    """
    check_array(q, "q", dtypes=HALF_DTYPES, ndim=3)
    check_array(k_cache, "k_cache", dtypes=HALF_DTYPES, ndim=4)
    check_array(v_cache, "v_cache", dtypes=HALF_DTYPES, ndim=4)
    check_same_dtype(q, ("k_cache", k_cache), ("v_cache", v_cache))
    check_array(seq_lens, "seq_lens", dtypes=[np.int32], ndim=1)
    b, hq, d = q.shape
    _check_head_dim(d, "q")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(
            f"k_cache and v_cache must have the same shape, got {k_cache.shape} and {v_cache.shape}"
        )
    hkv, cache_len = k_cache.shape[1], k_cache.shape[2]
    if k_cache.shape[3] != d:
        raise ValueError(f"k_cache head dim {k_cache.shape[3]} differs from q's ({d})")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of the KV heads ({hkv})")
    if seq_lens.shape[0] != b:
        raise ValueError(f"seq_lens must have shape ({b},), got {tuple(seq_lens.shape)}")
    max_blocks = 0
    if block_table is None:
        if k_cache.shape[0] != b:
            raise ValueError(
                f"a contiguous k_cache must be [B={b}, Hkv, max_len, D], got "
                f"{tuple(k_cache.shape)} (pass block_table for a paged cache)"
            )
        capacity = cache_len
    else:
        check_array(block_table, "block_table", dtypes=[np.int32], ndim=2)
        if block_table.shape[0] != b:
            raise ValueError(
                f"block_table must be [B={b}, max_blocks], got {tuple(block_table.shape)}"
            )
        max_blocks = block_table.shape[1]
        capacity = max_blocks * cache_len
        if k_cache.shape[0] == 0 and capacity > 0:
            # The kernel reads block block_table[b, i] unchecked: with no blocks any length > 0
            # would read outside the cache.
            raise ValueError(
                f"the paged k_cache {tuple(k_cache.shape)} has no blocks but block_table gives "
                f"each sequence {max_blocks} of them; allocate at least one block"
            )
    if capacity >= 2**31:
        raise ValueError(f"the cache holds {capacity} tokens per sequence; at most 2**31 - 1")
    scale_f = _check_scale(scale, d)
    check_out(out, (b, hq, d), q.dtype)
    res = result(out, (b, hq, d), q.dtype)
    if res.size == 0:
        return res
    if on_cpu(q):
        _decode_cpu(q, k_cache, v_cache, seq_lens, block_table, scale_f, capacity, res)
        return res

    if b > 65535:
        raise ValueError(f"at most 65535 sequences per call, got {b}")
    check_int32("decode_attention", Hq=hq, cache_len=cache_len, max_blocks=max_blocks)
    _check_aligned(("q", q), ("k_cache", k_cache), ("v_cache", v_cache))
    which = os.environ.get(DECODE_KERNEL_ENV, "") or "mma2"
    if which not in _DECODE_HEADS:
        raise ValueError(
            f"{DECODE_KERNEL_ENV} must be one of {', '.join(_DECODE_HEADS)}, got {which!r}"
        )
    suffix = kernel_suffix(q.dtype)
    if which != "simt":
        stages = 2 if which == "mma2" else 1
        kern = _kernel_loader.kernel("attention_decode", f"attn_decode_{which}_d{d}_{suffix}")
        smem = (16 + 2 * stages * 64) * (d + 8) * 2  # Q rows + 64-token K and V tiles
        _allow_dynamic_smem(kern, d, smem)
    else:
        kern = _kernel_loader.kernel("attention_decode", f"attn_decode_d{d}_{suffix}")
        smem = 0
    head_ctas = hkv * -(-(hq // hkv) // _DECODE_HEADS[which])
    splits, chunk = _decode_split(b, head_ctas, max(capacity, 1), _DECODE_CTAS_PER_SM[which])
    grid = (splits, head_ctas, b)
    table = block_table if block_table is not None else 0
    # One split writes the output itself; several write fp32 partials (0 = no pointer) that the
    # combine kernel merges.
    o_part: GPUArray | int = 0
    lse: GPUArray | int = 0
    if splits > 1:
        o_part = gp.empty((b * hq * splits * d,), gp.float32)
        lse = gp.empty((b * hq * splits,), gp.float32)
    kern(
        q,
        k_cache,
        v_cache,
        seq_lens,
        table,
        res,
        o_part,
        lse,
        hq,
        hkv,
        cache_len,
        max_blocks,
        capacity,
        chunk,
        scale_f,
        grid=grid,
        block=128,
        shared_mem=smem,
    )
    if splits == 1:
        return res
    combine = _kernel_loader.kernel("attention_decode", f"attn_decode_combine_{suffix}")
    combine(o_part, lse, seq_lens, res, hq, d, splits, chunk, capacity, grid=b * hq, block=128)
    return res

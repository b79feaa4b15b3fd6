"""Attention: flash attention for prefill, decode attention over a contiguous or paged KV cache.

Layouts follow PyTorch: ``q [B, Hq, Sq, D]``, ``k``/``v`` ``[B, Hkv, Sk, D]``; query head
``h`` attends with KV head ``h // (Hq // Hkv)`` (grouped-query / multi-query attention).
Head dims 64, 80, 96, 128 and 256; float16 and bfloat16 on the flash kernels, accumulated in
float32; float32 too, through matmul + softmax with the scores materialised (for checks against
a float32 reference; slower, and no paged cache on the GPU).

Two rules differ from a naive reading of PyTorch and are the same on both backends:

- ``is_causal`` aligns the causal diagonal to the bottom-right: query ``i`` sees key ``j``
  when ``j <= i + (Sk - Sq)``. With ``Sq == Sk`` this is PyTorch's rule; with ``Sq < Sk``
  (a chunk of new queries after cached keys) the last query sees every key, as a KV cache
  needs. PyTorch aligns to the top-left instead when ``Sq != Sk``.
- A query row that sees no key at all (causal with ``Sq > Sk``, or a mask of ``-inf`` over
  the whole row) outputs zeros, where PyTorch outputs NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray
from pygpukit.kernels import Kernel, target_arch
from pygpukit.stream import StreamLocal

from . import _attention_fp32, _kernel_loader, config
from ._common import (
    FLOAT_DTYPES,
    check_array,
    check_int32,
    check_out,
    check_same_dtype,
    check_shape,
    check_writeable,
    host,
    kernel_suffix,
    write_into,
)
from ._constants import (
    PREFILL_WGMMA_ROWS,
    PREFILL_WGMMA_THREADS,
    constant,
    decode_heads_per_cta,
    prefill_mma_tiles,
)
from ._plan import Launch, PlanCache, per_backend
from .reference import attention as reference

__all__ = ["decode_attention", "scaled_dot_product_attention"]

#: Head dimensions with a built-in kernel.
HEAD_DIMS = (64, 80, 96, 128, 256)


def _allow_dynamic_smem(kern: Kernel, smem: int) -> None:
    """Opt ``kern`` into ``smem`` bytes of dynamic shared memory when above 48 KiB (at planning)."""
    if smem > 48 * 1024:
        kern.set_max_dynamic_shared_memory(smem)


#: The ``attention_kernel`` knob of :mod:`.config` picks the prefill kernel. ``auto``: the
#: Hopper kernel ``wgmma_persist`` on SM 9.0 for the head dims it has (64 and 128), else ``mma``
#: (mma.sync, every SM 80+ GPU). ``mma`` forces the mma.sync kernel everywhere; the Hopper
#: kernels apply where ``auto`` would pick one and fall back to ``mma`` elsewhere. ``wgmma_tma``
#: is warp-specialized: one producer thread loads Q, K and V by TMA for two consumer warpgroups
#: that take turns issuing their matrix multiplies (FlashAttention-3's ping-pong), one CTA per
#: query tile; ``wgmma_persist`` is the same kernel made persistent (one CTA per SM running a
#: list of query tiles, :func:`_prefill_schedule`). ``wgmma_pipe`` has no producer: each of its
#: two warpgroups overlaps its softmax with its own matrix multiplies, and all threads load with
#: cp.async. docs/ops-attention.md (Performance notes) has the measurements and the variants
#: that lost.
KERNEL_ENV = config.ENV["attention_kernel"][0]
_KERNEL_CHOICES = config.ENV["attention_kernel"][1]
_WGMMA_HEAD_DIMS = (64, 128)
#: Threads per CTA of each Hopper kernel (attention_prefill.cu launch bounds).
_WGMMA_THREADS = PREFILL_WGMMA_THREADS


@functools.cache
def _arch(device: int) -> str:
    return target_arch(device)


def _prefill_kernel(d: int) -> str:
    """The prefill kernel for head dim ``d`` on the current device: ``mma`` or a wgmma kernel."""
    choice = config.get().attention_kernel
    if choice == "mma" or d not in _WGMMA_HEAD_DIMS or _arch(gp.get_device()) != "sm_90a":
        return "mma"
    return "wgmma_persist" if choice == "auto" else choice


#: Prefill kernels that take q, k, v tensor maps.
_TMA_KERNELS = ("wgmma_tma", "wgmma_persist")
#: Heads per group of the prefill order (attention_common.cuh kHeadGroup): a group's row tiles
#: run together so its K and V stay in L2.
_HEAD_GROUP = 8
#: A work item's fixed cost, in key tiles, for the persistent kernel's schedule: the output
#: stores and the turn hand-overs around an item. One tile did best in two H200 runs of
#: tools/attention_ab.py (B=4, H=32, S=4096, causal: 962 against 989 us at half a tile, and 891
#: against 926 in an earlier run; 0.25 and 2 tiles in between).
_ITEM_OVERHEAD = 1.0


def _prefill_schedule(
    bh: int, sq: int, sk: int, causal: bool, ctas: int, rows: int = PREFILL_WGMMA_ROWS
) -> np.ndarray:
    """Work lists of the persistent prefill kernel, as one int32 array (its ``sched``).

    Items are query row tiles, ``(b * Hq + h) * tiles + tile``, in the order the other kernels'
    CTAs start (groups of heads, longest causal tiles first, heads varying fastest); each goes to
    the CTA that would be free first, as the hardware hands out CTAs, costed by its key tiles.
    Returns ``offsets[ctas + 1]`` followed by the items, each CTA's list in start order.
    """
    tiles = -(-sq // rows)
    m0 = np.arange(tiles) * rows
    n_end = np.minimum(sk, m0 + rows + (sk - sq)) if causal else np.full(tiles, sk)
    n_tiles = -(-np.maximum(n_end, 0) // rows)  # key tiles are as long as row tiles
    order = []
    for first in range(0, bh, _HEAD_GROUP):
        heads = np.arange(first, min(first + _HEAD_GROUP, bh))
        for m in range(tiles - 1, -1, -1):
            order.append(heads * tiles + m)
    items = np.concatenate(order)
    ctas = max(1, min(ctas, len(items)))
    costs = n_tiles[items % tiles] + _ITEM_OVERHEAD
    free_at = [(0.0, c) for c in range(ctas)]
    lists: list[list[int]] = [[] for _ in range(ctas)]
    for item, cost in zip(items.tolist(), costs.tolist(), strict=True):
        at, c = heapq.heappop(free_at)
        lists[c].append(item)
        heapq.heappush(free_at, (at + cost, c))
    offsets = np.cumsum([0] + [len(x) for x in lists])
    return np.concatenate([offsets, *[np.asarray(x, np.int64) for x in lists]]).astype(np.int32)


def _tma_maps(q: GPUArray, k: GPUArray, v: GPUArray) -> tuple[gp.TensorMap, ...]:
    """The wgmma_tma kernel's tensor maps: q, k, v as [B * H, S, D], boxes of 128 rows x 64.

    Strided views are read in place where B and H merge into one stride (one batch, or a batch
    stride of H head strides: a head-major array, or a slice of a longer cache); else that
    input is copied (``reshape``'s rule).
    """
    return tuple(
        gp.TensorMap(x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]), (1, 128, 64), 128)
        for x in (q, k, v)
    )


def _strides_ok(x: GPUArray) -> bool:
    """Whether a TMA kernel reads ``x`` as it is (its start is checked with the others').

    Rows of D contiguous elements and every other stride a multiple of 16 bytes (a tensor
    map's rule): any contiguous input, and the strided views a model passes.
    """
    if x.is_contiguous():
        return True
    st = x.strides
    return st[3] == x.itemsize and st[0] % 16 == 0 and st[1] % 16 == 0 and st[2] % 16 == 0


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


def seq_major_out(out: GPUArray) -> bool:
    """Whether ``out`` ``[B, Hq, Sq, D]`` is the transposed view of a ``[B, Sq, Hq, D]`` array.

    That is ``x.transpose(0, 2, 1, 3)`` of a C-contiguous ``x``: the kernels write it in place
    (the layout an output projection reads, so no copy follows attention). False for a
    C-contiguous ``out``.
    """
    if out.is_contiguous():
        return False
    return out.ndim == 4 and out.transpose(0, 2, 1, 3).is_contiguous()


def check_prefill_out(out: GPUArray | None, shape: tuple[int, ...], dtype: Any) -> GPUArray:
    """``out`` when given (checked), else a new ``[B, Hq, Sq, D]`` array.

    ``out`` must have the shape and dtype, be writeable, and be C-contiguous or
    :func:`seq_major_out`.
    """
    if out is None:
        return gp.empty(shape, dtype)
    check_array(out, "out", dtypes=[dtype], contiguous=False)
    check_shape(out, "out", shape)
    check_writeable(out, "out")
    if not out.is_contiguous() and not seq_major_out(out):
        raise ValueError(
            f"out must be C-contiguous [B, Hq, Sq, D] or x.transpose(0, 2, 1, 3) of a "
            f"C-contiguous [B, Sq, Hq, D] x; got strides {out.strides}"
        )
    return out


@dataclass(frozen=True, slots=True)
class PrefillPlan:
    """A prefill launch: ``plan(q, k, v, out, mask, mask_strides, scale)`` enqueues it.

    ``out`` is C-contiguous or :func:`seq_major_out` (the kernels write either layout).
    """

    launch: Launch
    mask_kind: int
    sizes: tuple[int, int, int, int]  # hq, hkv, sq, sk
    causal: int
    tma: bool  # the kernel takes q, k, v tensor maps
    sched: GPUArray | None = None  # the persistent kernel's work lists (_prefill_schedule)

    def __call__(
        self,
        q: GPUArray,
        k: GPUArray,
        v: GPUArray,
        out: GPUArray,
        mask: GPUArray | None,
        strides: tuple[int, ...],
        scale: float,
    ) -> None:
        if not self.tma:  # the pointer kernels read [B, H, S, D] arrays
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        elif not (_strides_ok(q) and _strides_ok(k) and _strides_ok(v)):
            q, k, v = (x if _strides_ok(x) else x.copy() for x in (q, k, v))
        _check_aligned(("q", q), ("k", k), ("v", v), ("out", out))
        maps = _tma_maps(q, k, v) if self.tma else ()
        extra = (self.sched,) if self.sched is not None else ()
        o_seq = 0 if out.is_contiguous() else 1  # else seq_major_out (checked by the caller)
        self.launch(
            q, k, v, out, mask if mask is not None else 0, self.mask_kind, *strides,
            *self.sizes, scale, self.causal, o_seq, *maps, *extra,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReferencePrefill:
    """The CPU backend's prefill: :func:`.reference.attention.sdpa` on the host buffers."""

    causal: bool

    def __call__(
        self,
        q: GPUArray,
        k: GPUArray,
        v: GPUArray,
        out: GPUArray,
        mask: GPUArray | None,
        strides: tuple[int, ...],
        scale: float,
    ) -> None:
        m = host(mask) if mask is not None else None
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        write_into(out, reference.sdpa(host(q), host(k), host(v), m, self.causal, scale))


@dataclass(frozen=True, slots=True)
class ComposedPrefill:
    """float32 prefill on the GPU: matmul, softmax and where (:mod:`._attention_fp32`)."""

    causal: bool

    def __call__(
        self,
        q: GPUArray,
        k: GPUArray,
        v: GPUArray,
        out: GPUArray,
        mask: GPUArray | None,
        strides: tuple[int, ...],
        scale: float,
    ) -> None:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if out.is_contiguous():
            _attention_fp32.sdpa(q, k, v, mask, self.causal, scale, out)
            return
        res = gp.empty(tuple(out.shape), out.dtype)  # a seq_major_out view: written after
        _attention_fp32.sdpa(q, k, v, mask, self.causal, scale, res)
        out[...] = res


def _plan_prefill_cuda(*key: Any) -> PrefillPlan | ReferencePrefill | ComposedPrefill:
    b, hq, hkv, sq, sk, d, dtype, causal, mask_kind, movable, _device = key
    if dtype == np.float32:
        return ComposedPrefill(bool(causal))
    check_int32("scaled_dot_product_attention", Sq=sq, Sk=sk, Hkv=hkv)
    kind = _prefill_kernel(d)
    if kind in _TMA_KERNELS and (sk == 0 or movable):
        # No key tile to load (TMA cannot map an empty k), or an input whose address may change
        # (a tensor map holds the address; wgmma_pipe takes pointers made resident at launch).
        kind = "wgmma_pipe"
    if kind != "mma":
        # Kernel names: attn_prefill_<kind>_d<D>_<dtype>. Both hold Q and 3 K/V stages with
        # 1 KiB of alignment slack (wgmma_tma's mbarriers are static shared memory).
        name = f"attn_prefill_{kind}_d{d}_{kernel_suffix(dtype)}"
        rows, threads = PREFILL_WGMMA_ROWS, _WGMMA_THREADS[kind]
        smem = 7 * (d // 64) * 128 * 128 + 1024
    else:
        rows, block_n, stride = prefill_mma_tiles(d)
        threads = constant("attention_prefill", "PREFILL_THREADS")
        name = f"attn_prefill_d{d}_{kernel_suffix(dtype)}"
        smem = (rows + 2 * block_n) * stride * 2  # Q rows and one K and one V tile, 16-bit
    ctas = b * hq * ((sq + rows - 1) // rows)  # a 1-d grid (kernels: PrefillOrder)
    check_int32("scaled_dot_product_attention", **{"B * Hq * row tiles": ctas})
    sched = None
    if kind == "wgmma_persist":
        table = _prefill_schedule(b * hq, sq, sk, bool(causal), _sm_count(_device))
        ctas = len(table) - 1 - ctas  # offsets[ctas + 1], then one entry per row tile
        sched = gp.from_numpy(table)
    kern = _kernel_loader.kernel("attention_prefill", name)
    _allow_dynamic_smem(kern, smem)
    launch = Launch(kern, ctas, threads, smem)
    tma = kind in _TMA_KERNELS
    return PrefillPlan(launch, mask_kind, (hq, hkv, sq, sk), int(causal), tma, sched)


def _plan_prefill_numpy(*key: Any) -> PrefillPlan | ReferencePrefill | ComposedPrefill:
    return ReferencePrefill(bool(key[7]))


#: Prefill plans by (B, Hq, Hkv, Sq, Sk, D, dtype, causal, mask kind, any input evictable,
#: device).
PREFILL_PLANS: PlanCache[PrefillPlan | ReferencePrefill | ComposedPrefill] = PlanCache(
    "prefill", per_backend(cpu=_plan_prefill_numpy, cuda=_plan_prefill_cuda)
)


def mask_kind(mask: GPUArray | None) -> int:
    """The kernels' mask code: 0 none, 1 float32, 2 the query's dtype."""
    return 0 if mask is None else (1 if mask.dtype == np.float32 else 2)


def prefill_plan(
    q: GPUArray, k: GPUArray, v: GPUArray, mask: GPUArray | None, causal: bool
) -> PrefillPlan | ReferencePrefill | ComposedPrefill:
    """The (cached) prefill plan for these (already checked) arrays."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    movable = q.evictable or k.evictable or v.evictable
    key = (b, hq, hkv, sq, sk, d, q.dtype, causal, mask_kind(mask), movable, gp.get_device())
    return PREFILL_PLANS.get(*key)


def check_prefill(
    q: GPUArray,
    k: GPUArray,
    v: GPUArray,
    attn_mask: GPUArray | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[float, tuple[int, ...]]:
    """Validate the prefill arguments; return the scale and the mask's broadcast strides."""
    # Strided views are accepted (the Hopper kernels read them in place; the others get a
    # contiguous copy): e.g. q of a [B, S, H, D] projection transposed to [B, H, S, D], or the
    # first S positions of a [B, Hkv, max_len, D] cache.
    check_array(q, "q", dtypes=FLOAT_DTYPES, ndim=4, contiguous=False)
    check_array(k, "k", dtypes=FLOAT_DTYPES, ndim=4, contiguous=False)
    check_array(v, "v", dtypes=FLOAT_DTYPES, ndim=4, contiguous=False)
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
    return scale_f, strides


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

    ``q [B, Hq, Sq, D]``, ``k``/``v`` ``[B, Hkv, Sk, D]`` (float16 or bfloat16, or float32 on
    the slower composed path; ``Hq`` a multiple of ``Hkv``); returns a contiguous
    ``[B, Hq, Sq, D]`` in q's dtype. q, k and v may be strided views: the Hopper kernel reads
    them in place when each row of D is contiguous and B and H merge into one stride (one
    batch, or a slice ``cache[:, :, :S]`` of a head-major cache), e.g. a ``[1, S, H, D]``
    projection seen as ``[1, H, S, D]`` through ``transpose(0, 2, 1, 3)``; other kernels and
    layouts copy them first.
    ``attn_mask`` is an additive mask (float32 or q's dtype) that broadcasts to
    ``[B, Hq, Sq, Sk]``; ``is_causal`` hides key ``j`` from query ``i`` when
    ``j > i + (Sk - Sq)`` (bottom-right aligned; PyTorch's rule when ``Sq == Sk``) and
    may be combined with a mask. ``scale`` defaults to ``1 / sqrt(D)``. Rows that see
    no key output zeros. ``out`` (optional) receives the result: C-contiguous, or
    ``x.transpose(0, 2, 1, 3)`` of a C-contiguous ``[B, Sq, Hq, D]`` ``x`` (written in place:
    ``x.reshape(B, Sq, Hq * D)`` is then the input of an output projection, no copy between).
    Raises ``TypeError``/``ValueError`` for wrong arguments.
    """
    scale_f, strides = check_prefill(q, k, v, attn_mask, is_causal, scale)
    is_causal = bool(is_causal)
    res = check_prefill_out(out, tuple(q.shape), q.dtype)
    if res.size == 0:
        return res
    prefill_plan(q, k, v, attn_mask, is_causal)(q, k, v, res, attn_mask, strides, scale_f)
    return res


# --- decode -------------------------------------------------------------------------------


@functools.cache
def _sm_count(device: int) -> int:
    return int(gp.get_device_info(device)["sm_count"] or 1)


#: CTAs per SM the flash-decoding split aims for, per decode kernel. The tensor-core kernels'
#: CTAs hold 72 KiB of shared memory (3 fit on an SM; the two-stage ones): at most three per SM
#: keeps every CTA resident at once, so no partial last wave runs alone. With a combine kernel
#: two per SM did best (fewer partials to merge; one per SM, and three or four stages, lost on an
#: H200); ``bulk2``, whose last CTA merges the partials itself, too (8K cached tokens, batch 8,
#: on an H200, both launched dependent: 72.9 us against 75.5 at three; an earlier comparison
#: that favoured three set two against a launch that let the next call in early).
#: The SIMT kernel (no shared memory, many CTAs per SM) does best at eight per SM.
#: docs/ops-attention.md (Performance notes) has the split sweeps these come from.
_DECODE_CTAS_PER_SM: dict[str, float] = {
    "mma": 2, "mma2": 2, "bulk2": 2, "bulk3": 2, "tma2": 2, "tma3": 2, "simt": 8,
}  # fmt: skip
#: The fewest keys a split takes: a split's first tiles cost a memory latency before any key
#: is scored, so short caches stay whole unless the batch leaves most SMs idle.
_DECODE_MIN_CHUNK = 256
#: Whether a split kernel whose last CTAs merge the partials (the fused combine) lets a kernel
#: launched dependent after it start once its key loops are done (its blocks then take the block
#: slots as the merging CTAs free them), rather than only when it exits.
_DECODE_EARLY_LAUNCH = {"bulk2": False}


def _decode_split(
    batch: int, ctas: int, capacity: int, per_sm: float = _DECODE_CTAS_PER_SM["bulk2"]
) -> tuple[int, int]:
    """(splits, chunk): at most about ``per_sm`` CTAs per SM, chunks of >= _DECODE_MIN_CHUNK.

    ``ctas`` counts the CTAs of one split for one sequence. Sized by the cache capacity: the
    lengths live on the device and are not read back.
    """
    want = max(1, int(per_sm * _sm_count(gp.get_device())) // max(1, batch * ctas))
    most = constant("attention_decode", "DECODE_MAX_SPLITS")
    splits = max(1, min(most, want, -(-capacity // _DECODE_MIN_CHUNK)))
    chunk = -(-capacity // splits)
    chunk = -(-chunk // 64) * 64  # whole steps of the kernel's key loop
    return -(-capacity // chunk), chunk


def _decode_smem(kernel: str, d: int, stages: int) -> int:
    """Dynamic shared memory of a tensor-core decode kernel with ``stages`` K/V stages.

    Q rows + K and V tiles of DECODE_KEY_TILE tokens per stage, rows padded by 8 elements;
    the tensor-copy kernels' tiles are unpadded (swizzled) and start 1 KiB aligned.
    """
    tile = constant("attention_decode", "DECODE_KEY_TILE")
    heads = decode_heads_per_cta(kernel)
    if kernel.startswith("tma"):
        return heads * (d + 8) * 2 + 1024 + 2 * stages * tile * d * 2
    return (heads + 2 * stages * tile) * (d + 8) * 2


#: Head dims of the tensor-copy decode kernels (whole 64-value column blocks).
_TMA_DECODE_HEAD_DIMS = (64, 128, 256)


def _tma_box_rows(cache_len: int, paged: bool) -> int:
    """Rows per tensor-copy box of the tma decode kernels; 0 where they cannot read the cache.

    A contiguous cache: a whole 64-key tile. A paged one: one block (8 to 64 tokens dividing
    64), or 64 rows of a block of a multiple of 64 tokens.
    """
    tile = constant("attention_decode", "DECODE_KEY_TILE")
    if not paged:
        return tile
    if cache_len % tile == 0:
        return tile
    if cache_len % 8 == 0 and tile % cache_len == 0:
        return cache_len
    return 0


def _decode_stages(kernel: str, d: int, optin: int, bulk_ok: bool = True) -> tuple[str, int]:
    """The decode kernel to launch for ``kernel`` (mma, mma2, bulk, tma), and its shared memory.

    ``kernel`` itself, or where its stages do not fit in ``optin`` bytes (large head dims, GPUs
    with less shared memory) fewer of them, down to the one-stage ``mma``; the bulk kernels
    become ``mma2`` where bulk copies are missing (``bulk_ok`` false: before SM 9.0), the only
    cp.async ring with more than one stage.
    """
    family = kernel.rstrip("0123456789")
    stages = int(kernel[len(family) :] or 1)
    if family in ("bulk", "tma") and not bulk_ok:
        family, stages = "mma", min(stages, 2)
    if family == "tma" and d not in _TMA_DECODE_HEAD_DIMS:
        family = "bulk"
    while stages > 1 and _decode_smem(f"{family}{stages}", d, stages) > optin:
        stages -= 1
    if family in ("bulk", "tma") and stages < 2:
        family = "mma"
    name = f"{family}{stages}" if stages > 1 else "mma"
    return name, _decode_smem(name, d, stages)


def _has_bulk_copy(device: int) -> bool:
    """Whether ``device`` has the Tensor Memory Accelerator's bulk copies (SM 9.0 and later)."""
    sm = gp.get_device_info(device)["sm"]
    return sm is not None and tuple(sm) >= (9, 0)


@functools.cache
def _smem_optin(device: int) -> int:
    """Shared memory one CTA of ``device`` may opt into, in bytes.

    No limit where unknown (the CPU backend, where only tests make CUDA plans).
    """
    return int(gp.get_device_info(device)["shared_mem_per_block_optin"] or 1 << 30)


@dataclass(frozen=True, slots=True)
class DecodePlan:
    """A decode launch, and how its split partial results are merged.

    ``plan(q, k_cache, v_cache, seq_lens, block_table, out, scale[, o_part, lse])`` enqueues it
    on arrays :func:`check_decode` accepted (it checks nothing itself: it runs every step);
    :meth:`workspace` makes the float32 partials a split plan writes (without them, the plan
    uses the current stream's, made on its first call there). A split plan merges them
    either in the same launch (``fused``: the last CTA of each sequence and head group to finish
    merges, counting on ``counters``) or with a second kernel (``combine``).
    """

    launch: Launch
    combine: Launch | None
    tail: tuple[int, ...]  # hq, hkv, cache_len, max_blocks, capacity, chunk
    partials: tuple[int, int, int]  # float32 elements of o_part and lse, and the splits
    dependent: bool = False  # both kernels by programmatic dependent launch
    fused: int = 0  # the fused combine's counters per stream (0: no fused combine)
    early: int = 0  # a fused-combine kernel lets its dependent successor launch after its key loop
    #: The tensor-copy kernels' box rows (0: a kernel without tensor maps).
    box: int = 0
    #: Their tensor maps by the id of the cache array each describes (encoding one is a
    #: host-side driver call, too slow for every call). An entry goes when its array is
    #: collected, so the plan keeps no cache's memory alive past its array.
    maps: dict[int, tuple[Any, gp.TensorMap]] = dataclasses.field(default_factory=dict)
    #: The fused combine's counters (int32, counted as unsigned), one zeroed array per stream
    #: the plan runs on: the kernel leaves them at zero, so launches in one stream reuse them,
    #: and launches of the plan in two streams at once do not share them. Made by the first call
    #: on a stream; when that call is captured in a CUDA graph, the zeroing is a node of the
    #: graph (it runs at each replay). Held by the stream: they go when it does.
    counters: StreamLocal[GPUArray] = dataclasses.field(default_factory=StreamLocal)
    #: The split partials of each stream the plan runs on, when the caller passes none (held by
    #: the stream, as the counters are).
    workspaces: StreamLocal[tuple[GPUArray, GPUArray]] = dataclasses.field(
        default_factory=StreamLocal
    )

    def workspace(self) -> tuple[GPUArray | int, GPUArray | int]:
        """New ``(o_part, lse)`` float32 arrays for a split plan; ``(0, 0)`` (none) unsplit."""
        if self.partials[2] <= 1:
            return 0, 0
        return gp.empty((self.partials[0],), gp.float32), gp.empty((self.partials[1],), gp.float32)

    def _new_workspace(self, stream: gp.Stream) -> tuple[GPUArray, GPUArray]:
        """A split plan's ``(o_part, lse)`` for ``stream`` (its first call there).

        Calls in one stream run one after another, so they can share one workspace (no
        allocation per call); two streams get two, like the fused combine's counters.
        """
        return (
            gp.empty((self.partials[0],), gp.float32, stream=stream),
            gp.empty((self.partials[1],), gp.float32, stream=stream),
        )

    def _tensor_map(self, x: GPUArray, d: int) -> gp.TensorMap:
        """The tensor map of cache ``x`` seen as ``[rows, d]`` (made on first use)."""
        found = self.maps.get(id(x))
        if found is not None and found[0]() is x:
            return found[1]
        made = gp.TensorMap(x.reshape(-1, d), (self.box, 64), 128)
        key = id(x)
        self.maps[key] = (weakref.ref(x), made)
        weakref.finalize(x, self.maps.pop, key, None)
        return made

    def _new_counters(self, stream: gp.Stream) -> GPUArray:
        """The fused combine's counters for ``stream`` (its first call there), zeroed."""
        return gp.zeros((self.fused,), np.int32, stream=stream)

    def __call__(
        self,
        q: GPUArray,
        k_cache: GPUArray,
        v_cache: GPUArray,
        seq_lens: GPUArray,
        block_table: GPUArray | None,
        out: GPUArray,
        scale: float,
        o_part: GPUArray | int | None = None,
        lse: GPUArray | int | None = None,
    ) -> None:
        table = block_table if block_table is not None else 0
        counters: GPUArray | int = 0
        if self.partials[2] > 1:  # split: partials (the stream's unless given) and counters
            if o_part is None or lse is None:
                o_part, lse = self.workspaces.get(self._new_workspace)
            if self.fused:
                counters = self.counters.get(self._new_counters)
        else:
            o_part = lse = 0
        # Launched dependent (the dependent_launch knob), the kernel's CTAs may start while the
        # previous kernel drains: they prefetch their first keys into L2 and wait for it in the
        # kernel before reading anything it may write.
        main = self.launch
        args: tuple[Any, ...] = (
            q, k_cache, v_cache, seq_lens, table, out, o_part, lse, counters, *self.tail, scale,
            self.early,
        )  # fmt: skip
        if self.box:
            d = q.shape[2]
            args += (self._tensor_map(k_cache, d), self._tensor_map(v_cache, d))
        main.kernel.launch(
            main.grid, main.block, args, shared_mem=main.shared_mem, dependent=self.dependent
        )
        if self.combine is not None:
            hq, _, _, _, capacity, chunk = self.tail
            # One split writes the output itself; several write fp32 partials that this merges.
            # Launched dependent, it starts as the split CTAs finish their key loops and waits
            # for their results in the kernel.
            c = self.combine
            args = (o_part, lse, seq_lens, out, hq, q.shape[2], self.partials[2], chunk, capacity)
            c.kernel.launch(c.grid, c.block, args, dependent=self.dependent)


@dataclass(frozen=True, slots=True)
class ReferenceDecode:
    """The CPU backend's decode: :func:`.reference.attention.decode` on the host buffers."""

    capacity: int

    def workspace(self) -> tuple[GPUArray | int, GPUArray | int]:
        """No workspace on the CPU backend."""
        return 0, 0

    def __call__(
        self,
        q: GPUArray,
        k_cache: GPUArray,
        v_cache: GPUArray,
        seq_lens: GPUArray,
        block_table: GPUArray | None,
        out: GPUArray,
        scale: float,
        o_part: GPUArray | int | None = None,
        lse: GPUArray | int | None = None,
    ) -> None:
        table = host(block_table) if block_table is not None else None
        reference.check_lengths_and_blocks(host(seq_lens), table, k_cache.shape, self.capacity)
        res = reference.decode(
            host(q), host(k_cache), host(v_cache), host(seq_lens), table, scale, self.capacity
        )
        write_into(out, res)


@dataclass(frozen=True, slots=True)
class ComposedDecode:
    """float32 decode on the GPU (contiguous cache): matmul, softmax and where."""

    def workspace(self) -> tuple[GPUArray | int, GPUArray | int]:
        """No workspace: the composition allocates its own scores."""
        return 0, 0

    def __call__(
        self,
        q: GPUArray,
        k_cache: GPUArray,
        v_cache: GPUArray,
        seq_lens: GPUArray,
        block_table: GPUArray | None,
        out: GPUArray,
        scale: float,
        o_part: GPUArray | int | None = None,
        lse: GPUArray | int | None = None,
    ) -> None:
        _attention_fp32.decode(q, k_cache, v_cache, seq_lens, scale, out)


def _plan_decode_cuda(*key: Any) -> DecodePlan | ReferenceDecode | ComposedDecode:
    b, hq, hkv, d, dtype, cache_len, max_blocks, capacity, _device = key
    if dtype == np.float32:
        if max_blocks:
            raise TypeError("a paged cache needs float16 or bfloat16 on the GPU, got float32")
        return ComposedDecode()
    if b > 65535:
        raise ValueError(f"at most 65535 sequences per call, got {b}")
    check_int32("decode_attention", Hq=hq, cache_len=cache_len, max_blocks=max_blocks)
    which = config.get().decode_kernel
    suffix = kernel_suffix(dtype)
    box = _tma_box_rows(cache_len, max_blocks > 0) if which.startswith("tma") else 0
    if which.startswith("tma") and (not box or b * hkv * cache_len >= 2**31):
        which = "bulk" + which[3:]  # a layout the tensor maps cannot take: one copy per row
    if which != "simt":
        which, smem = _decode_stages(which, d, _smem_optin(_device), _has_bulk_copy(_device))
        kern = _kernel_loader.kernel("attention_decode", f"attn_decode_{which}_d{d}_{suffix}")
        _allow_dynamic_smem(kern, smem)
    else:
        kern = _kernel_loader.kernel("attention_decode", f"attn_decode_d{d}_{suffix}")
        smem = 0
    head_ctas = hkv * -(-(hq // hkv) // decode_heads_per_cta(which))
    splits, chunk = _decode_split(b, head_ctas, max(capacity, 1), _DECODE_CTAS_PER_SM[which])
    threads = constant("attention_decode", "DECODE_THREADS")
    launch = Launch(kern, (splits, head_ctas, b), threads, smem)
    combine, fused = None, 0
    if splits > 1 and config.get().decode_combine == "fused":
        fused = b * head_ctas  # a counter per (sequence, head group): grid.z * grid.y
    elif splits > 1:
        name = f"attn_decode_combine_{suffix}"
        combine = Launch(_kernel_loader.kernel("attention_decode", name), b * hq, threads)
    tail = (hq, hkv, cache_len, max_blocks, capacity, chunk)
    partials = (b * hq * splits * d, b * hq * splits, splits)
    dependent = config.get().dependent_launch == "on"
    early = int(bool(fused) and _DECODE_EARLY_LAUNCH.get(which, False))
    box = box if which.startswith("tma") else 0
    return DecodePlan(launch, combine, tail, partials, dependent, fused, early, box)


def _plan_decode_numpy(*key: Any) -> DecodePlan | ReferenceDecode | ComposedDecode:
    return ReferenceDecode(key[7])


#: Decode plans by (B, Hq, Hkv, D, dtype, cache_len, max_blocks, capacity, device).
DECODE_PLANS: PlanCache[DecodePlan | ReferenceDecode | ComposedDecode] = PlanCache(
    "decode", per_backend(cpu=_plan_decode_numpy, cuda=_plan_decode_cuda)
)


def decode_plan(
    q: GPUArray, k_cache: GPUArray, max_blocks: int, capacity: int
) -> DecodePlan | ReferenceDecode | ComposedDecode:
    """The (cached) decode plan for these (already checked) arrays and cache capacity."""
    b, hq, d = q.shape
    hkv, cache_len = k_cache.shape[1], k_cache.shape[2]
    key = (b, hq, hkv, d, q.dtype, cache_len, max_blocks, capacity, gp.get_device())
    return DECODE_PLANS.get(*key)


#: The int32 dtype of the lengths and block tables, as a tuple of ``np.dtype`` (a membership
#: test against ``np.int32`` itself converts the type on every call).
_INT32 = (np.dtype(np.int32),)
#: The most K/V cache pairs :func:`_check_caches` remembers (a model has one pair per layer).
_CHECKED_CACHES_MAX = 256
#: K/V cache pairs already checked, by the ids of the two arrays: weak references to both (an
#: id is reused once its array is gone), the shape and the dtype. A decode loop passes the same
#: caches at every step, and what is checked of them (type, dtype, rank, contiguity, equal
#: shapes) is array metadata, which never changes, so each pair is checked once.
_CHECKED_CACHES: dict[tuple[int, int], tuple[Any, Any, tuple[int, ...], np.dtype[Any]]] = {}


def _check_caches(k_cache: GPUArray, v_cache: GPUArray) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """The checked K/V caches' shape and dtype.

    Checks: four dimensions, one float dtype, equal shapes, each starting 16-byte aligned.
    """
    key = (id(k_cache), id(v_cache))
    found = _CHECKED_CACHES.get(key)
    if found is not None and found[0]() is k_cache and found[1]() is v_cache:
        return found[2], found[3]
    check_array(k_cache, "k_cache", dtypes=FLOAT_DTYPES, ndim=4)
    check_array(v_cache, "v_cache", dtypes=FLOAT_DTYPES, ndim=4)
    kshape, vshape = tuple(k_cache.shape), tuple(v_cache.shape)
    dtype = k_cache.dtype
    if v_cache.dtype != dtype:
        raise TypeError(f"v_cache has dtype {v_cache.dtype}, expected k_cache's {dtype}")
    if kshape != vshape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {kshape} and {vshape}")
    _check_aligned(("k_cache", k_cache), ("v_cache", v_cache))
    if len(_CHECKED_CACHES) >= _CHECKED_CACHES_MAX:
        _CHECKED_CACHES.clear()
    _CHECKED_CACHES[key] = (weakref.ref(k_cache), weakref.ref(v_cache), kshape, dtype)
    return kshape, dtype


def _decode_args(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    block_table: GPUArray | None,
    scale: float | None,
) -> tuple[tuple[int, int, int], tuple[int, ...], np.dtype[Any], int, int, float]:
    """Validate the decode arguments; return their facts.

    ``(q's shape, the caches' shape, dtype, max_blocks, capacity in tokens, scale)``.
    Runs on every decode step: each array's metadata is read once, and the caches' checks
    are remembered per cache pair (:func:`_check_caches`).
    """
    # q and seq_lens are new arrays at every step: their checks read each property once, and
    # check_array runs only to raise the error that explains what is wrong.
    if not isinstance(q, GPUArray):
        check_array(q, "q")
    kshape, dtype = _check_caches(k_cache, v_cache)
    qshape, qdtype = q.shape, q.dtype
    if qdtype is not dtype and qdtype != dtype:  # the caches' dtype is a checked one
        check_array(q, "q", dtypes=FLOAT_DTYPES)
        check_same_dtype(q, ("k_cache", k_cache), ("v_cache", v_cache))
    if len(qshape) != 3 or not q.is_contiguous():
        check_array(q, "q", ndim=3)
    _check_aligned(("q", q))
    lens_shape = seq_lens.shape if isinstance(seq_lens, GPUArray) else ()
    if len(lens_shape) != 1 or seq_lens.dtype not in _INT32 or not seq_lens.is_contiguous():
        check_array(seq_lens, "seq_lens", dtypes=_INT32, ndim=1)
    b, hq, d = qshape
    _check_head_dim(d, "q")
    hkv, cache_len = kshape[1], kshape[2]
    if kshape[3] != d:
        raise ValueError(f"k_cache head dim {kshape[3]} differs from q's ({d})")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads ({hq}) must be a multiple of the KV heads ({hkv})")
    if lens_shape[0] != b:
        raise ValueError(f"seq_lens must have shape ({b},), got {lens_shape}")
    max_blocks = 0
    if block_table is None:
        if kshape[0] != b:
            raise ValueError(
                f"a contiguous k_cache must be [B={b}, Hkv, max_len, D], got "
                f"{kshape} (pass block_table for a paged cache)"
            )
        capacity = cache_len
    else:
        tshape = block_table.shape if isinstance(block_table, GPUArray) else ()
        if len(tshape) != 2 or block_table.dtype not in _INT32 or not block_table.is_contiguous():
            check_array(block_table, "block_table", dtypes=_INT32, ndim=2)
        if tshape[0] != b:
            raise ValueError(f"block_table must be [B={b}, max_blocks], got {tshape}")
        max_blocks = tshape[1]
        capacity = max_blocks * cache_len
        if kshape[0] == 0 and capacity > 0:
            # The kernel reads block block_table[b, i] unchecked: with no blocks any length > 0
            # would read outside the cache.
            raise ValueError(
                f"the paged k_cache {kshape} has no blocks but block_table gives "
                f"each sequence {max_blocks} of them; allocate at least one block"
            )
    if capacity >= 2**31:
        raise ValueError(f"the cache holds {capacity} tokens per sequence; at most 2**31 - 1")
    scale_f = 1.0 / math.sqrt(d) if scale is None else _check_scale(scale, d)
    return (b, hq, d), kshape, dtype, max_blocks, capacity, scale_f


def check_decode(
    q: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    seq_lens: GPUArray,
    block_table: GPUArray | None,
    scale: float | None,
) -> tuple[int, int, float]:
    """Validate the decode arguments; return (max_blocks, capacity in tokens, scale)."""
    _, _, _, max_blocks, capacity, scale_f = _decode_args(
        q, k_cache, v_cache, seq_lens, block_table, scale
    )
    return max_blocks, capacity, scale_f


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

    ``q [B, Hq, D]`` (float16 or bfloat16; float32 on the composed path, contiguous caches
    only on the GPU); ``seq_lens`` int32 ``[B]`` on the device (the
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
    to it; a length of 0 gives zeros. Long caches are split across CTAs (flash decoding),
    whose float32 partial results the last CTA of each sequence and head group to finish
    merges, in the same launch (``PYGPUKIT_DECODE_COMBINE=kernel``: a second kernel merges
    them); they take a workspace of ``B * Hq * splits * (D + 1)`` values, made by the first
    such call on a stream and reused by the later ones there. Returns ``[B, Hq, D]``.
    """
    # Every decode step runs this: each array's metadata is read once, and the plan is looked
    # up with the values the checks already hold (see tools/attention_host.py for the costs).
    qshape, kshape, dtype, max_blocks, capacity, scale_f = _decode_args(
        q, k_cache, v_cache, seq_lens, block_table, scale
    )
    if out is None:
        res = gp.empty(qshape, dtype)
    else:
        check_out(out, qshape, dtype)
        res = out
    b, hq, d = qshape
    if b * hq == 0:
        return res
    key = (b, hq, kshape[1], d, dtype, kshape[2], max_blocks, capacity, gp.get_device())
    DECODE_PLANS.get(*key)(q, k_cache, v_cache, seq_lens, block_table, res, scale_f)
    return res

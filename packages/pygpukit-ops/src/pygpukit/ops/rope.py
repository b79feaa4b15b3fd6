"""pygpukit.ops.rope: rotary position embeddings (RoPE), NeoX and GPT-J layouts.

:func:`rope_cos_sin` builds the ``cos`` and ``sin`` tables once per model; :func:`apply_rope`
rotates q and k of a batch of tokens in one kernel launch, each token at its own position
(explicit position ids, so prefill, decode and packed sequences are the same call).

Each pair ``(x0, x1)`` of the first ``rotary_dim`` dimensions of a head becomes
``(x0 cos - x1 sin, x1 cos + x0 sin)`` with angle ``pos * base ** (-2i / rotary_dim)``. The pairs
are ``(i, i + rotary_dim/2)`` in the NeoX layout (Llama, Qwen, Mistral, GPT-NeoX: HF's
``rotate_half``) and ``(2i, 2i+1)`` in the GPT-J layout (GPT-J, ChatGLM, interleaved).
Dimensions past ``rotary_dim`` pass through unchanged (partial rotary: GPT-NeoX, Phi).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import rope as reference

__all__ = ["apply_rope", "rope_cos_sin", "rope_kv_append"]

_LAYOUTS = ("neox", "gptj")
_POSITION_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_TABLE_KIND = {np.dtype(np.float32): 0, np.dtype(gp.float16): 1, np.dtype(gp.bfloat16): 2}


def rope_cos_sin(
    positions: int | Any,
    rotary_dim: int,
    base: float = 10000.0,
    dtype: Any = "float32",
    *,
    inv_freq: Any = None,
    attention_factor: float = 1.0,
) -> tuple[GPUArray, GPUArray]:
    """The ``(cos, sin)`` tables, each ``[P, rotary_dim // 2]``, for :func:`apply_rope`.

    ``positions`` is ``max_positions`` (rows for positions ``0 .. P-1``) or a sequence/array of
    positions (one row each, in that order; ``apply_rope`` then indexes rows by the position ids
    it is given, so pass ``max_positions`` unless you index the rows yourself). Angles
    ``pos * base ** (-2i / rotary_dim)`` are computed in float64 on the host and rounded once
    to ``dtype`` (float32 by default; float16/bfloat16 tables save memory at a small cost in
    precision).

    ``inv_freq`` (``[rotary_dim // 2]``) replaces ``base ** (-2i / rotary_dim)``, and the tables
    are multiplied by ``attention_factor``: both come from :func:`rope_inv_freq` for the
    ``linear``, ``llama3`` and ``yarn`` scalings of long-context models.
    """
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer)):
        raise TypeError(f"rotary_dim must be an int, got {type(rotary_dim).__name__}")
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even number, got {rotary_dim}")
    base = validation.real(base, "base", "rope_cos_sin")
    if not np.isfinite(base) or base <= 0:
        raise ValueError(f"base must be a positive number, got {base!r}")
    dt = np.dtype(gp.dtypes.normalize(dtype))
    if dt not in _TABLE_KIND:
        raise TypeError(f"dtype must be float32, float16 or bfloat16; got {dt}")
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        if positions < 0:
            raise ValueError(f"max_positions must be >= 0, got {positions}")
        pos = np.arange(int(positions), dtype=np.float64)
    else:
        host = positions.to_numpy() if isinstance(positions, GPUArray) else np.asarray(positions)
        if host.ndim != 1 or host.dtype.kind not in "iu":
            raise ValueError(
                f"positions must be an int (max_positions) or a 1-D integer array, got "
                f"{host.dtype} of shape {host.shape}"
            )
        pos = host.astype(np.float64)
    if inv_freq is None:
        freqs = 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    else:
        freqs = np.asarray(inv_freq, dtype=np.float64)
        if freqs.shape != (rotary_dim // 2,) or not np.isfinite(freqs).all():
            raise ValueError(
                f"inv_freq must be {rotary_dim // 2} finite numbers (rotary_dim // 2), got "
                f"shape {freqs.shape}"
            )
    if not np.isfinite(attention_factor) or attention_factor <= 0:
        raise ValueError(f"attention_factor must be a positive number, got {attention_factor!r}")
    angles = np.outer(pos, freqs)
    cos, sin = np.cos(angles) * attention_factor, np.sin(angles) * attention_factor
    return c.to_array(cos, dt), c.to_array(sin, dt)


def _flat(a: GPUArray, name: str) -> tuple[int, int, int]:
    """``(tokens, heads, head_dim)`` of a ``[tokens, heads, D]`` or ``[batch, seq, heads, D]``."""
    if a.ndim == 3:
        return a.shape[0], a.shape[1], a.shape[2]
    if a.ndim == 4:
        return a.shape[0] * a.shape[1], a.shape[2], a.shape[3]
    raise ValueError(f"{name} must be [tokens, heads, head_dim] or [batch, seq, heads, head_dim]")


@dataclass(frozen=True, slots=True)
class RopePlan:
    """The RoPE launch for one shape: ``plan(q, k, q_out, k_out, cos, sin, positions)``."""

    launch: Launch
    tail: tuple[int, ...]  # max_pos, q_heads, kv_heads, head_dim, rotary_dim, flags

    def __call__(self, *arrays: GPUArray) -> None:
        self.launch(*arrays, *self.tail)


@dataclass(frozen=True, slots=True)
class ReferencePlan:
    """The CPU backend's "plan": :func:`.reference.rope.rotate` on the host buffers."""

    tokens: int
    q_heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    max_pos: int
    gptj: bool

    def __call__(self, *arrays: GPUArray) -> None:
        q, k, q_out, k_out, cos, sin, positions = arrays
        pos = reference.table_rows(c.host(positions), self.max_pos)
        cs, sn = c.f32(cos)[pos], c.f32(sin)[pos]
        for src, dst, h in ((q, q_out, self.q_heads), (k, k_out, self.kv_heads)):
            x = c.f32(src).reshape(self.tokens, h, self.head_dim)
            y = reference.rotate(x, cs, sn, self.rotary_dim, self.gptj)
            c.write_into(dst, y.reshape(src.shape))


def _plan_cuda(*key: Any) -> RopePlan | ReferencePlan:
    tokens, q_heads, kv_heads, head_dim, rd, max_pos, flags, dtype, _device = key
    # The kernel loops over (q_heads + kv_heads) * head_dim / 2 pairs of a token in an int.
    c.check_int32("apply_rope", heads_times_head_dim=(q_heads + kv_heads) * head_dim)
    pairs = (q_heads + kv_heads) * (rd // 2)
    block = min(256, max(32, -(-pairs // 32) * 32))
    kernel = kl.kernel("rope", f"rope_{c.kernel_suffix(dtype)}")
    return RopePlan(
        Launch(kernel, tokens, block), (max_pos, q_heads, kv_heads, head_dim, rd, flags)
    )


def _plan_numpy(*key: Any) -> RopePlan | ReferencePlan:
    tokens, q_heads, kv_heads, head_dim, rd, max_pos, flags, _dtype, _device = key
    return ReferencePlan(tokens, q_heads, kv_heads, head_dim, rd, max_pos, bool(flags & 2))


#: RoPE plans by (tokens, q_heads, kv_heads, head_dim, rotary_dim, max_positions, flags, dtype,
#: device).
PLANS: PlanCache[RopePlan | ReferencePlan] = PlanCache(
    "rope", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def rope_flags(positions_dtype: np.dtype[Any], gptj: bool, inplace: bool, table: np.dtype) -> int:
    """The kernel's flag word: int64 positions, GPT-J layout, out of place, table dtype."""
    return (
        (1 if positions_dtype == np.int64 else 0)
        | (2 if gptj else 0)
        | (0 if inplace else 4)
        | (_TABLE_KIND[table] << 4)
    )


def check_rope(
    q: Any, k: Any, cos: Any, sin: Any, positions: Any, layout: str, rotary_dim: int | None
) -> tuple[int, int, int, int, int, int]:
    """Validate :func:`apply_rope`'s arguments.

    Returns ``(tokens, q_heads, kv_heads, head_dim, rotary_dim, max_positions)``.
    """
    validation.choice(layout, tuple(_LAYOUTS), "layout", "apply_rope")
    q = c.check_array(q, "q", dtypes=c.FLOAT_DTYPES, ndim=(3, 4))
    k = c.check_array(k, "k", dtypes=c.FLOAT_DTYPES, ndim=(3, 4))
    c.check_same_dtype(q, ("k", k))
    cos = c.check_array(cos, "cos", dtypes=list(_TABLE_KIND), ndim=2)
    sin = c.check_array(sin, "sin", dtypes=list(_TABLE_KIND), ndim=2)
    if cos.dtype not in (np.dtype(np.float32), q.dtype):
        raise TypeError(f"cos must be float32 or {q.dtype} like q; got {cos.dtype}")
    c.check_same_dtype(cos, ("sin", sin))
    c.check_shape(sin, "sin", cos.shape)
    positions = c.check_array(positions, "positions", dtypes=_POSITION_DTYPES)
    tokens, q_heads, head_dim = _flat(q, "q")
    _, kv_heads, k_dim = _flat(k, "k")
    if q.ndim != k.ndim or q.shape[:-2] != k.shape[:-2] or k_dim != head_dim:
        raise ValueError(
            f"k {k.shape} must match q {q.shape} in its leading dimensions and head_dim"
        )
    c.check_shape(positions, "positions", q.shape[:-2])
    max_pos, half = cos.shape
    if rotary_dim is not None and (
        isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer))
    ):
        raise TypeError(f"rotary_dim must be an int or None, got {type(rotary_dim).__name__}")
    rd = 2 * half if rotary_dim is None else int(rotary_dim)
    if rd <= 0 or rd % 2 or rd > head_dim:
        raise ValueError(f"rotary_dim must be even and in [2, head_dim={head_dim}], got {rd}")
    if rd // 2 != half:
        raise ValueError(
            f"cos/sin have width {half} but rotary_dim is {rd}: the tables must be built "
            f"for rotary_dim (rope_cos_sin(P, {rd}))"
        )
    return tokens, q_heads, kv_heads, head_dim, rd, max_pos


def apply_rope(
    q: GPUArray,
    k: GPUArray,
    cos: GPUArray,
    sin: GPUArray,
    positions: GPUArray,
    *,
    layout: str = "neox",
    rotary_dim: int | None = None,
    inplace: bool = False,
) -> tuple[GPUArray, GPUArray]:
    """Rotate ``q`` and ``k`` by the angles of each token's position; returns ``(q, k)``.

    ``q`` is ``[tokens, q_heads, head_dim]`` and ``k`` ``[tokens, kv_heads, head_dim]`` (or both
    with a leading batch dimension, ``[batch, seq, heads, head_dim]``), float32, float16 or
    bfloat16, C-contiguous. ``cos``/``sin`` are :func:`rope_cos_sin` tables
    ``[max_positions, rotary_dim // 2]`` (float32 or q's dtype); ``positions`` holds one int32
    or int64 position per token (``[tokens]``, or ``[batch, seq]``). ``layout`` is ``"neox"``
    (pairs ``(i, i + rotary_dim/2)``) or ``"gptj"`` (pairs ``(2i, 2i+1)``). ``rotary_dim``
    (default: twice the table width) rotates the first ``rotary_dim`` dimensions of each head
    and passes the rest through. ``inplace=True`` writes into ``q`` and ``k`` and returns them;
    otherwise new arrays. Math in float32, rounded once.

    Positions outside ``[0, max_positions)`` raise ``ValueError`` on the CPU backend; on the GPU
    (where checking would need a synchronisation) such a token is passed through unrotated.
    """
    inplace = validation.boolean(inplace, "inplace", "apply_rope")
    tokens, q_heads, kv_heads, head_dim, rd, max_pos = check_rope(
        q, k, cos, sin, positions, layout, rotary_dim
    )
    gptj = layout == "gptj"
    if inplace:
        c.check_writeable(q, "q (inplace=True)")
        c.check_writeable(k, "k (inplace=True)")
    q_out = q if inplace else gp.empty(q.shape, q.dtype)
    k_out = k if inplace else gp.empty(k.shape, k.dtype)

    if tokens == 0:
        return q_out, k_out
    flags = rope_flags(positions.dtype, gptj, inplace, cos.dtype)
    key = (tokens, q_heads, kv_heads, head_dim, rd, max_pos, flags, q.dtype, gp.get_device())
    PLANS.get(*key)(q, k, q_out, k_out, cos, sin, positions)
    return q_out, k_out


@dataclass(frozen=True, slots=True)
class RopeKVPlan:
    """The fused launch: ``plan(qkv, q_out, k_cache, v_cache, cos, sin, positions, slots)``.

    ``vector`` (16-byte accesses) runs when the four row arrays start on 16-byte boundaries,
    ``launch`` (one element an access) otherwise; ``vector`` is None where the head's halves
    are not whole 16-byte vectors.
    """

    launch: Launch
    vector: Launch | None
    tail: tuple[int, ...]  # max_pos, q_heads, kv_heads, head_dim, seq, max_len, table kind

    def __call__(self, *arrays: GPUArray) -> None:
        launch = self.launch
        if self.vector is not None and not any(a.data_ptr % 16 for a in arrays[:4]):
            launch = self.vector
        launch(*arrays, *self.tail)


@dataclass(frozen=True, slots=True)
class ReferenceRopeKVPlan:
    """The CPU backend's "plan": NumPy rotation, then the cache rows written one by one."""

    batch: int
    seq: int
    q_heads: int
    kv_heads: int
    head_dim: int
    max_pos: int

    def __call__(self, *arrays: GPUArray) -> None:
        qkv, q_out, k_cache, v_cache, cos, sin, positions, slots = arrays
        tokens, hq, hkv, d = self.batch * self.seq, self.q_heads, self.kv_heads, self.head_dim
        pos = reference.table_rows(c.host(positions), self.max_pos)
        cs, sn = c.f32(cos)[pos], c.f32(sin)[pos]
        x = c.f32(qkv).reshape(tokens, hq + 2 * hkv, d)
        c.write_into(q_out, reference.rotate(x[:, :hq], cs, sn, d, False).reshape(q_out.shape))
        k = reference.rotate(x[:, hq : hq + hkv], cs, sn, d, False)
        v = x[:, hq + hkv :]
        kc, vc = c.host(k_cache), c.host(v_cache)
        for t, slot in enumerate(c.host(slots).reshape(-1).tolist()):
            if 0 <= slot < kc.shape[2]:  # out of the cache: stored nowhere, as on the GPU
                b = t // self.seq
                kc[b, :, slot] = k[t].astype(kc.dtype)
                vc[b, :, slot] = v[t].astype(vc.dtype)


def _plan_kv_cuda(*key: Any) -> RopeKVPlan | ReferenceRopeKVPlan:
    batch, seq, q_heads, kv_heads, head_dim, max_pos, max_len, kind, dtype, _device = key
    c.check_int32(
        "rope_kv_append",
        row_width=(q_heads + 2 * kv_heads) * head_dim,
        tokens=batch * seq,
        max_len=max_len,
    )
    pairs = (q_heads + kv_heads) * (head_dim // 2)
    block = min(256, max(32, -(-pairs // 32) * 32))
    suffix = c.kernel_suffix(dtype)
    kernel = kl.kernel("rope", f"rope_kv_append_{suffix}")
    vector = None
    vec = 16 // np.dtype(dtype).itemsize
    if (head_dim // 2) % vec == 0:
        # One thread per VEC pairs of a q/k head or VEC elements of a v head: a block of
        # threads covers the token in one pass (448 for 32/8 heads of 128 in bfloat16).
        items = (q_heads + kv_heads) * (head_dim // 2) // vec + kv_heads * head_dim // vec
        threads = min(512, max(32, -(-items // 32) * 32))
        vector = Launch(kl.kernel("rope", f"rope_kv_append_vec_{suffix}"), batch * seq, threads)
    return RopeKVPlan(
        Launch(kernel, batch * seq, block),
        vector,
        (max_pos, q_heads, kv_heads, head_dim, seq, max_len, kind),
    )


def _plan_kv_numpy(*key: Any) -> RopeKVPlan | ReferenceRopeKVPlan:
    batch, seq, q_heads, kv_heads, head_dim, max_pos, _max_len, _kind, _dtype, _device = key
    return ReferenceRopeKVPlan(batch, seq, q_heads, kv_heads, head_dim, max_pos)


#: Fused RoPE + cache-append plans by (batch, seq, q_heads, kv_heads, head_dim, max_positions,
#: max_len, table kind, dtype, device).
KV_PLANS: PlanCache[RopeKVPlan | ReferenceRopeKVPlan] = PlanCache(
    "rope_kv_append", per_backend(cpu=_plan_kv_numpy, cuda=_plan_kv_cuda)
)


class QkvRope(NamedTuple):
    """A fused q/k/v RoPE step's checked arguments (see :func:`_check_qkv_rope`)."""

    qkv: GPUArray
    cos: GPUArray
    sin: GPUArray
    k_cache: GPUArray
    v_cache: GPUArray
    kv_heads: int
    head_dim: int
    max_pos: int
    table_kind: int


def _check_qkv_rope(
    op: str,
    qkv: GPUArray,
    cos: GPUArray,
    sin: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    *,
    q_heads: int,
    qkv_ndim: int | None,
    qkv_lead: str,
    cache_layout: str,
    layout_fits: Callable[[tuple[int, ...], tuple[int, ...]], bool],
) -> QkvRope:
    """The checks every fused split-rotate-store op shares; the cache layout is the caller's.

    ``qkv`` is ``[<qkv_lead>, (q_heads + 2 * kv_heads) * D]`` (``qkv_ndim`` dimensions, any when
    None); the caches are 4-D, writeable, of qkv's dtype, with ``kv_heads`` at dimension 1 and an
    even ``D`` at dimension 3; ``cos``/``sin`` are whole-head tables ``[P, D / 2]`` (float32 or
    qkv's dtype). ``layout_fits(qkv.shape, k_cache.shape)`` is the caller's own cache-layout
    rule; ``cache_layout`` names that layout in the error. ``q_heads`` is already validated.
    """
    qkv = c.check_array(qkv, "qkv", dtypes=c.FLOAT_DTYPES, ndim=qkv_ndim)
    k_cache = c.check_array(k_cache, "k_cache", dtypes=c.FLOAT_DTYPES, ndim=4)
    v_cache = c.check_array(v_cache, "v_cache", dtypes=c.FLOAT_DTYPES, ndim=4)
    c.check_same_dtype(qkv, ("k_cache", k_cache), ("v_cache", v_cache))
    c.check_shape(v_cache, "v_cache", k_cache.shape)
    c.check_writeable(k_cache, "k_cache")
    c.check_writeable(v_cache, "v_cache")
    kv_heads, d = k_cache.shape[1], k_cache.shape[3]
    width = qkv.shape[-1] if qkv.ndim else -1
    if (
        qkv.ndim < 1
        or d % 2
        or width != (q_heads + 2 * kv_heads) * d
        or not layout_fits(qkv.shape, k_cache.shape)
    ):
        raise ValueError(
            f"qkv {tuple(qkv.shape)} must be [{qkv_lead}, (q_heads + 2 * kv_heads) * D] with "
            f"q_heads={q_heads}, and the caches {cache_layout} with an even D; got caches "
            f"{tuple(k_cache.shape)}"
        )
    cos = c.check_array(cos, "cos", dtypes=list(_TABLE_KIND), ndim=2)
    sin = c.check_array(sin, "sin", dtypes=list(_TABLE_KIND), ndim=2)
    if cos.dtype not in (np.dtype(np.float32), qkv.dtype):
        raise TypeError(f"cos must be float32 or {qkv.dtype} like qkv; got {cos.dtype}")
    c.check_same_dtype(cos, ("sin", sin))
    c.check_shape(sin, "sin", cos.shape)
    max_pos, half = cos.shape
    if half != d // 2:
        raise ValueError(
            f"cos/sin have width {half} but the heads have D = {d}: {op} rotates the whole "
            f"head, so the tables must be rope_cos_sin(P, {d})"
        )
    return QkvRope(qkv, cos, sin, k_cache, v_cache, kv_heads, d, max_pos, _TABLE_KIND[cos.dtype])


def rope_kv_append(
    qkv: GPUArray,
    cos: GPUArray,
    sin: GPUArray,
    positions: GPUArray,
    k_cache: GPUArray,
    v_cache: GPUArray,
    slots: GPUArray,
    *,
    q_heads: int,
    out: GPUArray | None = None,
) -> GPUArray:
    """Split a fused q/k/v projection, rotate q and k, and append k and v to a cache: one launch.

    ``qkv`` is ``[B, T, (q_heads + 2 * kv_heads) * D]`` (each token's q heads, then k heads, then
    v heads: the output of a fused q/k/v weight), float32, float16 or bfloat16, C-contiguous;
    ``k_cache`` and ``v_cache`` are ``[B, kv_heads, max_len, D]`` of the same dtype (they give
    ``kv_heads`` and ``D``); ``cos``/``sin`` are :func:`rope_cos_sin` tables ``[P, D / 2]``
    (float32 or qkv's dtype; the whole head rotates, NeoX layout); ``positions`` (the RoPE
    angle row) and ``slots`` (the cache row) are int32 ``[B, T]`` on the device.

    Returns the rotated queries ``[B, T, q_heads, D]`` (into ``out`` when given). Rotated keys
    and the values land at ``k_cache[b, :, slots[b, t]]`` / ``v_cache[b, :, slots[b, t]]``; a
    slot outside ``[0, max_len)`` is not stored. The values are those of slicing ``qkv``,
    :func:`apply_rope` and :func:`~pygpukit.ops.kv_cache_append` with per-token positions
    ``slots``, in one kernel instead of up to five (three copies when ``T > 1``, RoPE, the
    append): a decode step's launches are what bound small models. Positions outside ``[0, P)``
    raise ``ValueError`` on the CPU backend; on the GPU such a token is not rotated (as
    :func:`apply_rope`).
    """
    q_heads = validation.size(q_heads, "q_heads", "rope_kv_append", minimum=1)
    qkv, cos, sin, k_cache, v_cache, kv_heads, d, max_pos, kind = _check_qkv_rope(
        "rope_kv_append", qkv, cos, sin, k_cache, v_cache, q_heads=q_heads, qkv_ndim=3,
        qkv_lead="B, T", cache_layout="[B, kv_heads, max_len, D] (one cache row per sequence)",
        layout_fits=lambda qkv_shape, cache_shape: cache_shape[0] == qkv_shape[0],
    )  # fmt: skip
    b, t, _ = qkv.shape
    max_len = k_cache.shape[2]
    positions = c.check_array(positions, "positions", dtypes=[np.int32], ndim=2)
    slots = c.check_array(slots, "slots", dtypes=[np.int32], ndim=2)
    c.check_shape(positions, "positions", (b, t))
    c.check_shape(slots, "slots", (b, t))
    shape = (b, t, q_heads, d)
    c.check_out(out, shape, qkv.dtype)
    q = c.result(out, shape, qkv.dtype)
    if b * t == 0:
        return q
    key = (b, t, q_heads, kv_heads, d, max_pos, max_len, kind, qkv.dtype, gp.get_device())
    KV_PLANS.get(*key)(qkv, q, k_cache, v_cache, cos, sin, positions, slots)
    return q

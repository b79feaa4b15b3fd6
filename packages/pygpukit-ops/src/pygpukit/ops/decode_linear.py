"""The GEMVs of a one-token decode layer with their neighbours fused in: one launch each.

At batch 1 a small model's layer is bound by kernel launches, not by its weight bytes, so
:func:`decode_linear` folds the small ops around each GEMV into it:

- a **prologue**: ``norm_weight`` given, ``x`` is the residual stream and is RMS-normalised
  first (every block recomputes the row's sum of squares: the row is a few KB);
- a **gather**: ``gather_ids`` given, ``x`` is an embedding table ``[V, K]`` and the row is
  ``x[gather_ids[0]]``, also stored into ``gather_out`` (the step's embedding lookup, which
  starts the residual stream, folded into the layer's first GEMV; needs the norm prologue);
- an **epilogue**: ``epilogue=None`` stores ``x @ weight.T + bias`` (optionally float32,
  unrounded: logits), ``"residual"`` adds it into ``residual`` in place, ``"swiglu"`` returns
  ``silu(gate) * up`` of a fused gate/up weight (gate rows first), ``"rope_kv"`` treats the result
  as a fused q/k/v projection: q rotated into the result, k rotated and v appended to the cache
  at ``position % capacity`` (:class:`RopeKV`).

A decoder layer is then four launches plus the attention (docs/llm-performance.md). The values
are those of the unfused composition (:func:`rmsnorm`, :func:`gemv` / :func:`linear`, the add,
:func:`silu_mul`, :func:`rope_kv_append`): each stage rounds to the storage dtype where the
unfused kernels store; only the norm's float32 sum of squares is accumulated in another order.

On the CUDA backend with float16/bfloat16, ``K % 8 == 0`` and 16-byte aligned arrays, one kernel
(``kernels/decode_linear.cu``) runs; it is launched with programmatic dependent launch (its
weight loads start while the previous kernel drains) for weights up to 24 MiB, unless
``PYGPUKIT_DEPENDENT_LAUNCH=off``.
Otherwise, and on the CPU backend, the composition of those ops runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._constants import constant
from ._plan import Launch, PlanCache, per_backend
from .activations import embedding, silu_mul
from .linear import check_no_overlap, gemv, linear
from .normalization import rmsnorm
from .reference import activations as ref_act
from .reference import linear as ref_linear
from .reference import normalization as ref_norm
from .reference import rope as ref_rope
from .rope import rope_kv_append

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+; annotations are not evaluated at run time
    from typing_extensions import Unpack

__all__ = [
    "EPILOGUES",
    "BoundDecodeLinear",
    "DecodeLinearOptions",
    "RopeKV",
    "bind_decode_linear",
    "decode_linear",
]

#: Epilogue names and their codes in the kernel.
EPILOGUES: dict[str | None, int] = {None: 0, "residual": 1, "swiglu": 2, "rope_kv": 3}
_TABLE_KIND = {np.dtype(np.float32): 0, np.dtype(gp.float16): 1, np.dtype(gp.bfloat16): 2}
#: Largest weight (bytes) launched with programmatic dependent launch (see ``_plan``).
_PDL_MAX_BYTES = 24 << 20
#: Largest shared-memory row the norm prologue stages (the default 48 KiB per block).
_MAX_STAGED_BYTES = 48 * 1024


@dataclass(frozen=True)
class RopeKV:
    """What the ``"rope_kv"`` epilogue needs besides the projection.

    ``cos``/``sin``: :func:`rope_cos_sin` tables ``[P, D / 2]`` (the whole head rotates, NeoX);
    ``position``: int32 ``[1]`` on the device (the token's position: the RoPE angle, and the
    cache slot ``position % capacity``); ``k_cache``/``v_cache``: ``[1, kv_heads, capacity,
    D]``; ``q_heads``: query heads (the projection is ``(q_heads + 2 kv_heads) * D`` rows).
    """

    cos: GPUArray
    sin: GPUArray
    position: GPUArray
    k_cache: GPUArray
    v_cache: GPUArray
    q_heads: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(q_heads, kv_heads, head_dim, capacity)``."""
        _, hkv, cap, d = self.k_cache.shape
        return self.q_heads, hkv, d, cap


@dataclass(frozen=True)
class Gather:
    """The ``gather_ids`` / ``gather_out`` pair: ``x`` is a table, its row ``ids[0]`` is used."""

    ids: GPUArray
    out: GPUArray


def _check_gather(x: GPUArray, gather: Gather, norm_weight: GPUArray | None) -> None:
    c.check_array(x, "x (the table)", dtypes=c.FLOAT_DTYPES, ndim=2)
    c.check_array(gather.ids, "gather_ids", dtypes=[np.int32])
    if gather.ids.size != 1:
        raise ValueError(f"gather_ids must hold one int32 id, got shape {gather.ids.shape}")
    c.check_array(gather.out, "gather_out", dtypes=[x.dtype])
    if gather.out.size != x.shape[1]:
        raise ValueError(f"gather_out must hold a row of {x.shape[1]}, got {gather.out.shape}")
    c.check_writeable(gather.out, "gather_out")
    check_no_overlap(gather.out, ("x", x))
    if norm_weight is None:
        raise ValueError("gather_ids needs norm_weight= (the gathered row is normalised)")


class FusedShapeRule(Protocol):
    """What the fused decode GEMV ops' argument checks do not share: the shapes of x's rows.

    :func:`_check_fused` runs ``check_x`` first, then the checks every op shares, then
    ``check_rows`` with the weight's ``N`` and ``K``.
    """

    @property
    def swiglu_multiple(self) -> int:
        """``epilogue="swiglu"`` needs ``N`` a multiple of this (the kernel's read width)."""
        ...

    def check_x(self, x: GPUArray) -> None:
        """The dtype and rank of ``x``."""
        ...

    def check_rows(
        self, x: GPUArray, weight: GPUArray, n: int, k: int, residual: GPUArray | None, rope_kv: Any
    ) -> None:
        """The ``K`` of ``x``, the residual's shape and ``rope_kv``'s positions and cache layout."""
        ...


def _check_fused(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    norm_weight: GPUArray | None,
    epilogue: str | None,
    residual: GPUArray | None,
    rope_kv: RopeKV | Any | None,
    rule: FusedShapeRule,
) -> tuple[int, int]:
    """Check a :func:`decode_linear` or ``decode_linear_rows`` call; returns ``(N, K)``.

    Shared: the weight and its bias and norm weight (x's dtype), the epilogue name and the
    pairing of ``residual`` / ``rope_kv`` with it, the residual's dtype, writability and
    independence of ``x`` and the weight, the SwiGLU halves and the q/k/v projection width of
    ``rope_kv`` (a :class:`RopeKV` or a paged one: anything with ``shape``, ``k_cache``,
    ``v_cache`` and ``cos``). The op's ``rule`` checks x, the residual's shape and ``rope_kv``'s
    positions and caches.
    """
    rule.check_x(x)
    c.check_array(weight, "weight", dtypes=c.FLOAT_DTYPES, ndim=2)
    c.check_same_dtype(x, ("weight", weight), ("bias", bias), ("norm_weight", norm_weight))
    n, k = weight.shape
    if bias is not None:
        c.check_array(bias, "bias", ndim=1)
        c.check_shape(bias, "bias", (n,))
    if norm_weight is not None:
        c.check_array(norm_weight, "norm_weight", ndim=1)
        c.check_shape(norm_weight, "norm_weight", (k,))
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {list(EPILOGUES)}, got {epilogue!r}")
    if (epilogue == "residual") != (residual is not None):
        raise ValueError("epilogue='residual' needs residual= (and only it takes one)")
    if (epilogue == "rope_kv") != (rope_kv is not None):
        raise ValueError("epilogue='rope_kv' needs rope_kv= (and only it takes one)")
    if residual is not None:
        c.check_array(residual, "residual", dtypes=[x.dtype])
        c.check_writeable(residual, "residual")
        check_no_overlap(residual, ("x", x), ("weight", weight))
    if epilogue == "swiglu" and n % rule.swiglu_multiple:
        raise ValueError(
            f"epilogue='swiglu' needs gate and up halves: an even N (a multiple of "
            f"{rule.swiglu_multiple}), got {n}"
        )
    if rope_kv is not None:
        hq, hkv, d, _ = rope_kv.shape
        c.check_same_dtype(x, ("k_cache", rope_kv.k_cache), ("v_cache", rope_kv.v_cache))
        if n != (hq + 2 * hkv) * d or rope_kv.cos.shape[1] != d // 2:
            raise ValueError(
                f"weight has {n} rows; a q/k/v projection of {hq} + 2 x {hkv} heads of {d} "
                f"needs {(hq + 2 * hkv) * d}, and cos/sin of width {d // 2}"
            )
    rule.check_rows(x, weight, n, k, residual, rope_kv)
    return n, k


@dataclass(frozen=True, slots=True)
class _OneRow:
    """:func:`decode_linear`'s rule: one row of x (``[K]`` or ``[1, K]``) or a gathered row."""

    gather: Gather | None
    norm_weight: GPUArray | None
    swiglu_multiple: int = 2

    def check_x(self, x: GPUArray) -> None:
        """A float row, or a table when gathering."""
        if self.gather is not None:
            _check_gather(x, self.gather, self.norm_weight)
            return
        c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=(1, 2))
        if x.ndim == 2 and x.shape[0] != 1:
            raise ValueError(f"decode_linear takes one row of x ([K] or [1, K]), got {x.shape}")

    def check_rows(
        self,
        x: GPUArray,
        weight: GPUArray,
        n: int,
        k: int,
        residual: GPUArray | None,
        rope_kv: RopeKV | None,
    ) -> None:
        """K features, N residual values, one position and single-sequence caches."""
        if x.shape[-1] != k:
            raise ValueError(f"x has {x.shape[-1]} features but weight is {tuple(weight.shape)}")
        if residual is not None:
            if residual.size != n:
                raise ValueError(f"residual must hold the N = {n} outputs, got {residual.shape}")
            if self.gather is not None:
                check_no_overlap(self.gather.out, ("residual", residual))
        if rope_kv is not None:
            c.check_array(rope_kv.position, "position", dtypes=[np.int32])
            if rope_kv.position.size != 1 or rope_kv.k_cache.shape[0] != 1 or rope_kv.shape[2] % 2:
                raise ValueError(
                    "rope_kv takes one int32 position and [1, Hkv, capacity, D] caches"
                )


def _out_shape(
    x: GPUArray, n: int, epilogue: str | None, rope_kv: RopeKV | None, gather: Gather | None
) -> tuple:
    width = n // 2 if epilogue == "swiglu" else n
    if rope_kv is not None:
        width = rope_kv.q_heads * rope_kv.shape[2]
    row = gather.out if gather is not None else x  # a gathered row has gather_out's shape
    return (width,) if row.ndim == 1 else (1, width)


@dataclass(frozen=True, slots=True)
class FusedPlan:
    """The one-kernel launch: ``plan(*args)`` enqueues it."""

    launch: Launch
    dependent: bool  # programmatic dependent launch

    def __call__(self, *args: Any) -> None:
        launch = self.launch
        launch.kernel.launch(launch.grid, launch.block, args, shared_mem=launch.shared_mem,
                             dependent=self.dependent)  # fmt: skip


#: The kernel entry point by output rows per warp (each with as many loads in flight per lane).
_ENTRY_BY_ROWS = {4: "decode_linear", 2: "decode_linear_r2", 1: "decode_linear_r1"}
#: Rows per warp by GEMV kind ("paired": the RoPE and SwiGLU epilogues, "plain": the others);
#: None lets the shape decide (:func:`rows_per_warp`). A row's sum is the same bits for every
#: choice; only how many warps stream the weight changes. Read when a call is planned.
ROWS_PER_WARP: dict[str, int | None] = {"paired": None, "plain": None}
#: Whether rows of ``K <= DECODE_LINEAR_SHORT_MAX_K`` (1024) with 4 rows a warp run
#: ``decode_linear_short`` (every chunk loaded before waiting for the previous kernel, one pass;
#: see :func:`_one_pass`). Read when a call is planned; the bits are the same either way.
ONE_PASS = False
#: Plain GEMVs of a small model with at most this many rows get one row a warp.
FEW_ROWS = 2048


def rows_per_warp(n: int, k: int, pair: int, itemsize: int = 2) -> int:
    """Output rows per warp of the fused kernel for an ``[n, k]`` weight (4, 2 or 1).

    Paired epilogues take 4 or 2 (a warp finishes whole pairs); 1 needs an unpaired one. By
    default, for a GEMV launched with dependent launch (a small model's): paired ones take 2 and
    plain ones of at most FEW_ROWS rows (o_proj and down) 1, which took Qwen2.5-0.5B from 1381 to
    1572 tok/s and SmolLM2-135M from 1992 to 2139 on an H200 (docs/llm-performance.md); larger
    GEMVs (an 8B model's) keep 4.
    """
    chosen = ROWS_PER_WARP["paired" if pair else "plain"]
    if chosen is not None:
        if chosen not in _ENTRY_BY_ROWS or (pair and (chosen == 1 or pair % (chosen // 2))):
            raise ValueError(f"no fused decode GEMV with {chosen} rows per warp for pair={pair}")
        return chosen
    if n * k * itemsize > _PDL_MAX_BYTES:
        return 4
    if pair:
        return 2
    return 1 if n <= FEW_ROWS else 4


def _one_pass(k: int, rows: int) -> bool:
    """Whether the call runs the one-pass kernel (4 rows a warp, rows of at most 1024).

    Off unless ``ONE_PASS`` says so: with 4 rows a warp everywhere it ran SmolLM2-135M at 2214
    tok/s (the default layouts: 2139) but Qwen2.5-0.5B at 1470 (1572), on an H200.
    """
    fits = rows == 4 and k <= constant("decode_linear", "DECODE_LINEAR_SHORT_MAX_K")
    return fits and ONE_PASS


def _plan(
    n: int, k: int, dtype: np.dtype, norm: bool, pair: int, rows: int, one_pass: bool, device: int
) -> FusedPlan:
    warps = constant("decode_linear", "DECODE_LINEAR_WARPS")
    c.check_int32("decode_linear", N=n, K=k)
    entry = "decode_linear_short" if one_pass else _ENTRY_BY_ROWS[rows]
    kernel = kl.kernel("decode_linear", f"{entry}_{c.kernel_suffix(dtype)}")
    grid = max(1, -(-n // (warps * rows)))
    shared = k * dtype.itemsize if norm else 0
    # Dependent launch pays off where a GEMV is short (its launch and ramp are a large part of
    # it); on an H200 a 50 MB q/k/v GEMV (Llama-8B) ran 25% slower with it, back to back, while
    # every GEMV of SmolLM2-135M and Qwen2.5-0.5B (up to 17 MB) ran faster.
    dependent = config.get().dependent_launch == "on" and n * k * dtype.itemsize <= _PDL_MAX_BYTES
    return FusedPlan(Launch(kernel, grid, warps * 32, shared), dependent)


#: Fused launches by (N, K, dtype, norm prologue, pair offset, rows per warp, one pass, device).
PLANS: PlanCache[FusedPlan] = PlanCache("decode_linear", _plan)


def _fusable(
    x: GPUArray,
    weight: GPUArray,
    k: int,
    norm_weight: GPUArray | None,
    pair: int,
    gather: Gather | None,
) -> bool:
    """Whether the fused kernel takes this call (on the GPU)."""
    if x.dtype not in c.HALF_DTYPES or k % 8 or k == 0 or pair % 2:
        return False
    if gather is not None and gather.out.data_ptr % 16:
        return False
    if norm_weight is not None and (
        norm_weight.data_ptr % 16 or k * x.dtype.itemsize > _MAX_STAGED_BYTES
    ):
        return False
    return x.data_ptr % 16 == 0 and weight.data_ptr % 16 == 0


def _composed(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    norm_weight: GPUArray | None,
    eps: float,
    epilogue: str | None,
    residual: GPUArray | None,
    rope_kv: RopeKV | None,
    y: GPUArray,
    f32: bool,
    gather: Gather | None,
) -> None:
    """The unfused ops, one after the other: shapes the kernel does not take, on the GPU."""
    if gather is not None:
        x = embedding(gather.ids.reshape(1), x, out=gather.out.reshape(1, -1))
    row = x.reshape(1, -1)
    if norm_weight is not None:
        row = rmsnorm(row, norm_weight, eps)
    if f32:
        gemv(row, weight, out=y.reshape(1, -1), out_dtype=gp.float32)
        return
    if epilogue is None:
        linear(row, weight, bias, out=y.reshape(1, -1))
        return
    proj = linear(row, weight, bias)
    if epilogue == "residual":
        assert residual is not None
        flat = residual.reshape(1, -1)
        gp.add(proj, flat, out=flat)
    elif epilogue == "swiglu":
        silu_mul(proj, out=y.reshape(1, -1))
    else:
        assert rope_kv is not None
        hq, _, d, cap = rope_kv.shape
        slot = gp.remainder(rope_kv.position.reshape(1, 1), cap)
        rope_kv_append(
            proj.reshape(1, 1, -1), rope_kv.cos, rope_kv.sin, rope_kv.position.reshape(1, 1),
            rope_kv.k_cache, rope_kv.v_cache, slot, q_heads=hq, out=y.reshape(1, 1, hq, d),
        )  # fmt: skip


def _numpy(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    norm_weight: GPUArray | None,
    eps: float,
    epilogue: str | None,
    residual: GPUArray | None,
    rope_kv: RopeKV | None,
    y: GPUArray,
    f32: bool,
    gather: Gather | None,
) -> None:
    """The CPU backend: the references of the unfused ops, rounding where they store."""
    dtype = x.dtype
    if gather is not None:  # an id outside the table is a row of zeros, as on the GPU
        table, i = c.host(x), int(c.host(gather.ids).reshape(-1)[0])
        picked = table[i] if 0 <= i < table.shape[0] else np.zeros(table.shape[1], table.dtype)
        c.host(gather.out).reshape(-1)[...] = picked
        x = gather.out
    row = c.f32(x).reshape(1, -1)
    if norm_weight is not None:
        row = ref_norm.norm(row, c.f32(norm_weight), None, eps, False, dtype).astype(np.float32)
    b = None if bias is None else c.host(bias)
    prod = ref_linear.linear(row, c.host(weight), b, None).reshape(-1)
    if f32 or epilogue is None:
        c.write_into(y, prod.reshape(y.shape))
        return
    stored = prod.astype(dtype).astype(np.float32)  # the unfused GEMV's output
    if epilogue == "residual":
        assert residual is not None
        res = c.host(residual)
        res[...] = (stored.reshape(res.shape) + res.astype(np.float32)).astype(dtype)
    elif epilogue == "swiglu":
        c.write_into(y, ref_act.gated(stored, "silu").reshape(y.shape))
    else:
        assert rope_kv is not None
        hq, hkv, d, cap = rope_kv.shape
        pos = int(c.host(rope_kv.position).reshape(-1)[0])
        max_pos = rope_kv.cos.shape[0]
        inside = 0 <= pos < max_pos  # outside: angle 0, as the kernel
        cs = c.f32(rope_kv.cos)[pos][None] if inside else np.ones((1, d // 2), np.float32)
        sn = c.f32(rope_kv.sin)[pos][None] if inside else np.zeros((1, d // 2), np.float32)
        heads = stored.reshape(1, hq + 2 * hkv, d)
        c.write_into(y, ref_rope.rotate(heads[:, :hq], cs, sn, d, False).reshape(y.shape))
        k = ref_rope.rotate(heads[:, hq : hq + hkv], cs, sn, d, False)[0]
        slot = pos % cap
        c.host(rope_kv.k_cache)[0, :, slot] = k.astype(dtype)
        c.host(rope_kv.v_cache)[0, :, slot] = heads[0, hq + hkv :].astype(dtype)


class BoundDecodeLinear:
    """A :func:`decode_linear` call with its arrays bound: ``bound()`` enqueues it again.

    Validated and planned once (:func:`bind_decode_linear`); a call enqueues the fused kernel
    with the same arguments, so a decode loop re-running it pays no checks or lookups. The
    arrays are read at each call (their contents may change; they must stay alive).
    """

    __slots__ = ("_args", "_plan", "_run", "result")

    def __init__(self, result: GPUArray, plan: FusedPlan | None, args: tuple[Any, ...],
                 run: Any) -> None:  # fmt: skip
        self.result = result
        self._plan, self._args, self._run = plan, args, run

    @property
    def fused(self) -> bool:
        """Whether the call is the one fused kernel (else the unfused ops run, or NumPy)."""
        return self._plan is not None

    def __call__(self) -> GPUArray:
        """Enqueue the call; returns its result array (the residual for ``"residual"``)."""
        if self._plan is not None:
            self._plan(*self._args)
        else:
            self._run(*self._args)
        return self.result


class DecodeLinearOptions(TypedDict, total=False):
    """The keyword arguments of :func:`decode_linear` and :func:`bind_decode_linear`.

    All optional: ``norm_weight`` (default None), ``eps`` (1e-6), ``epilogue`` (None),
    ``residual``, ``rope_kv``, ``gather_ids`` and ``gather_out``, ``out``, ``out_dtype`` (None);
    their meaning is :func:`decode_linear`'s.
    """

    norm_weight: GPUArray | None
    eps: float
    epilogue: str | None
    residual: GPUArray | None
    rope_kv: RopeKV | None
    gather_ids: GPUArray | None
    gather_out: GPUArray | None
    out: GPUArray | None
    out_dtype: Any


def bind_decode_linear(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    **options: Unpack[DecodeLinearOptions],
) -> BoundDecodeLinear:
    """:func:`decode_linear`'s call validated and planned once: ``bound()`` enqueues it.

    For a decode loop that runs the same call on the same arrays every step (the arrays' values
    change, not the arrays). Arguments as :func:`decode_linear`.
    """
    unknown = sorted(set(options) - set(DecodeLinearOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"unknown decode_linear option(s) {', '.join(unknown)}; the options are "
            f"{', '.join(DecodeLinearOptions.__annotations__)}"
        )
    o = options
    ids, gather_out = o.get("gather_ids"), o.get("gather_out")
    if (ids is None) != (gather_out is None):
        raise ValueError("gather_ids and gather_out come together (the id, and the row's copy)")
    gather = Gather(ids, gather_out) if ids is not None and gather_out is not None else None
    return _bind(
        x, weight, bias, o.get("norm_weight"), float(o.get("eps", 1e-6)), o.get("epilogue"),
        o.get("residual"), o.get("rope_kv"), gather, o.get("out"), o.get("out_dtype"),
    )  # fmt: skip


def decode_linear(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    **options: Unpack[DecodeLinearOptions],
) -> GPUArray:
    """One token's ``x @ weight.T (+ bias)`` with a fused RMSNorm prologue and epilogue.

    ``x``: ``[K]`` or ``[1, K]``; ``weight`` ``[N, K]`` (``nn.Linear`` layout), ``bias`` ``[N]``,
    ``norm_weight`` ``[K]``, all one float dtype, C-contiguous. ``norm_weight`` given: ``x`` is
    RMS-normalised (``eps``) first, as :func:`rmsnorm`. ``gather_ids`` (int32 ``[1]``) and
    ``gather_out`` (``K`` elements) given: ``x`` is a table ``[V, K]``, its row ``gather_ids[0]``
    (a row of zeros outside ``[0, V)``, as :func:`embedding` on the GPU) is copied into
    ``gather_out`` and used as the row (needs ``norm_weight``). ``epilogue`` (see the module
    docstring):

    - ``None``: returns the ``[N]`` product (``out_dtype=float32``: the float32 sums, as
      :func:`gemv`'s; no bias then);
    - ``"residual"``: ``residual`` (``N`` elements) becomes ``residual + product`` (the product
      rounded first); returns ``residual``;
    - ``"swiglu"``: returns ``silu(gate) * up`` ``[N / 2]``, gate the first ``N / 2`` rows;
    - ``"rope_kv"``: ``rope_kv`` (:class:`RopeKV`); returns the rotated queries
      ``[q_heads * D]``, and stores k (rotated) and v in the cache.

    ``out`` (the result's shape and dtype) receives the result for the epilogues that make one.
    Returns without waiting on the GPU.
    """
    return bind_decode_linear(x, weight, bias, **options)()


def _bind(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    norm_weight: GPUArray | None,
    eps: float,
    epilogue: str | None,
    residual: GPUArray | None,
    rope_kv: RopeKV | None,
    gather: Gather | None,
    out: GPUArray | None,
    out_dtype: Any,
) -> BoundDecodeLinear:
    rule = _OneRow(gather, norm_weight)
    n, k = _check_fused(x, weight, bias, norm_weight, epilogue, residual, rope_kv, rule)
    dtype = x.dtype
    f32 = out_dtype is not None and np.dtype(out_dtype) != dtype
    if f32 and (
        np.dtype(out_dtype) != np.dtype(np.float32) or epilogue is not None or bias is not None
    ):
        raise ValueError("out_dtype=float32 is for the plain product of half inputs, no bias")
    if f32 and dtype not in c.HALF_DTYPES:
        raise TypeError(f"out_dtype=float32 needs float16/bfloat16 inputs, got {dtype}")
    if epilogue == "residual":
        assert residual is not None
        y = residual
    else:
        shape = _out_shape(x, n, epilogue, rope_kv, gather)
        y_dtype = np.dtype(np.float32) if f32 else dtype
        c.check_out(out, shape, y_dtype)
        check_no_overlap(out, ("x", x), ("weight", weight))
        y = c.result(out, shape, y_dtype)
    if n == 0:
        return BoundDecodeLinear(y, None, (), lambda: None)
    pair = 0
    if epilogue == "swiglu":
        pair = n // 2
    elif rope_kv is not None:
        pair = rope_kv.shape[2] // 2
    args = (x, weight, bias, norm_weight, eps, epilogue, residual, rope_kv, y, f32, gather)
    return _bind_backend(n, k, pair, args)


def _bind_numpy(n: int, k: int, pair: int, args: tuple[Any, ...]) -> BoundDecodeLinear:
    return BoundDecodeLinear(args[8], None, args, _numpy)


def _bind_cuda(n: int, k: int, pair: int, args: tuple[Any, ...]) -> BoundDecodeLinear:
    x, weight, bias, norm_weight, eps, epilogue, _residual, rope_kv, y, f32, gather = args
    if not _fusable(x, weight, k, norm_weight, pair, gather):
        return BoundDecodeLinear(y, None, args, _composed)
    rows = rows_per_warp(n, k, pair, x.dtype.itemsize)
    one_pass = _one_pass(k, rows)
    norm = norm_weight is not None
    plan = PLANS.get(n, k, x.dtype, norm, pair, rows, one_pass, gp.get_device())
    if rope_kv is not None:
        hq, hkv, d, cap = rope_kv.shape
        table = rope_kv.cos
        rope_args: tuple[Any, ...] = (rope_kv.k_cache, rope_kv.v_cache, table, rope_kv.sin,
                                      rope_kv.position)  # fmt: skip
        sizes = (hq, hkv, d, cap, table.shape[0], _TABLE_KIND[table.dtype])
    else:
        rope_args, sizes = (0, 0, 0, 0, 0), (0, 0, 0, 1, 0, 0)
    gather_args = (0, 0, 0) if gather is None else (gather.ids, x.shape[0], gather.out)
    kernel_args = (
        x, norm_weight if norm_weight is not None else 0, float(eps), weight,
        bias if bias is not None else 0, y, *rope_args, n, k, pair, EPILOGUES[epilogue],
        int(f32), *sizes, *gather_args,
    )  # fmt: skip
    return BoundDecodeLinear(y, plan, kernel_args, None)


#: The fused kernel (or the unfused ops) on the GPU, the NumPy references on the CPU.
_bind_backend = per_backend(cpu=_bind_numpy, cuda=_bind_cuda)

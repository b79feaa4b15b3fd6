"""Skinny-M linear: ``x @ weight.T (+ bias)`` for 1 to 64 rows of x on tensor cores.

A batched decode step multiplies a few token rows (16 to 64) by every weight matrix of the model:
the product is bound by reading the weights once. :func:`skinny_linear` runs a kernel built for
that (``kernels/skinny_gemm.cu``): the weights ``[N, K]`` (``nn.Linear`` layout) stream straight
from DRAM into the registers of mma.sync tiles, x is staged in shared memory once per CTA, and
where N has too few 128-row tiles to fill the GPU, a few CTAs split K and add their partial tiles
in distributed shared memory (a thread block cluster, sm_90) in a fixed order, so the result is
the same on every run. Sums are fp32; one rounding to the output dtype (float32 stores them
unrounded, a language model's logits).

:func:`plan_skinny` plans a call once (kernel, grid, split) for :class:`SkinnyPlan`; the linear
layers use it only at the shapes where it measured faster than cuBLASLt (see
:func:`skinny_preferred`). On the CPU backend the NumPy float64 product runs, rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._constants import constant
from ._plan import Launch, PlanCache, per_backend
from .reference import linear as reference

__all__ = [
    "SKINNY_AUTO",
    "SKINNY_MAX_ROWS",
    "SkinnyPlan",
    "SkinnyRule",
    "plan_skinny",
    "skinny_linear",
    "skinny_preferred",
    "skinny_splits",
]

#: Most rows of x the kernel takes (eight tiles of 8 tokens).
SKINNY_MAX_ROWS = constant("skinny_gemm", "SKINNY_MAX_ROWS")
_TILE_N = constant("skinny_gemm", "SKINNY_TILE_N")
_CHUNK_K = constant("skinny_gemm", "SKINNY_CHUNK_K")
_MAX_SPLITS = constant("skinny_gemm", "SKINNY_MAX_SPLITS")


@dataclass(frozen=True, slots=True)
class SkinnyRule:
    """Shapes ``[M, K] x [N, K]^T`` (inclusive ranges) where the skinny kernel measured faster."""

    rows: tuple[int, int]
    n: tuple[int, int] = (1, 2**31 - 1)
    k: tuple[int, int] = (8, 2**31 - 1)

    def covers(self, m: int, n: int, k: int) -> bool:
        """Whether ``(m, n, k)`` lies in every range."""
        return all(lo <= v <= hi for v, (lo, hi) in ((m, self.rows), (n, self.n), (k, self.k)))


#: Where the ``skinny_linear`` knob's ``auto`` takes the kernel over cuBLASLt in ops.linear and
#: the Linear layers: GPU model (a part of the device name, e.g. ``"H100"``; one compute
#: capability spans GPUs of different memory bandwidths) -> the shapes where it measured faster
#: (tools/skinny_gemm_bench.py; the numbers are in docs/ops-linear-sampling.md). A GPU not listed
#: keeps cuBLASLt.
SKINNY_AUTO: dict[str, tuple[SkinnyRule, ...]] = {}
#: CTAs the split aims at per multiprocessor (the kernel's launch bounds keep two resident).
_CTAS_PER_SM = 2


def _token_tiles(m: int) -> int:
    """Tiles of 8 tokens the kernel is instantiated for: 1, 2, 4 or 8."""
    tiles = -(-m // 8)
    return next(t for t in (1, 2, 4, 8) if t >= tiles)


def skinny_splits(n: int, k: int, sm_count: int, clusters: bool = True) -> int:
    """How many CTAs split K for an ``[N, K]`` weight: 1, 2, 4 or 8.

    The largest split that keeps ``ceil(N / 128) * split`` within two CTAs per multiprocessor
    (one resident wave) and gives each CTA at least one 256-k chunk; 1 without clusters (GPUs
    before sm_90).
    """
    if not clusters:
        return 1
    tiles = -(-n // _TILE_N)
    chunks = -(-k // _CHUNK_K)
    split = 1
    while (
        split * 2 <= _MAX_SPLITS
        and tiles * split * 2 <= _CTAS_PER_SM * sm_count
        and split * 2 <= chunks
    ):
        split *= 2
    return split


def skinny_preferred(m: int, n: int, k: int, dtype: Any) -> bool:
    """Whether ops.linear plans ``[M, K] x [N, K]^T`` on the skinny kernel (current device).

    Never for shapes it cannot take (float32, K not a multiple of 8, more than 64 rows);
    otherwise by the ``skinny_linear`` knob of :mod:`.config`: ``on`` always, ``off`` never,
    ``auto`` (the default) where a :data:`SKINNY_AUTO` rule of this GPU model covers the shape.
    """
    if np.dtype(dtype) not in c.HALF_DTYPES or not 1 <= m <= SKINNY_MAX_ROWS:
        return False
    if k <= 0 or k % 8 or n <= 0:
        return False
    choice = config.get().skinny_linear
    if choice != "auto":
        return choice == "on"
    if not SKINNY_AUTO:
        return False
    info = gp.get_device_info(gp.get_device())
    if info["sm"] is None:  # the CPU backend
        return False
    name = str(info["name"])
    rules = [r for gpu, rs in SKINNY_AUTO.items() if gpu in name for r in rs]
    return any(rule.covers(m, n, k) for rule in rules)


class SkinnyPlan:
    """A planned :func:`skinny_linear` launch: ``plan(x, weight, bias, y)`` enqueues it.

    The same call signature as the linear plans of :mod:`.linear`, so a layer can hold either.
    """

    __slots__ = ("_launch", "_sizes", "splits")

    def __init__(self, launch: Any, sizes: tuple[int, ...], splits: int) -> None:
        self._launch = launch
        self._sizes = sizes
        #: CTAs that split K (for benchmarks and tests).
        self.splits = splits

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        """Enqueue ``y = x @ weight.T (+ bias)``; arrays as planned, not checked again."""
        self._launch(x, weight, bias if bias is not None else 0, y, *self._sizes)


@dataclass(frozen=True, slots=True)
class _ReferencePlan:
    splits: int = 1

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        b = None if bias is None else c.host(bias)
        c.write_into(y, reference.linear(c.host(x), c.host(weight), b, None))


#: Either plan: the kernel's, or the CPU backend's NumPy product.
AnySkinnyPlan = SkinnyPlan | _ReferencePlan


def _plan_cuda(
    m: int, n: int, k: int, dtype: np.dtype[Any], f32_out: bool, splits: int, device: int
) -> AnySkinnyPlan:
    c.check_int32("skinny_linear", M=m, N=n, K=k)
    info = gp.get_device_info(device)
    clusters = tuple(info["sm"]) >= (9, 0)
    if splits == 0:
        splits = skinny_splits(n, k, int(info["sm_count"] or 1), clusters)
    elif splits > 1 and not clusters:
        raise ValueError(f"splits={splits} needs thread block clusters (sm_90 or newer)")
    tiles = _token_tiles(m)
    name = f"skinny_gemm_n{tiles}_s{splits}_{c.kernel_suffix(dtype)}"
    kernel = kl.kernel("skinny_gemm", name)
    smem = tiles * constant("skinny_gemm", "SKINNY_SMEM_PER_TILE")
    if smem > 48 * 1024:
        kernel.set_max_dynamic_shared_memory(smem)
    grid = (-(-n // _TILE_N), splits)
    launch = Launch(kernel, grid, constant("skinny_gemm", "SKINNY_THREADS"), smem)
    return SkinnyPlan(launch, (m, n, k, int(f32_out)), splits)


def _plan_numpy(
    m: int, n: int, k: int, dtype: np.dtype[Any], f32_out: bool, splits: int, device: int
) -> AnySkinnyPlan:
    return _ReferencePlan(max(splits, 1))


_plan = per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
PLANS: PlanCache[AnySkinnyPlan] = PlanCache("skinny_linear", _plan)


def plan_skinny(
    m: int, n: int, k: int, dtype: Any, f32_out: bool = False, splits: int = 0
) -> AnySkinnyPlan:
    """The (cached) plan of ``[M, K] x [N, K]^T`` on the current device.

    ``splits``: CTAs per 128 weight rows that split K (1, 2, 4 or 8; 0 picks
    :func:`skinny_splits`). The caller checks the arrays (:func:`skinny_linear` does).
    """
    dt = np.dtype(dtype)
    if dt not in c.HALF_DTYPES:
        raise TypeError(f"skinny_linear takes float16 or bfloat16, got {dt}")
    if not 1 <= m <= SKINNY_MAX_ROWS:
        raise ValueError(f"skinny_linear takes 1 to {SKINNY_MAX_ROWS} rows of x, got {m}")
    if splits not in (0, 1, 2, 4, 8):
        raise ValueError(f"splits must be 0 (automatic), 1, 2, 4 or 8, got {splits}")
    if k <= 0 or k % 8:
        raise ValueError(f"skinny_linear needs K a positive multiple of 8, got K = {k}")
    return PLANS.get(m, n, k, dt, bool(f32_out), int(splits), gp.get_device())


def skinny_linear(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    out: GPUArray | None = None,
    out_dtype: Any = None,
    splits: int = 0,
) -> GPUArray:
    """``x @ weight.T (+ bias)`` for ``x`` ``[M, K]`` with 1 <= M <= 64 rows.

    ``weight`` ``[N, K]`` and ``bias`` ``[N]`` of x's dtype (float16 or bfloat16), all
    C-contiguous; ``K`` a multiple of 8 and ``x`` / ``weight`` 16-byte aligned (the kernel's
    16-byte loads). ``out_dtype``: None (x's dtype: the fp32 sums plus bias rounded once) or
    float32 (stored unrounded). ``splits``: see :func:`plan_skinny`. Returns ``[M, N]`` (into
    ``out`` when given) without waiting on the GPU.
    """
    c.check_array(x, "x", dtypes=c.HALF_DTYPES, ndim=2)
    c.check_array(weight, "weight", dtypes=c.HALF_DTYPES, ndim=2)
    c.check_same_dtype(x, ("weight", weight))
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k:
        raise ValueError(
            f"x {tuple(x.shape)} and weight {tuple(weight.shape)} must be [M, K] and [N, K]"
        )
    if bias is not None:
        c.check_array(bias, "bias", dtypes=c.HALF_DTYPES, ndim=1)
        c.check_same_dtype(x, ("bias", bias))
        c.check_shape(bias, "bias", (n,))
    if x.data_ptr % 16 or weight.data_ptr % 16:
        raise ValueError("x and weight must be 16-byte aligned (the kernel's 16-byte loads)")
    y_dtype = x.dtype if out_dtype is None else np.dtype(gp.dtypes.normalize(out_dtype))
    if y_dtype not in (x.dtype, np.dtype(gp.float32)):
        raise TypeError(f"out_dtype must be None (x's {x.dtype}) or float32, got {out_dtype!r}")
    c.check_out(out, (m, n), y_dtype)
    y = c.result(out, (m, n), y_dtype)
    if m == 0 or n == 0:
        return y
    plan = plan_skinny(m, n, k, x.dtype, y_dtype != x.dtype, splits)
    plan(x, weight, bias, y)
    return y

"""Linear layers: GEMV / skinny GEMM with a fused bias + activation epilogue.

Weights use PyTorch's ``nn.Linear`` layout, ``weight`` [N, K] row-major, and
``y = x @ weight.T + bias``. Which implementation runs:

- :func:`gemv` and :func:`linear` with M <= 8 rows (M = the product of ``x``'s
  leading dimensions) in float16/bfloat16: the memory-bound GEMV kernel
  (``kernels/gemv.cu``) that streams ``weight`` once with 16-byte loads, reuses each
  load for all M rows and accumulates in fp32; bias and activation are applied
  in its epilogue (one rounding). The vector kernel needs K % 8 == 0 and 16-byte
  aligned ``x`` and ``weight``; otherwise a scalar kernel runs (same results, much
  lower bandwidth). Two vector kernels: ``simt`` (4 output rows per warp, FMAs on
  the SIMT cores), used for M = 1, and ``mma`` (16 rows per block, products on
  tensor cores, a cost that does not grow with M), used for M >= 2; the
  ``gemv_variant`` knob of :mod:`.config` (``PYGPUKIT_GEMV_VARIANT``: ``auto``,
  ``simt`` or ``mma``, read once) pins one. See ``kernels/gemv.cu``. ``gemv(...,
  out_dtype=float32)`` stores the fp32 sums unrounded (a language model's logits).
- :func:`linear` with M > 8, or float32: ``gp.matmul(x, weight.T)`` (cuBLASLt or the
  runtime's own kernels; ``weight.T`` is a view, not a copy), then one in-place
  bias + activation kernel (``kernels/epilogue.cu``) when there is a bias or an
  activation. The matmul result is rounded to the storage dtype before the bias
  is added (two roundings, unlike the GEMV path).
- CPU backend: NumPy in float64 (:mod:`.reference.linear`), rounded once to the output dtype.

Each shape bucket (rows, N, K, dtype, activation, alignment) is planned once: the plan holds the
kernel, grid and block (:class:`GemvPlan`, :class:`MatmulPlan`), and :class:`~.layers.Linear`
holds the same plans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.linalg import matmul_nt

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._constants import constant, gemv_rows_per_block
from ._plan import Launch, PlanCache, per_backend
from .reference import linear as reference
from .skinny_linear import AnySkinnyPlan, plan_skinny, skinny_preferred

__all__ = ["ACTIVATIONS", "GEMV_MAX_ROWS", "GEMV_VARIANTS", "gemv", "gemv_variant", "linear"]

#: Activation names accepted by :func:`linear`, and their codes in the kernels.
ACTIVATIONS: dict[str | None, int] = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
#: Vector kernels: name -> entry point prefix. The ``simt`` kernels take M as a template
#: argument (entry points ``gemv_<dtype>_m<M>``, 4 output rows per warp); the ``mma`` kernels
#: (tensor cores, 16 rows per block) take it at run time.
GEMV_VARIANTS: dict[str, str] = {"simt": "gemv_", "mma": "gemv_mma_"}
#: Largest number of rows of ``x`` the GEMV kernels take (their accumulators live in registers).
GEMV_MAX_ROWS = constant("gemv", "GEMV_MAX_ROWS")


def activation_code(activation: str | None) -> int:
    """The kernels' code of an activation name; ``ValueError`` naming the valid ones."""
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"activation must be one of {names}; got {activation!r}")
    return ACTIVATIONS[activation]


def check_weight(x: GPUArray, weight: Any, bias: Any) -> tuple[int, int]:
    """Validate ``weight`` [N, K] and ``bias`` [N] against ``x`` [..., K]; return (N, K)."""
    c.check_array(weight, "weight", dtypes=c.FLOAT_DTYPES, ndim=2)
    c.check_same_dtype(x, ("weight", weight))
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(
            f"x has {x.shape[-1]} features (last dimension) but weight is {tuple(weight.shape)}"
            f" ([N, K] with K = {k}); y = x @ weight.T needs them equal"
        )
    if bias is not None:
        c.check_array(bias, "bias", dtypes=c.FLOAT_DTYPES, ndim=1)
        c.check_same_dtype(x, ("bias", bias))
        c.check_shape(bias, "bias", (n,))
    return n, k


def check_x(x: Any, ndim: int | tuple[int, ...] | None) -> GPUArray:
    """Validate ``x``: a float GPUArray, C-contiguous, with at least the K axis."""
    c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=ndim)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension (the K features)")
    return x


def check_no_overlap(out: GPUArray | None, *named: tuple[str, GPUArray | None]) -> None:
    """Raise ``ValueError`` when ``out`` shares memory with an input (all are C-contiguous).

    The GEMV kernel's blocks read all of ``x`` (and ``weight``) while others already write
    ``out``: an overlapping ``out`` would be read half-updated. Refused on both backends alike.
    """
    if out is None or out.nbytes == 0:
        return
    lo, hi = out.data_ptr, out.data_ptr + out.nbytes
    for name, a in named:
        if a is not None and a.nbytes and a.data_ptr < hi and lo < a.data_ptr + a.nbytes:
            raise ValueError(f"out overlaps {name}; pass a separate out array (or none)")


def gemv_variant(m: int = 1) -> str:
    """The GEMV vector kernel for ``m`` rows of x: ``simt`` for one row, ``mma`` for more.

    The ``gemv_variant`` knob of :mod:`.config` (``PYGPUKIT_GEMV_VARIANT``) set to ``simt`` or
    ``mma`` pins one (``auto``: by M).

    ``simt`` is the faster at M = 1; ``mma``'s cost does not grow with M, so it wins from
    M = 2 (docs/ops-linear-sampling.md has the measurements).
    """
    name = config.get().gemv_variant
    if name == "auto":
        return "simt" if m == 1 else "mma"
    return name


def gemv_vector(k: int, x: GPUArray, weight: GPUArray) -> bool:
    """Whether the vector GEMV kernels can run: K % 8 == 0 and 16-byte aligned x and weight."""
    return k % 8 == 0 and x.data_ptr % 16 == 0 and weight.data_ptr % 16 == 0


@dataclass(frozen=True, slots=True)
class GemvPlan:
    """The GEMV kernel for M <= 8 rows: ``plan(x, weight, bias, y)`` enqueues it."""

    launch: Launch
    tail: tuple[int, ...]  # the size and activation arguments after (x, weight, bias, y)

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        self.launch(x, weight, bias if bias is not None else 0, y, *self.tail)


@dataclass(frozen=True, slots=True)
class MatmulPlan:
    """``x @ weight.T`` into ``y`` and, with a bias or an activation, one epilogue kernel.

    The product is one runtime call (:func:`pygpukit.linalg.matmul_nt`: no reshaped or
    transposed views made in Python, no re-validation of what :func:`linear` checked), so a
    small GEMM costs the host little more than its launches.
    """

    m: int
    n: int
    k: int
    epilogue: Launch | None
    act: int

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        matmul_nt(x, weight, y)
        if self.epilogue is not None:
            bias_arg: GPUArray | int = bias if bias is not None else 0
            self.epilogue(y, bias_arg, self.m, self.n, self.act)


@dataclass(frozen=True, slots=True)
class ReferencePlan:
    """The CPU backend's "plan": the float64 NumPy product, rounded once into ``y``."""

    m: int
    k: int
    activation: str | None

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        b = None if bias is None else c.host(bias)
        ref = reference.linear(
            c.host(x).reshape(self.m, self.k), c.host(weight), b, self.activation
        )
        c.write_into(y, ref.reshape(y.shape))


LinearPlan = GemvPlan | MatmulPlan | ReferencePlan | AnySkinnyPlan

_ACTIVATION_NAMES = {code: name for name, code in ACTIVATIONS.items()}


def _plan_cuda(
    m: int,
    n: int,
    k: int,
    dtype: np.dtype[Any],
    act: int,
    vector: bool,
    bias: bool,
    device: int,
    f32_out: bool = False,
) -> LinearPlan:
    """The launch of ``y [M, N] = act(x [M, K] @ weight.T + bias)`` on the current device.

    ``f32_out``: the GEMV kernels that store their float32 sums unrounded (``y`` float32).
    """
    sfx = c.KERNEL_SUFFIX[dtype]
    if f32_out:
        sfx = f"f32out_{sfx}"
    warps = constant("gemv", "GEMV_WARPS")
    block = warps * 32
    if m <= GEMV_MAX_ROWS and dtype in c.HALF_DTYPES and k > 0:
        c.check_int32("gemv", N=n, K=k)
        if not vector:  # the scalar kernel: one output row per warp
            grid = (n + warps - 1) // warps
            launch = Launch(kl.kernel("gemv", f"gemv_scalar_{sfx}"), grid, block)
            return GemvPlan(launch, (m, n, k, act))
        variant = gemv_variant(m)
        prefix, rows_per_block = GEMV_VARIANTS[variant], gemv_rows_per_block(variant)
        grid = (n + rows_per_block - 1) // rows_per_block
        if variant == "mma":
            return GemvPlan(
                Launch(kl.kernel("gemv", f"{prefix}{sfx}"), grid, block), (m, n, k, act)
            )
        simt = f"gemv_f32out_{c.KERNEL_SUFFIX[dtype]}" if f32_out else f"{prefix}{sfx}"
        launch = Launch(kl.kernel("gemv", f"{simt}_m{m}"), grid, block)
        return GemvPlan(launch, (n, k, act))
    if act == 0 and vector and skinny_preferred(m, n, k, dtype):
        return plan_skinny(m, n, k, dtype, f32_out)  # bias in its epilogue, one rounding
    if f32_out:  # gemv() checks M <= 8 and a half dtype first
        raise AssertionError("float32 output is planned only for the GEMV and skinny kernels")
    epilogue = None
    if bias or act != 0:
        c.check_int32("linear", N=n)
        grid = min((m * n + 255) // 256, 65535)
        epilogue = Launch(kl.kernel("epilogue", f"bias_act_{sfx}"), grid, 256)
    return MatmulPlan(m, n, k, epilogue, act)


def _plan_numpy(
    m: int,
    n: int,
    k: int,
    dtype: np.dtype[Any],
    act: int,
    vector: bool,
    bias: bool,
    device: int,
    f32_out: bool = False,
) -> LinearPlan:
    return ReferencePlan(m, k, _ACTIVATION_NAMES[act])


_plan = per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
#: Linear and GEMV plans by (M, N, K, dtype, activation code, vector kernels allowed, bias,
#: device).
PLANS: PlanCache[LinearPlan] = PlanCache("linear", _plan)


def plan(
    m: int,
    n: int,
    k: int,
    dtype: np.dtype[Any],
    act: int,
    vector: bool,
    bias: bool,
    f32_out: bool = False,
) -> LinearPlan:
    """The (cached) plan of an ``[M, K] x [N, K]^T`` product with this epilogue, this device.

    ``f32_out`` (GEMV shapes only): a float32 result, the fp32 sums stored unrounded.
    """
    return PLANS.get(m, n, k, dtype, act, vector, bias, gp.get_device(), f32_out)


def gemv(
    x: GPUArray, weight: GPUArray, *, out: GPUArray | None = None, out_dtype: Any = None
) -> GPUArray:
    """``x @ weight.T`` for a few rows of ``x``: the memory-bound GEMV kernel.

    ``x`` is [M, K] with 1 <= M <= 8 (or [K], giving [N]); ``weight`` is [N, K]
    (``nn.Linear`` layout), both float16 or bfloat16, C-contiguous. Accumulates in
    fp32 and rounds once to ``out_dtype``: ``None`` (x's dtype) or ``float32``, which stores the
    fp32 sums unrounded (a language model's logits: rounded to bfloat16, close top logits
    become ties). ``out`` ([M, N] of that dtype, not overlapping an input) receives the result.
    Use :func:`linear` for a bias, an activation, or more rows.
    """
    check_x(x, (1, 2))
    dtype = x.dtype
    if dtype not in c.HALF_DTYPES:
        raise TypeError(f"gemv takes float16 or bfloat16 arrays, got {dtype}; use linear()")
    y_dtype = dtype if out_dtype is None else np.dtype(out_dtype)
    if y_dtype not in (dtype, np.dtype(gp.float32)):
        raise TypeError(
            f"gemv's out_dtype must be None (x's {dtype}) or float32, got {out_dtype!r}"
        )
    n, k = check_weight(x, weight, None)
    x_shape = x.shape
    m = 1 if len(x_shape) == 1 else x_shape[0]
    if not 1 <= m <= GEMV_MAX_ROWS:
        raise ValueError(f"gemv takes 1 to {GEMV_MAX_ROWS} rows of x, got {m}; use linear()")
    shape = (n,) if len(x_shape) == 1 else (m, n)
    if out is not None:
        c.check_out(out, shape, y_dtype)
        check_no_overlap(out, ("x", x), ("weight", weight))
    y = c.result(out, shape, y_dtype)
    if n:
        f32_out = y_dtype != dtype
        plan(m, n, k, dtype, 0, gemv_vector(k, x, weight), False, f32_out)(x, weight, None, y)
    return y


_F32 = np.dtype(gp.float32)


def _product_only_cuda(x: Any, weight: Any) -> GPUArray | None:
    """``x @ weight.T`` on the GEMM path in one runtime call, or None to take the general path.

    A prompt's projections are this case (no bias, no activation, no ``out``), and at a few
    microseconds of GPU time each the host's checks, allocation and plan lookup would be most of
    the call: here the few checks the runtime does not make (a float dtype, a C-contiguous
    weight, more rows than the GEMV kernels take) come first, and the runtime's own checks
    (shapes, x's contiguity, equal dtypes) the rest. None for anything else, including an
    invalid argument, whose error the general path then raises with the argument's name.
    """
    if not isinstance(x, GPUArray) or not isinstance(weight, GPUArray):
        return None
    dtype = x.dtype
    shape = x.shape
    if dtype not in c.FLOAT_DTYPES or len(shape) < 2 or not weight.is_contiguous():
        return None
    if dtype != _F32 and math.prod(shape[:-1]) <= GEMV_MAX_ROWS:
        return None
    try:
        return matmul_nt(x, weight)
    except (ValueError, TypeError):
        return None


def _product_only_numpy(x: Any, weight: Any) -> GPUArray | None:
    """The CPU backend keeps the general path (its float64 reference rounds once)."""
    return None


_product_only = per_backend(cpu=_product_only_numpy, cuda=_product_only_cuda)


def linear(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    activation: str | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """``activation(x @ weight.T + bias)``, like ``torch.nn.functional.linear`` plus an activation.

    ``x`` is [..., K]; ``weight`` [N, K] and ``bias`` [N] (optional) of the same
    dtype (float32, float16 or bfloat16); the result is [..., N]. ``activation``
    is None, ``"relu"``, ``"gelu"`` (erf), ``"gelu_tanh"`` or ``"silu"``. With at
    most 8 rows in half precision the GEMV kernel runs with bias and activation
    fused; otherwise ``gp.matmul`` and one bias + activation kernel (see the module
    docstring). ``out`` ([..., N], same dtype, C-contiguous, not overlapping an input)
    receives the result.
    """
    if bias is None and activation is None and out is None:
        y = _product_only(x, weight)
        if y is not None:
            return y
    check_x(x, None)
    act = activation_code(activation)
    n, k = check_weight(x, weight, bias)
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    shape = (*lead, n)
    dtype = x.dtype
    c.check_out(out, shape, dtype)
    check_no_overlap(out, ("x", x), ("weight", weight), ("bias", bias))
    y = c.result(out, shape, dtype)
    if m == 0 or n == 0:
        return y
    # Alignment only picks between the GEMV kernels: the matmul path skips the two address reads.
    vector = m <= GEMV_MAX_ROWS and dtype in c.HALF_DTYPES and gemv_vector(k, x, weight)
    plan(m, n, k, dtype, act, vector, bias is not None)(x, weight, bias, y)
    return y

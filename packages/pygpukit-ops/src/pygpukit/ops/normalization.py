"""pygpukit.ops.normalization: RMSNorm, LayerNorm and their fused residual-add forms.

All four normalise over the last axis of ``x`` (any leading shape) in float32, whatever the
storage dtype (float32, float16, bfloat16), and round the result once to that dtype::

    rmsnorm(x, w)       = x * rsqrt(mean(x**2) + eps) * w
    layernorm(x, w, b)  = (x - mean(x)) * rsqrt(var(x) + eps) * w + b      (biased variance)

``add_rmsnorm(x, residual, w)`` and ``add_layernorm(x, residual, w, b)`` return ``(s, y)`` with
``s = x + residual`` rounded to the dtype and ``y`` the norm *of that rounded* ``s``, as the
residual stream of HF Transformers and vLLM's ``fused_add_rms_norm`` compute it; one kernel reads
``x`` and ``residual`` once and writes both outputs.

On the GPU each row is read into registers once (16-byte loads), reduced with warp shuffles and a
few floats of shared memory, and written from registers; see ``kernels/normalization.cu``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import _rows
from ._plan import Launch, PlanCache, per_backend
from .reference import normalization as reference

__all__ = ["add_layernorm", "add_rmsnorm", "layernorm", "rmsnorm"]


def _check(
    x: Any, weight: Any, bias: Any, residual: Any, eps: float
) -> tuple[GPUArray, GPUArray, GPUArray | None, GPUArray | None]:
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES)
    if x.ndim < 1:
        raise ValueError(f"x must have at least 1 dimension, got shape {x.shape}")
    width = x.shape[-1]
    weight = c.check_array(weight, "weight", ndim=1)
    c.check_same_dtype(x, ("weight", weight))
    c.check_shape(weight, "weight", (width,))
    if bias is not None:
        bias = c.check_array(bias, "bias", ndim=1)
        c.check_same_dtype(x, ("bias", bias))
        c.check_shape(bias, "bias", (width,))
    if residual is not None:
        residual = c.check_array(residual, "residual")
        c.check_same_dtype(x, ("residual", residual))
        c.check_shape(residual, "residual", x.shape)
    eps = validation.real(eps, "eps")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return x, weight, bias, residual


@dataclass(frozen=True, slots=True)
class NormPlan:
    """A row-norm launch for ``rows`` rows of ``width`` elements.

    ``plan(x, residual, weight, bias, out, sum_out, eps, layer)`` enqueues it (None for the
    optional arrays).
    """

    launch: Launch
    rows: int
    width: int
    group: int

    def __call__(
        self,
        x: GPUArray,
        residual: GPUArray | None,
        weight: GPUArray,
        bias: GPUArray | None,
        out: GPUArray,
        sum_out: GPUArray | None,
        eps: float,
        layer: bool,
    ) -> None:
        self.launch(
            x,
            residual if residual is not None else 0,
            weight,
            bias if bias is not None else 0,
            out,
            sum_out if sum_out is not None else 0,
            self.rows,
            self.width,
            self.group,
            eps,
            int(layer),
        )


@dataclass(frozen=True, slots=True)
class ReferencePlan:
    """The CPU backend's "plan": :mod:`.reference.normalization` on the host buffers."""

    def __call__(
        self,
        x: GPUArray,
        residual: GPUArray | None,
        weight: GPUArray,
        bias: GPUArray | None,
        out: GPUArray,
        sum_out: GPUArray | None,
        eps: float,
        layer: bool,
    ) -> None:
        b = c.f32(bias) if bias is not None else None
        if residual is None:
            c.write_into(out, reference.norm(c.f32(x), c.f32(weight), b, eps, layer, x.dtype))
            return
        assert sum_out is not None
        s, y = reference.add_norm(c.f32(x), c.f32(residual), c.f32(weight), b, eps, layer, x.dtype)
        c.write_into(sum_out, s)
        c.write_into(out, y)


def _plan_cuda(
    rows: int, width: int, vec: int, dtype: np.dtype[Any], device: int
) -> NormPlan | ReferencePlan:
    c.check_int32("norm", width=width)
    rp = _rows.plan_rows(rows, width, vec)
    kernel = kl.kernel("normalization", f"norm_{c.kernel_suffix(dtype)}_{rp.suffix}")
    return NormPlan(Launch(kernel, rp.grid, rp.block), rows, width, rp.group)


def _plan_numpy(
    rows: int, width: int, vec: int, dtype: np.dtype[Any], device: int
) -> NormPlan | ReferencePlan:
    return ReferencePlan()


#: Norm plans by (rows, width, vector width, dtype, device).
PLANS: PlanCache[NormPlan | ReferencePlan] = PlanCache(
    "norm", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def plan(x: GPUArray, *arrays: GPUArray | None) -> NormPlan | ReferencePlan | None:
    """The (cached) plan for ``x``'s rows at the vector width every array's address allows.

    None when there is nothing to normalise (no rows, or rows of width 0).
    """
    width = x.shape[-1]
    rows = x.size // width if width else 0
    if rows == 0:
        return None
    vec = _rows.vector_width(width, x.itemsize, x, *arrays)
    return PLANS.get(rows, width, vec, x.dtype, gp.get_device())


def _norm(
    x: Any,
    weight: Any,
    bias: Any,
    eps: float,
    out: GPUArray | None,
    layer: bool,
) -> GPUArray:
    x, weight, bias, _ = _check(x, weight, bias, None, eps)
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    p = plan(x, weight, bias, y)
    if p is not None:
        p(x, None, weight, bias, y, None, float(eps), layer)
    return y


def _add_norm(
    x: Any, residual: Any, weight: Any, bias: Any, eps: float, layer: bool
) -> tuple[GPUArray, GPUArray]:
    if residual is None:
        raise TypeError("residual must be a GPUArray, got None")
    x, weight, bias, residual = _check(x, weight, bias, residual, eps)
    total = c.result(None, x.shape, x.dtype)
    y = c.result(None, x.shape, x.dtype)
    p = plan(x, residual, weight, bias, y, total)
    if p is not None:
        p(x, residual, weight, bias, y, total, float(eps), layer)
    return total, y


def rmsnorm(
    x: GPUArray, weight: GPUArray, eps: float = 1e-6, *, out: GPUArray | None = None
) -> GPUArray:
    """RMSNorm over the last axis: ``x * rsqrt(mean(x**2, -1) + eps) * weight``.

    ``x`` is float32, float16 or bfloat16 of any shape ``[..., D]`` (C-contiguous), ``weight``
    ``[D]`` of the same dtype. Computed in float32, rounded once. ``out`` (same shape and dtype
    as ``x``; may be ``x`` itself) receives the result. Returns without waiting on the GPU.
    """
    return _norm(x, weight, None, eps, out, layer=False)


def layernorm(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    eps: float = 1e-5,
    *,
    out: GPUArray | None = None,
) -> GPUArray:
    """LayerNorm over the last axis: ``(x - mean) * rsqrt(var + eps) * weight (+ bias)``.

    The variance is the biased one (``torch.nn.functional.layer_norm``), computed from the
    centred values. Dtypes and ``out`` as :func:`rmsnorm`.
    """
    return _norm(x, weight, bias, eps, out, layer=True)


def add_rmsnorm(
    x: GPUArray, residual: GPUArray, weight: GPUArray, eps: float = 1e-6
) -> tuple[GPUArray, GPUArray]:
    """Fused residual add and RMSNorm: ``s = x + residual``; returns ``(s, rmsnorm(s))``.

    ``s`` is rounded to the dtype first and the norm computed from the rounded ``s`` (as HF and
    vLLM do), so the result equals ``rmsnorm(x + residual)`` exactly; one kernel, one read of
    each input.
    """
    return _add_norm(x, residual, weight, None, eps, layer=False)


def add_layernorm(
    x: GPUArray,
    residual: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    eps: float = 1e-5,
) -> tuple[GPUArray, GPUArray]:
    """Fused residual add and LayerNorm: returns ``(s, layernorm(s))``, ``s = x + residual``.

    Rounding of ``s`` as :func:`add_rmsnorm`.
    """
    return _add_norm(x, residual, weight, bias, eps, layer=True)

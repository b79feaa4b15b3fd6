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
from typing import Any

import numpy as np

from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import _rows

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


def _reference(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    eps: float,
    layer: bool,
    dtype: np.dtype,
) -> np.ndarray:
    """The norm of ``x`` (float32 or wider) over the last axis, rounded to ``dtype``."""
    if x.size == 0:  # no rows, or rows of width 0: nothing to normalise (and no empty mean)
        return x.astype(dtype)
    if layer:
        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = np.mean(centered * centered, axis=-1, keepdims=True)
    else:
        centered = x
        var = np.mean(x * x, axis=-1, keepdims=True)
    y = centered / np.sqrt(var + np.asarray(eps, dtype=x.dtype)) * weight
    if bias is not None:
        y = y + bias
    return np.asarray(y).astype(dtype)


def _launch(
    x: GPUArray,
    residual: GPUArray | None,
    weight: GPUArray,
    bias: GPUArray | None,
    out: GPUArray,
    sum_out: GPUArray | None,
    eps: float,
    layer: bool,
) -> None:
    width = x.shape[-1]
    rows = x.size // width if width else 0
    if rows == 0 or width == 0:
        return
    c.check_int32("norm", width=width)
    vec = _rows.vector_width(width, x.itemsize, x, residual, weight, bias, out, sum_out)
    plan = _rows.plan_rows(rows, width, vec)
    kernel = kl.kernel("normalization", f"norm_{c.kernel_suffix(x.dtype)}_{plan.suffix}")
    kernel.launch(
        plan.grid,
        plan.block,
        (
            x,
            residual if residual is not None else 0,
            weight,
            bias if bias is not None else 0,
            out,
            sum_out if sum_out is not None else 0,
            rows,
            width,
            plan.group,
            float(eps),
            int(layer),
        ),
    )


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
    if c.on_cpu(x):
        b = c.f32(bias) if bias is not None else None
        c.write_into(y, _reference(c.f32(x), c.f32(weight), b, eps, layer, x.dtype))
        return y
    _launch(x, None, weight, bias, y, None, eps, layer)
    return y


def _add_norm(
    x: Any, residual: Any, weight: Any, bias: Any, eps: float, layer: bool
) -> tuple[GPUArray, GPUArray]:
    if residual is None:
        raise TypeError("residual must be a GPUArray, got None")
    x, weight, bias, residual = _check(x, weight, bias, residual, eps)
    total = c.result(None, x.shape, x.dtype)
    y = c.result(None, x.shape, x.dtype)
    if c.on_cpu(x):
        s = (c.f32(x) + c.f32(residual)).astype(x.dtype)
        c.write_into(total, s)
        b = c.f32(bias) if bias is not None else None
        sf = s if s.dtype == np.float64 else s.astype(np.float32)
        c.write_into(y, _reference(sf, c.f32(weight), b, eps, layer, x.dtype))
        return total, y
    assert residual is not None
    _launch(x, residual, weight, bias, y, total, eps, layer)
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

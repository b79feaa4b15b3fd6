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
  ``PYGPUKIT_GEMV_VARIANT`` tuning knob (``auto``, ``simt`` or ``mma``, read at
  each launch) pins one. See ``kernels/gemv.cu``.
- :func:`linear` with M > 8, or float32: ``gp.matmul(x, weight.T)`` (cuBLASLt or the
  runtime's own kernels; ``weight.T`` is a view, not a copy), then one in-place
  bias + activation kernel (``kernels/epilogue.cu``) when there is a bias or an
  activation. The matmul result is rounded to the storage dtype before the bias
  is added (two roundings, unlike the GEMV path).
- CPU backend: NumPy in float64, rounded once to the output dtype.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from ._kernel_loader import kernel

__all__ = ["ACTIVATIONS", "GEMV_MAX_ROWS", "GEMV_VARIANTS", "gemv", "gemv_variant", "linear"]

#: Activation names accepted by :func:`linear`, and their codes in the kernels.
ACTIVATIONS: dict[str | None, int] = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
#: Largest number of rows of ``x`` the GEMV kernel takes (its accumulators live in registers).
GEMV_MAX_ROWS = 8

_WARPS = 4  # warps per block of the GEMV kernels (kernels/gemv.cu kWarps)
#: Vector kernels: name -> (entry point prefix, output rows per block). The ``simt`` kernels
#: take M as a template argument (entry points ``gemv_<dtype>_m<M>``); the ``mma`` kernels
#: (tensor cores, 16 rows per block) take it at run time.
GEMV_VARIANTS: dict[str, tuple[str, int]] = {
    "simt": ("gemv_", 4 * _WARPS),
    "mma": ("gemv_mma_", 16),
}
_VARIANT_ENV = "PYGPUKIT_GEMV_VARIANT"


def _activation_code(activation: str | None) -> int:
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"activation must be one of {names}; got {activation!r}")
    return ACTIVATIONS[activation]


def _check_weight(x: GPUArray, weight: Any, bias: Any) -> tuple[int, int]:
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


def _check_x(x: Any, ndim: int | tuple[int, ...] | None) -> GPUArray:
    c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=ndim)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension (the K features)")
    return x


def _check_no_overlap(out: GPUArray | None, *named: tuple[str, GPUArray | None]) -> None:
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


def _reference(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, activation: str | None
) -> np.ndarray:
    """The CPU backend: the product in float32 (float64 for float64), bias and activation.

    float32 BLAS, not float64: a model's weights are read on every call, and widening them to
    float64 each time made CPU-backend inference several times slower. Half-precision inputs
    widen to float32 exactly; float32 accumulation is within 1e-6 of float64 at these sizes.
    """
    wide = np.float64 if np.float64 in (x.dtype, w.dtype) else np.float32
    y = x.astype(wide, copy=False) @ w.astype(wide, copy=False).T
    if bias is not None:
        y = y + bias.astype(wide, copy=False)
    return _activate(y, activation)


def _activate(y: np.ndarray, activation: str | None) -> np.ndarray:
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "gelu":
        from math import erf

        return 0.5 * y * (1.0 + np.vectorize(erf, otypes=[np.float64])(y / np.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (y + 0.044715 * y**3)))
    if activation == "silu":
        return y / (1.0 + np.exp(-y))
    return y


def gemv_variant(m: int = 1) -> str:
    """The GEMV vector kernel for ``m`` rows of x: ``simt`` for one row, ``mma`` for more.

    ``PYGPUKIT_GEMV_VARIANT`` set to ``simt`` or ``mma`` pins one (unset or ``auto``: by M).

    Measured on an H200 (bf16 W [14336, 4096]): simt 30.4 us at M = 1 against mma's 33.9;
    at M = 4 and 8 simt takes 40 and 45 us, mma 34 at every M.
    """
    name = os.environ.get(_VARIANT_ENV) or "auto"
    if name == "auto":
        return "simt" if m == 1 else "mma"
    if name not in GEMV_VARIANTS:
        known = ", ".join(["auto", *GEMV_VARIANTS])
        raise ValueError(f"{_VARIANT_ENV}={name!r} is not a GEMV variant; use one of {known}")
    return name


def _launch_gemv(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    y: GPUArray,
    m: int,
    n: int,
    k: int,
    dtype: np.dtype[Any],
    act: int,
) -> None:
    """Enqueue the GEMV kernel: ``x`` holds M <= 8 rows of K, ``y`` M rows of N (both C-contiguous).

    The decode loop calls this for every linear layer, and at M = 1 the kernel runs for only
    ~30 us: the host side must stay well under that, so it takes the sizes its caller already
    read, passes ``x`` and ``y`` as they are (the kernel sees only addresses; no reshaped view)
    and uses the lean ``Kernel.launch``.
    """
    c.check_int32("gemv", N=n, K=k)
    sfx = c.KERNEL_SUFFIX[dtype]
    bias_arg: GPUArray | int = bias if bias is not None else 0
    if k % 8 == 0 and x.data_ptr % 16 == 0 and weight.data_ptr % 16 == 0:
        variant = gemv_variant(m)
        prefix, rows_per_block = GEMV_VARIANTS[variant]
        grid = (n + rows_per_block - 1) // rows_per_block
        if variant == "mma":
            kernel("gemv", f"{prefix}{sfx}").launch(
                grid, _WARPS * 32, (x, weight, bias_arg, y, m, n, k, act)
            )
        else:
            kernel("gemv", f"{prefix}{sfx}_m{m}").launch(
                grid, _WARPS * 32, (x, weight, bias_arg, y, n, k, act)
            )
    else:
        grid = (n + _WARPS - 1) // _WARPS
        kernel("gemv", f"gemv_scalar_{sfx}").launch(
            grid, _WARPS * 32, (x, weight, bias_arg, y, m, n, k, act)
        )


def gemv(x: GPUArray, weight: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """``x @ weight.T`` for a few rows of ``x``: the memory-bound GEMV kernel.

    ``x`` is [M, K] with 1 <= M <= 8 (or [K], giving [N]); ``weight`` is [N, K]
    (``nn.Linear`` layout), both float16 or bfloat16, C-contiguous. Accumulates in
    fp32 and rounds once. ``out`` ([M, N], same dtype, not overlapping an input) receives the
    result.
    Use :func:`linear` for a bias, an activation, or more rows.
    """
    _check_x(x, (1, 2))
    dtype = x.dtype
    if dtype not in c.HALF_DTYPES:
        raise TypeError(f"gemv takes float16 or bfloat16 arrays, got {dtype}; use linear()")
    n, k = _check_weight(x, weight, None)
    x_shape = x.shape
    m = 1 if len(x_shape) == 1 else x_shape[0]
    if not 1 <= m <= GEMV_MAX_ROWS:
        raise ValueError(f"gemv takes 1 to {GEMV_MAX_ROWS} rows of x, got {m}; use linear()")
    shape = (n,) if len(x_shape) == 1 else (m, n)
    if out is not None:
        c.check_out(out, shape, dtype)
        _check_no_overlap(out, ("x", x), ("weight", weight))
    y = c.result(out, shape, dtype)
    if c.on_cpu(x):
        c.write_into(
            y, _reference(c.host(x).reshape(m, k), c.host(weight), None, None).reshape(shape)
        )
        return y
    if n:
        _launch_gemv(x, weight, None, y, m, n, k, dtype, 0)
    return y


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
    _check_x(x, None)
    act = _activation_code(activation)
    n, k = _check_weight(x, weight, bias)
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    shape = (*lead, n)
    c.check_out(out, shape, x.dtype)
    _check_no_overlap(out, ("x", x), ("weight", weight), ("bias", bias))
    y = c.result(out, shape, x.dtype)
    if m == 0 or n == 0:
        return y
    if c.on_cpu(x):
        b = None if bias is None else c.host(bias)
        ref = _reference(c.host(x).reshape(m, k), c.host(weight), b, activation)
        c.write_into(y, ref.reshape(shape))
        return y
    dtype = x.dtype
    if m <= GEMV_MAX_ROWS and dtype in c.HALF_DTYPES and k > 0:
        _launch_gemv(x, weight, bias, y, m, n, k, dtype, act)
        return y
    x2, y2 = x.reshape(m, k), y.reshape(m, n)
    gp.matmul(x2, weight.T, out=y2)
    if bias is not None or act != 0:
        c.check_int32("linear", N=n)
        bias_arg: GPUArray | int = bias if bias is not None else 0
        total = m * n
        grid = min((total + 255) // 256, 65535)
        kernel("epilogue", f"bias_act_{c.kernel_suffix(x.dtype)}")(
            y2, bias_arg, m, n, act, grid=grid, block=256
        )
    return y

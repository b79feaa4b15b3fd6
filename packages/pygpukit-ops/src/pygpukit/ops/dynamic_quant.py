"""pygpukit.ops.dynamic_quant: an int8 graph's dynamic activation rounding, emulated in float32.

Dynamically quantized ONNX graphs (onnxruntime's ``quantize_dynamic``: ``DynamicQuantizeLinear``
before each ``MatMulInteger`` / ``ConvInteger``, and ``DynamicQuantizeLSTM``) round every
activation that enters a quantized product to 8 bits, with a scale and zero point computed from
that activation's own range. :func:`dynamic_quant_dequant` applies exactly that rounding and
returns the dequantized float32 values ``(q - zero_point) * scale``, so a float32 product with the
dequantized int8 weights reproduces the graph's integer product up to float32 rounding. Each batch
row is quantized by itself (an int8 graph runs one utterance at a time), over its valid part
only (``lengths``, for padded batches). See ``kernels/dynamic_quant.cu``; on the CPU backend the
same call runs :mod:`.reference.dynamic_quant`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import dynamic_quant as reference

__all__ = ["dynamic_quant_dequant"]


@dataclass(frozen=True, slots=True)
class QuantPlan:
    """``plan(x, y, lengths)`` enqueues one block per batch row (``lengths`` None: whole rows).

    ``lengths`` is an int64 device array of valid steps per row, ``inner`` values each.
    """

    launch: Launch
    row: int
    inner: int

    def __call__(self, x: GPUArray, y: GPUArray, lengths: GPUArray | None) -> None:
        has = lengths is not None
        self.launch(x, y, lengths if has else x, self.row, self.inner, int(has))


@dataclass(frozen=True, slots=True)
class ReferenceQuant:
    """The CPU backend's version: :mod:`.reference.dynamic_quant` on the host buffers."""

    inner: int

    def __call__(self, x: GPUArray, y: GPUArray, lengths: GPUArray | None) -> None:
        counts = None if lengths is None else c.host(lengths) * self.inner
        c.write_into(y, reference.dynamic_quant_dequant(c.host(x), counts))


def _plan_cuda(batch: int, row: int, inner: int, device: int) -> QuantPlan:
    block = kl.constant("dynamic_quant", "DYNAMIC_QUANT_BLOCK")
    launch = Launch(kl.kernel("dynamic_quant", "dynamic_quant_dequant_f32"), batch, block)
    return QuantPlan(launch, row, inner)


def _plan_numpy(batch: int, row: int, inner: int, device: int) -> ReferenceQuant:
    return ReferenceQuant(inner)


#: Plans by (batch, row size, values per step, device).
QUANT_PLANS: PlanCache[QuantPlan | ReferenceQuant] = PlanCache(
    "dynamic_quant", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def _device_lengths(lengths: Any, x: GPUArray) -> GPUArray | None:
    """The valid steps of each row as an int64 device array, or None for whole rows."""
    if lengths is None:
        return None
    if x.ndim < 2:
        raise ValueError(f"lengths needs x of at least 2 dimensions ([B, T, ...]), got {x.shape}")
    if isinstance(lengths, GPUArray):
        lengths = c.check_array(lengths, "lengths", dtypes=(gp.int64,), ndim=1)
        if lengths.shape[0] != x.shape[0]:
            raise ValueError(f"lengths has {lengths.shape[0]} entries for {x.shape[0]} rows of x")
        return lengths  # values outside [0, T] are clamped by the kernel
    host = np.asarray(lengths)
    if host.ndim != 1 or host.shape[0] != x.shape[0] or not np.issubdtype(host.dtype, np.integer):
        raise ValueError(
            f"lengths must be {x.shape[0]} integers (one per row of x), got {host.shape} "
            f"{host.dtype}"
        )
    if (host < 0).any() or (host > x.shape[1]).any():
        raise ValueError(
            f"lengths must lie in [0, {x.shape[1]}] (x.shape[1]) for x of shape {x.shape}, "
            f"got {host.tolist()}"
        )
    return gp.from_numpy(np.ascontiguousarray(host, dtype=np.int64))


def dynamic_quant_dequant(
    x: GPUArray,
    *,
    lengths: Sequence[int] | np.ndarray | GPUArray | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """``x`` float32 ``[B, ...]`` rounded as ONNX ``DynamicQuantizeLinear`` rounds it, dequantized.

    Each row ``x[b]`` gets its own uint8 scale and zero point: its range widened to include 0,
    ``scale = (max - min) / 255``, ``zero_point = round_half_even(clamp(-min / scale, 0, 255))``;
    each value becomes ``round_half_even(clamp(x / scale, -zero_point, 255 - zero_point)) *
    scale``, bit for bit onnxruntime's ``(q - zero_point) * scale``. ``lengths`` (B host ints,
    for ``x`` of at least 2 dimensions) limits row ``b`` to its first ``lengths[b]`` entries of
    axis 1, the valid steps of a padded batch; the rest is copied unchanged. A device int64
    array of the same lengths needs no upload (a CUDA graph's input: there, lengths outside
    ``[0, T]`` are clamped, not refused). ``out`` may be ``x`` (in place).
    """
    x = c.check_array(x, "x", dtypes=(gp.float32,))
    if x.ndim < 1:
        raise ValueError(f"x must have a batch axis, got shape {x.shape}")
    steps = _device_lengths(lengths, x)
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size == 0:
        return y
    row = x.size // x.shape[0]
    inner = row // x.shape[1] if x.ndim > 1 else row
    QUANT_PLANS.get(x.shape[0], row, inner, gp.get_device())(x, y, steps)
    return y

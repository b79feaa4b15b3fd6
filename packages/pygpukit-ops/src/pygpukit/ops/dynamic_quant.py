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
    """``plan(x, y, counts)`` enqueues one block per batch row (``counts`` None: whole rows)."""

    launch: Launch
    row: int

    def __call__(self, x: GPUArray, y: GPUArray, counts: GPUArray | None) -> None:
        self.launch(x, y, counts if counts is not None else x, self.row, int(counts is not None))


@dataclass(frozen=True, slots=True)
class ReferenceQuant:
    """The CPU backend's version: :mod:`.reference.dynamic_quant` on the host buffers."""

    def __call__(self, x: GPUArray, y: GPUArray, counts: GPUArray | None) -> None:
        n = None if counts is None else c.host(counts)
        c.write_into(y, reference.dynamic_quant_dequant(c.host(x), n))


def _plan_cuda(batch: int, row: int, device: int) -> QuantPlan:
    block = kl.constant("dynamic_quant", "DYNAMIC_QUANT_BLOCK")
    launch = Launch(kl.kernel("dynamic_quant", "dynamic_quant_dequant_f32"), batch, block)
    return QuantPlan(launch, row)


def _plan_numpy(batch: int, row: int, device: int) -> ReferenceQuant:
    return ReferenceQuant()


#: Plans by (batch, row size, device).
QUANT_PLANS: PlanCache[QuantPlan | ReferenceQuant] = PlanCache(
    "dynamic_quant", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def _counts(lengths: Any, x: GPUArray) -> GPUArray | None:
    """Per-row numbers of values to quantize (int64 on the device), or None for whole rows."""
    if lengths is None:
        return None
    if isinstance(lengths, GPUArray):
        counts = c.check_array(lengths, "lengths", dtypes=(gp.int64,), ndim=1)
        if counts.shape[0] != x.shape[0]:
            raise ValueError(f"lengths has {counts.shape[0]} entries for {x.shape[0]} rows of x")
        return counts  # already counts of values, on the device
    host = np.asarray(lengths)
    if host.ndim != 1 or host.shape[0] != x.shape[0] or not np.issubdtype(host.dtype, np.integer):
        raise ValueError(
            f"lengths must be {x.shape[0]} integers (one per row of x), got {host.shape} "
            f"{host.dtype}"
        )
    if x.ndim < 2 or (host < 0).any() or (host > x.shape[1]).any():
        raise ValueError(
            f"lengths must lie in [0, {x.shape[1] if x.ndim > 1 else 0}] (x.shape[1]) for x of "
            f"shape {x.shape}, got {host.tolist()}"
        )
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    return gp.from_numpy(np.ascontiguousarray(host.astype(np.int64) * inner))


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
    array instead holds each row's count of values directly (``lengths[b]`` times the product
    of ``x.shape[2:]``), with no upload. ``out`` may be ``x`` (in place).
    """
    x = c.check_array(x, "x", dtypes=(gp.float32,))
    if x.ndim < 1:
        raise ValueError(f"x must have a batch axis, got shape {x.shape}")
    counts = _counts(lengths, x)
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size == 0:
        return y
    row = x.size // x.shape[0]
    QUANT_PLANS.get(x.shape[0], row, gp.get_device())(x, y, counts)
    return y

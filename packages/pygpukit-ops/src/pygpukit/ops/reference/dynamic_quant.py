"""ONNX DynamicQuantizeLinear followed by dequantization, in NumPy (see ``ops.dynamic_quant``)."""

from __future__ import annotations

import numpy as np


def quantization_parameters(values: np.ndarray) -> tuple[np.float32, np.float32]:
    """The uint8 ``(scale, zero_point)`` of ``values``, as onnxruntime computes them.

    The range is widened to include zero; ``scale = (max - min) / 255`` (1 for an all-zero
    range) and ``zero_point = round_half_even(clamp(0 - min / scale, 0, 255))``, in float32.
    """
    v = np.asarray(values, np.float32)
    lo = np.float32(min(float(v.min()), 0.0)) if v.size else np.float32(0.0)
    hi = np.float32(max(float(v.max()), 0.0)) if v.size else np.float32(0.0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
    zero_point = np.rint(np.clip(np.float32(0.0) - lo / scale, np.float32(0), np.float32(255)))
    return scale, np.float32(zero_point)


def quantize_dequantize(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to the uint8 grid of their own range: ``(q - zero_point) * scale``."""
    v = np.asarray(values, np.float32)
    scale, zp = quantization_parameters(v)
    q = np.rint(np.clip(v / scale, -zp, np.float32(255.0) - zp))
    return (q * scale).astype(np.float32)


def dynamic_quant_dequant(x: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    """Each row ``x[b]`` (flattened) quantized over its first ``counts[b]`` values.

    All of them when ``counts`` is None; the rest is copied unchanged.
    """
    b = x.shape[0]
    flat = np.asarray(x, np.float32).reshape(b, -1)
    out = flat.copy()
    for i in range(b):
        n = flat.shape[1] if counts is None else int(min(max(counts[i], 0), flat.shape[1]))
        out[i, :n] = quantize_dequantize(flat[i, :n])
    return out.reshape(x.shape)

"""RMSNorm and LayerNorm (with the fused residual add) in NumPy."""

from __future__ import annotations

import numpy as np


def norm(
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


def add_norm(
    x: np.ndarray,
    residual: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    eps: float,
    layer: bool,
    dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray]:
    """``(s, norm(s))`` with ``s = x + residual`` rounded to ``dtype`` first (as HF and vLLM)."""
    s = (x + residual).astype(dtype)
    sf = s if s.dtype == np.float64 else s.astype(np.float32)
    return s, norm(sf, weight, bias, eps, layer, dtype)

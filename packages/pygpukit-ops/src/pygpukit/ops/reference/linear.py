"""Linear layers in NumPy: float64 product, bias and activation."""

from __future__ import annotations

import math

import numpy as np


def activate(y: np.ndarray, activation: str | None) -> np.ndarray:
    """``activation(y)`` for the names of ``ops.ACTIVATIONS`` (None: identity), in y's precision."""
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * y * (1.0 + erf(y / np.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (y + 0.044715 * y**3)))
    if activation == "silu":
        return y / (1.0 + np.exp(-y))
    return y


def linear(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, activation: str | None
) -> np.ndarray:
    """``activation(x @ w.T + bias)`` in float64 for ``x`` [M, K] and ``w`` [N, K]."""
    y = x.astype(np.float64) @ w.astype(np.float64).T
    if bias is not None:
        y = y + bias.astype(np.float64)
    return activate(y, activation)

"""Norms and activations over [B, C, L] signals in NumPy.

Instance norm / AdaIN, LayerNorm over channels, Snake, LeakyReLU.
"""

from __future__ import annotations

import numpy as np

#: instance_norm's activations, by name.
ACTIVATIONS = (None, "leaky_relu", "snake")


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """``x`` where ``x >= 0``, else ``slope * x``."""
    return np.where(x >= 0, x, x * np.asarray(slope, x.dtype))


def snake(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``x + sin(alpha * x)**2 / alpha`` with ``alpha`` [C] along axis 1 of ``x`` [B, C, L]."""
    a = alpha.astype(x.dtype).reshape(1, -1, 1)
    return x + np.sin(a * x) ** 2 / a


def instance_norm(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    eps: float,
    activation: str | None,
    slope: float,
    alpha: np.ndarray | None,
    lengths: np.ndarray | None = None,
) -> np.ndarray:
    """Normalise each (b, c) row of ``x`` [B, C, L] over L, then the optional parts.

    The affine ``weight``/``bias`` [C], AdaIN's ``* (1 + gamma) + beta`` ([B, C]) and the
    activation, in that order. ``lengths`` [B]: row b's statistics cover its first
    ``lengths[b]`` samples, and the samples after them are zero.
    """
    if lengths is not None:
        out = np.zeros_like(x)
        for b, n in enumerate(np.clip(np.asarray(lengths), 0, x.shape[-1])):
            if n == 0:
                continue
            out[b : b + 1, :, :n] = instance_norm(
                x[b : b + 1, :, :n], weight, bias, _row(gamma, b), _row(beta, b), eps,
                activation, slope, alpha,
            )  # fmt: skip
        return out
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    y = centred / np.sqrt(var + np.asarray(eps, x.dtype))
    if weight is not None:
        y = y * weight.astype(x.dtype)[None, :, None]
    if bias is not None:
        y = y + bias.astype(x.dtype)[None, :, None]
    if gamma is not None:
        y = y * (1 + gamma.astype(x.dtype)[:, :, None])
    if beta is not None:
        y = y + beta.astype(x.dtype)[:, :, None]
    if activation == "leaky_relu":
        y = leaky_relu(y, slope)
    elif activation == "snake":
        assert alpha is not None
        y = snake(y, alpha)
    return y


def _row(a: np.ndarray | None, b: int) -> np.ndarray | None:
    return None if a is None else a[b : b + 1]


def channel_layernorm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float
) -> np.ndarray:
    """LayerNorm of ``x`` [B, C, L] over the channels C at each position, ``* weight + bias``."""
    mean = x.mean(axis=1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=1, keepdims=True)
    y = centred / np.sqrt(var + np.asarray(eps, x.dtype)) * weight.astype(x.dtype)[None, :, None]
    if bias is not None:
        y = y + bias.astype(x.dtype)[None, :, None]
    return y

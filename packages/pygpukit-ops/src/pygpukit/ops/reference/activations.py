"""Gated activations, embedding lookup and row softmax in NumPy."""

from __future__ import annotations

import math

import numpy as np


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def activate(g: np.ndarray, act: str) -> np.ndarray:
    """``act(g)`` for ``silu``, ``gelu_tanh`` or ``gelu`` in the precision of ``g``."""
    if act == "silu":
        with np.errstate(over="ignore"):
            return g / (1 + np.exp(-g))
    if act == "gelu_tanh":  # 0.5 g (1 + tanh(u)), as g / (1 + exp(-2u)): no cancellation at g << 0
        u = np.asarray(0.7978845608028654, g.dtype) * (g + np.asarray(0.044715, g.dtype) * g**3)
        with np.errstate(over="ignore"):
            return g / (1 + np.exp(-2 * u))
    return (0.5 * g * (1 + _erf(g.astype(np.float64) / math.sqrt(2.0)))).astype(g.dtype)


def gated(x: np.ndarray, act: str) -> np.ndarray:
    """``act(x[..., :d]) * x[..., d:]`` for ``x`` ``[..., 2*d]`` (float32 or wider)."""
    d = x.shape[-1] // 2
    return activate(x[..., :d], act) * x[..., d:]


def embedding(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[ids]``; ``IndexError`` for an id outside ``[0, V)``."""
    vocab = table.shape[0]
    flat = ids.reshape(-1).astype(np.int64)
    bad = (flat < 0) | (flat >= vocab)
    if bad.any():
        raise IndexError(f"ids must be in [0, {vocab}) (rows of table); got {int(flat[bad][0])}")
    return table[flat].reshape((*ids.shape, table.shape[1]))


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (float32 or wider)."""
    if x.size == 0:
        return x
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

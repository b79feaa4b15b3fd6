"""pygpukit.ops.activations: gated activations (SwiGLU, GeGLU), embedding lookup, row softmax.

- :func:`silu_mul` and :func:`gelu_mul` take the concatenated ``[..., 2*d]`` output of a fused
  gate/up projection (first half gate, second half up) and return ``act(gate) * up``,
  ``[..., d]``: the MLP of Llama/Qwen/Mistral (SiLU) and Gemma/GeGLU models (GELU);
- :func:`embedding` gathers rows of a ``[V, D]`` table by integer ids;
- :func:`softmax` normalises the last axis, one row per thread group with the row held in
  registers (one read, one write).

Math is float32 for every storage dtype, rounded once to the output dtype.
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

__all__ = ["embedding", "gelu_mul", "silu_mul", "softmax"]

_ACT = {"silu": 0, "gelu_tanh": 1, "gelu": 2}
_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Blocks of the grid-stride kernels: enough to fill any current GPU several times over.
_MAX_BLOCKS = 65535


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _activate(g: np.ndarray, act: str) -> np.ndarray:
    """``act(g)`` in the precision of ``g`` (float32 or float64)."""
    if act == "silu":
        with np.errstate(over="ignore"):
            return g / (1 + np.exp(-g))
    if act == "gelu_tanh":  # 0.5 g (1 + tanh(u)), as g / (1 + exp(-2u)): no cancellation at g << 0
        u = np.asarray(0.7978845608028654, g.dtype) * (g + np.asarray(0.044715, g.dtype) * g**3)
        with np.errstate(over="ignore"):
            return g / (1 + np.exp(-2 * u))
    return (0.5 * g * (1 + _erf(g.astype(np.float64) / math.sqrt(2.0)))).astype(g.dtype)


def _gated(x: Any, act: str, out: GPUArray | None) -> GPUArray:
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES)
    if x.ndim < 1 or x.shape[-1] % 2:
        raise ValueError(
            f"x must be [..., 2*d] (gate and up concatenated on the last axis), got {x.shape}"
        )
    d = x.shape[-1] // 2
    shape = (*x.shape[:-1], d)
    c.check_out(out, shape, x.dtype)
    y = c.result(out, shape, x.dtype)
    if c.on_cpu(x):
        h = c.f32(x)
        c.write_into(y, _activate(h[..., :d], act) * h[..., d:])
        return y
    rows = x.size // (2 * d) if d else 0
    if rows == 0:
        return y
    c.check_int32("silu_mul/gelu_mul", d=d)
    vec = _rows.vector_width(d, x.itemsize, x, y)
    total = rows * (d // vec)
    block = 256
    grid = max(1, min(_MAX_BLOCKS, -(-total // block)))
    kernel = kl.kernel("activations", f"gated_{c.kernel_suffix(x.dtype)}_v{vec}")
    kernel.launch(grid, block, (x, y, rows, d, _ACT[act]))
    return y


def silu_mul(x: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """SwiGLU: ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2*d]``; ``[..., d]``.

    ``silu(g) = g / (1 + exp(-g))``. float32, float16 or bfloat16, computed in float32 and
    rounded once (HF rounds ``silu(g)`` to the dtype before the product: a difference of one
    rounding).
    """
    return _gated(x, "silu", out)


def gelu_mul(x: GPUArray, approximate: str = "tanh", *, out: GPUArray | None = None) -> GPUArray:
    """GeGLU: ``gelu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2*d]``; ``[..., d]``.

    ``approximate="tanh"`` (``gelu_pytorch_tanh``, Gemma) or ``"none"`` (the exact erf form).
    """
    validation.choice(approximate, ("tanh", "none"), "approximate", "gelu_mul")
    return _gated(x, "gelu_tanh" if approximate == "tanh" else "gelu", out)


def embedding(ids: GPUArray, table: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """Rows of ``table`` ``[V, D]`` at ``ids`` (int32 or int64, any shape): ``[*ids.shape, D]``.

    Any table dtype. On the CPU backend an id outside ``[0, V)`` raises ``IndexError``; on the
    GPU (where checking would need a synchronisation) it yields a row of zeros, never a fault.
    """
    ids = c.check_array(ids, "ids", dtypes=_ID_DTYPES)
    table = c.check_array(table, "table", ndim=2)
    vocab, dim = table.shape
    shape = (*ids.shape, dim)
    c.check_out(out, shape, table.dtype)
    y = c.result(out, shape, table.dtype)
    if c.on_cpu(ids):
        flat = c.host(ids).reshape(-1).astype(np.int64)
        bad = (flat < 0) | (flat >= vocab)
        if bad.any():
            raise IndexError(
                f"ids must be in [0, {vocab}) (rows of table); got {int(flat[bad][0])}"
            )
        c.host(y)[...] = c.host(table)[flat].reshape(shape)
        return y
    n_ids = ids.size
    row_bytes = dim * table.itemsize
    if n_ids == 0 or row_bytes == 0:
        return y
    word = next(
        w
        for w in (16, 8, 4, 2, 1)
        if row_bytes % w == 0 and table.data_ptr % w == 0 and y.data_ptr % w == 0
    )
    words = row_bytes // word
    c.check_int32("embedding", words=words)
    block = 256
    grid = max(1, min(_MAX_BLOCKS, -(-(n_ids * words) // block)))
    kernel = kl.kernel("activations", f"embedding_w{word}")
    kernel.launch(grid, block, (ids, int(ids.dtype == np.int64), table, y, n_ids, vocab, words))
    return y


def softmax(x: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """Softmax over the last axis of ``x`` (float32, float16 or bfloat16, any leading shape).

    ``exp(x - max) / sum(exp(x - max))`` in float32, rounded once; ``out`` may be ``x``.
    """
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES)
    if x.ndim < 1:
        raise ValueError(f"x must have at least 1 dimension, got shape {x.shape}")
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    width = x.shape[-1]
    if c.on_cpu(x):
        h = c.f32(x)
        e = np.exp(h - h.max(axis=-1, keepdims=True)) if h.size else h
        c.write_into(y, e / e.sum(axis=-1, keepdims=True) if h.size else e)
        return y
    rows = x.size // width if width else 0
    if rows == 0:
        return y
    c.check_int32("softmax", width=width)
    vec = _rows.vector_width(width, x.itemsize, x, y)
    plan = _rows.plan_rows(rows, width, vec)
    kernel = kl.kernel("activations", f"softmax_{c.kernel_suffix(x.dtype)}_{plan.suffix}")
    kernel.launch(plan.grid, plan.block, (x, y, rows, width, plan.group))
    return y

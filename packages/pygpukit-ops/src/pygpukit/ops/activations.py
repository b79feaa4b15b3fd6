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

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import _rows
from ._plan import Launch, PlanCache, per_backend
from .reference import activations as reference

__all__ = ["embedding", "gelu_mul", "silu_mul", "softmax"]

_ACT = {"silu": 0, "gelu_tanh": 1, "gelu": 2}
_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Blocks of the grid-stride kernels: enough to fill any current GPU several times over.
_MAX_BLOCKS = 65535


@dataclass(frozen=True, slots=True)
class ArgsPlan:
    """A launch whose size arguments are fixed: ``plan(*arrays)`` appends them and enqueues it."""

    launch: Launch
    tail: tuple[int, ...]

    def __call__(self, *arrays: GPUArray | int) -> None:
        self.launch(*arrays, *self.tail)


@dataclass(frozen=True, slots=True)
class ReferenceGated:
    """The CPU backend's gated activation: ``plan(x, y)``."""

    act: str

    def __call__(self, x: GPUArray, y: GPUArray) -> None:
        c.write_into(y, reference.gated(c.f32(x), self.act))


def _plan_gated_cuda(
    rows: int, d: int, vec: int, dtype: np.dtype[Any], act: str, device: int
) -> ArgsPlan | ReferenceGated:
    c.check_int32("silu_mul/gelu_mul", d=d)
    grid = max(1, min(_MAX_BLOCKS, -(-(rows * (d // vec)) // 256)))
    kernel = kl.kernel("activations", f"gated_{c.kernel_suffix(dtype)}_v{vec}")
    return ArgsPlan(Launch(kernel, grid, 256), (rows, d, _ACT[act]))


def _plan_gated_numpy(
    rows: int, d: int, vec: int, dtype: np.dtype[Any], act: str, device: int
) -> ArgsPlan | ReferenceGated:
    return ReferenceGated(act)


#: Gated-activation plans by (rows, d, vector width, dtype, activation, device).
GATED_PLANS: PlanCache[ArgsPlan | ReferenceGated] = PlanCache(
    "gated", per_backend(cpu=_plan_gated_numpy, cuda=_plan_gated_cuda)
)


def gated_plan(x: GPUArray, y: GPUArray, act: str) -> ArgsPlan | ReferenceGated | None:
    """The (cached) plan of ``act(gate) * up`` from ``x`` [..., 2d] into ``y``; None if empty."""
    d = x.shape[-1] // 2
    rows = x.size // (2 * d) if d else 0
    if rows == 0:
        return None
    vec = _rows.vector_width(d, x.itemsize, x, y)
    return GATED_PLANS.get(rows, d, vec, x.dtype, act, gp.get_device())


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
    plan = gated_plan(x, y, act)
    if plan is not None:
        plan(x, y)
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
    dim = table.shape[1]
    shape = (*ids.shape, dim)
    c.check_out(out, shape, table.dtype)
    y = c.result(out, shape, table.dtype)
    n_ids = ids.size
    row_bytes = dim * table.itemsize
    if n_ids == 0 or row_bytes == 0:
        return y
    embedding_plan(ids, table, y)(ids, int(ids.dtype == np.int64), table, y)
    return y


@dataclass(frozen=True, slots=True)
class ReferenceEmbedding:
    """The CPU backend's lookup: ``plan(ids, ids_are_int64, table, y)``."""

    def __call__(self, ids: GPUArray, wide: int, table: GPUArray, y: GPUArray) -> None:
        c.host(y)[...] = reference.embedding(c.host(ids), c.host(table))


def _plan_embedding_cuda(
    n_ids: int, vocab: int, row_bytes: int, word: int, device: int
) -> ArgsPlan | ReferenceEmbedding:
    words = row_bytes // word
    c.check_int32("embedding", words=words)
    grid = max(1, min(_MAX_BLOCKS, -(-(n_ids * words) // 256)))
    kernel = kl.kernel("activations", f"embedding_w{word}")
    return ArgsPlan(Launch(kernel, grid, 256), (n_ids, vocab, words))


def _plan_embedding_numpy(
    n_ids: int, vocab: int, row_bytes: int, word: int, device: int
) -> ArgsPlan | ReferenceEmbedding:
    return ReferenceEmbedding()


#: Embedding plans by (ids, vocabulary, row bytes, copy word size, device).
EMBEDDING_PLANS: PlanCache[ArgsPlan | ReferenceEmbedding] = PlanCache(
    "embedding", per_backend(cpu=_plan_embedding_numpy, cuda=_plan_embedding_cuda)
)


def embedding_plan(ids: GPUArray, table: GPUArray, y: GPUArray) -> ArgsPlan | ReferenceEmbedding:
    """The (cached) plan of a lookup of ``ids`` (at least one) in ``table`` into ``y``."""
    vocab, dim = table.shape
    row_bytes = dim * table.itemsize
    word = next(
        w
        for w in (16, 8, 4, 2, 1)
        if row_bytes % w == 0 and table.data_ptr % w == 0 and y.data_ptr % w == 0
    )
    return EMBEDDING_PLANS.get(ids.size, vocab, row_bytes, word, gp.get_device())


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
    rows = x.size // width if width else 0
    if rows == 0:
        return y
    vec = _rows.vector_width(width, x.itemsize, x, y)
    SOFTMAX_PLANS.get(rows, width, vec, x.dtype, gp.get_device())(x, y)
    return y


@dataclass(frozen=True, slots=True)
class ReferenceSoftmax:
    """The CPU backend's softmax: ``plan(x, y)``."""

    def __call__(self, x: GPUArray, y: GPUArray) -> None:
        c.write_into(y, reference.softmax(c.f32(x)))


def _plan_softmax_cuda(
    rows: int, width: int, vec: int, dtype: np.dtype[Any], device: int
) -> ArgsPlan | ReferenceSoftmax:
    c.check_int32("softmax", width=width)
    rp = _rows.plan_rows(rows, width, vec)
    kernel = kl.kernel("activations", f"softmax_{c.kernel_suffix(dtype)}_{rp.suffix}")
    return ArgsPlan(Launch(kernel, rp.grid, rp.block), (rows, width, rp.group))


def _plan_softmax_numpy(
    rows: int, width: int, vec: int, dtype: np.dtype[Any], device: int
) -> ArgsPlan | ReferenceSoftmax:
    return ReferenceSoftmax()


#: Softmax plans by (rows, width, vector width, dtype, device).
SOFTMAX_PLANS: PlanCache[ArgsPlan | ReferenceSoftmax] = PlanCache(
    "softmax", per_backend(cpu=_plan_softmax_numpy, cuda=_plan_softmax_cuda)
)

"""pygpukit.ops.recurrent: LSTM and bidirectional LSTM over a whole sequence.

One layer of ``torch.nn.LSTM`` with its parameter names and layouts, so a PyTorch state dict
maps directly: ``weight_ih_l0`` -> ``w_ih`` [4H, I], ``weight_hh_l0`` -> ``w_hh`` [4H, H],
``bias_ih_l0`` / ``bias_hh_l0`` -> ``b_ih`` / ``b_hh`` [4H], and the ``*_reverse`` tensors of a
bidirectional LSTM -> ``w_ih_reverse`` ... Gate rows in PyTorch's order i, f, g, o::

    gates = x_t @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)

On the GPU the input projections of all steps are one matmul per direction (tensor cores for
the 16-bit types), rounded to the dtype; then one fused kernel launch per time step computes
``h @ w_hh.T``, the gates and the state update for both directions at once (the reverse
direction walks time backwards in the same launch). The state stays float32 between steps.
See ``kernels/lstm.cu``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import recurrent as reference

__all__ = ["lstm"]

#: (w_ih, w_hh, b_ih, b_hh) of one direction.
Direction = tuple[GPUArray, GPUArray, GPUArray | None, GPUArray | None]


@dataclass(frozen=True, slots=True)
class LstmShape:
    """The sizes of one call: batch, steps, input and hidden widths, directions, layout."""

    batch: int
    steps: int
    inputs: int
    hidden: int
    dirs: int
    batch_first: bool


@dataclass(frozen=True, slots=True)
class LstmPlan:
    """The GPU LSTM: ``plan(x, directions, h0, c0, lengths)`` -> ``(y, h_n, c_n)``."""

    s: LstmShape
    step: Launch

    def __call__(
        self,
        x: GPUArray,
        directions: Sequence[Direction],
        h0: GPUArray | None,
        c0: GPUArray | None,
        lengths: np.ndarray | None,
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        s = self.s
        rows = s.batch * s.steps
        xw = gp.empty((s.dirs, rows, 4 * s.hidden), x.dtype)
        flat = x.reshape(rows, s.inputs)
        for d, (w_ih, _, _, _) in enumerate(directions):
            gp.matmul(flat, w_ih.swapaxes(0, 1), out=xw[d])
        state = (s.dirs, s.batch, s.hidden)
        h = h0.astype(gp.float32) if h0 is not None else gp.zeros(state, gp.float32)
        h_next = gp.empty(state, gp.float32)
        cell = c0.astype(gp.float32) if c0 is not None else gp.zeros(state, gp.float32)
        lens = gp.from_numpy(lengths) if lengths is not None else 0
        y = gp.empty((*x.shape[:2], s.dirs * s.hidden), x.dtype)
        fw, bw = directions[0], directions[-1]
        weights = (fw[1], bw[1], _ptr(fw[2]), _ptr(bw[2]), _ptr(fw[3]), _ptr(bw[3]))
        row_b, row_t = (s.steps, 1) if s.batch_first else (1, s.batch)
        for step in range(s.steps):
            self.step(
                xw, *weights, h, h_next, cell, y, lens, s.batch, s.steps, s.hidden, s.dirs,
                step, row_b, row_t,
            )  # fmt: skip
            h, h_next = h_next, h
        return y, h.astype(x.dtype), cell.astype(x.dtype)


def _ptr(a: GPUArray | None) -> GPUArray | int:
    return a if a is not None else 0


@dataclass(frozen=True, slots=True)
class ReferenceLstm:
    """The CPU backend's LSTM: :mod:`.reference.recurrent` per direction on the host buffers."""

    s: LstmShape

    def __call__(
        self,
        x: GPUArray,
        directions: Sequence[Direction],
        h0: GPUArray | None,
        c0: GPUArray | None,
        lengths: np.ndarray | None,
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        s = self.s
        xs = c.f32(x) if s.batch_first else c.f32(x).transpose(1, 0, 2)
        zeros = np.zeros((s.dirs, s.batch, s.hidden), xs.dtype)
        h_init = c.f32(h0) if h0 is not None else zeros
        c_init = c.f32(c0) if c0 is not None else zeros
        ys, hs, cs = [], [], []
        for d, (w_ih, w_hh, b_ih, b_hh) in enumerate(directions):
            y, h, cell = reference.lstm_direction(
                xs, c.f32(w_ih), c.f32(w_hh), _host(b_ih), _host(b_hh), h_init[d], c_init[d],
                lengths, reverse=d == 1,
            )  # fmt: skip
            ys.append(y)
            hs.append(h)
            cs.append(cell)
        y = np.concatenate(ys, axis=-1)
        if not s.batch_first:
            y = y.transpose(1, 0, 2)
        return (
            c.to_array(y, x.dtype),
            c.to_array(np.stack(hs), x.dtype),
            c.to_array(np.stack(cs), x.dtype),
        )


def _host(a: GPUArray | None) -> np.ndarray | None:
    return c.f32(a) if a is not None else None


def _plan_cuda(s: LstmShape, dtype: np.dtype[Any], device: int) -> LstmPlan:
    c.check_int32("lstm", hidden=s.hidden, batch=s.batch, steps=s.steps)
    kernel = kl.kernel("lstm", f"lstm_step_{c.kernel_suffix(dtype)}")
    return LstmPlan(s, Launch(kernel, (s.hidden, s.dirs), kl.constant("lstm", "LSTM_BLOCK")))


def _plan_numpy(s: LstmShape, dtype: np.dtype[Any], device: int) -> ReferenceLstm:
    return ReferenceLstm(s)


#: LSTM plans by (shape, dtype, device).
PLANS: PlanCache[LstmPlan | ReferenceLstm] = PlanCache(
    "lstm", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def _check_direction(
    x: GPUArray, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, suffix: str
) -> Direction:
    w_ih = c.check_array(w_ih, f"w_ih{suffix}", ndim=2)
    w_hh = c.check_array(w_hh, f"w_hh{suffix}", ndim=2)
    c.check_same_dtype(x, (f"w_ih{suffix}", w_ih), (f"w_hh{suffix}", w_hh))
    hidden = w_hh.shape[1]
    if hidden == 0 or w_hh.shape[0] != 4 * hidden:
        raise ValueError(
            f"lstm: w_hh{suffix} must be [4*H, H] (gates i, f, g, o stacked), got "
            f"{tuple(w_hh.shape)}"
        )
    c.check_shape(w_ih, f"w_ih{suffix}", (4 * hidden, x.shape[-1]))
    biases: list[GPUArray | None] = []
    for name, b in ((f"b_ih{suffix}", b_ih), (f"b_hh{suffix}", b_hh)):
        if b is not None:
            b = c.check_array(b, name, ndim=1)
            c.check_same_dtype(x, (name, b))
            c.check_shape(b, name, (4 * hidden,))
        biases.append(b)
    return w_ih, w_hh, biases[0], biases[1]


def _check_lengths(lengths: Any, batch: int, steps: int) -> np.ndarray | None:
    if lengths is None:
        return None
    if isinstance(lengths, GPUArray):
        raise TypeError("lstm: lengths must be a host sequence of ints (a list or NumPy array)")
    values = np.asarray(lengths)
    if values.shape != (batch,) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"lstm: lengths must be {batch} integers (one per batch row)")
    if values.min() < 0 or values.max() > steps:
        raise ValueError(f"lstm: every length must be in [0, {steps}], got {values.tolist()}")
    return np.ascontiguousarray(values, dtype=np.int32)


def lstm(
    x: GPUArray,
    w_ih: GPUArray,
    w_hh: GPUArray,
    b_ih: GPUArray | None = None,
    b_hh: GPUArray | None = None,
    *,
    w_ih_reverse: GPUArray | None = None,
    w_hh_reverse: GPUArray | None = None,
    b_ih_reverse: GPUArray | None = None,
    b_hh_reverse: GPUArray | None = None,
    h0: GPUArray | None = None,
    c0: GPUArray | None = None,
    lengths: Sequence[int] | np.ndarray | None = None,
    batch_first: bool = True,
) -> tuple[GPUArray, tuple[GPUArray, GPUArray]]:
    """One LSTM layer over a sequence, as ``torch.nn.LSTM`` (``num_layers=1``).

    ``x`` is [B, T, I] (``batch_first=True``, the default) or [T, B, I]; ``w_ih`` [4H, I],
    ``w_hh`` [4H, H], ``b_ih``/``b_hh`` [4H] (PyTorch's ``weight_ih_l0`` ...; gate rows i, f,
    g, o), all of ``x``'s dtype (float32, float16 or bfloat16). Passing ``w_ih_reverse`` and
    ``w_hh_reverse`` (and the optional reverse biases) makes it bidirectional: the output holds
    the forward then the backward hidden states on its last axis. ``h0``/``c0`` [D, B, H]
    (D = 2 when bidirectional) default to zeros. ``lengths`` (B host ints in [0, T]) gives each
    batch row's true length: later steps output zeros and leave the state alone, as PyTorch's
    packed sequences.

    Returns ``(y, (h_n, c_n))``: ``y`` [B, T, D*H] (or [T, B, D*H]), ``h_n`` and ``c_n``
    [D, B, H], in ``x``'s dtype. Returns without waiting on the GPU.
    """
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=3)
    batch_first = validation.boolean(batch_first, "batch_first", "lstm")
    batch, steps = (x.shape[0], x.shape[1]) if batch_first else (x.shape[1], x.shape[0])
    if batch == 0 or steps == 0:
        raise ValueError(f"lstm: x {tuple(x.shape)} has no sequence to run (B and T >= 1)")
    directions = [_check_direction(x, w_ih, w_hh, b_ih, b_hh, "")]
    if (w_ih_reverse is None) != (w_hh_reverse is None):
        raise ValueError("lstm: a bidirectional LSTM needs both w_ih_reverse and w_hh_reverse")
    if w_ih_reverse is None and (b_ih_reverse is not None or b_hh_reverse is not None):
        raise ValueError("lstm: reverse biases given without w_ih_reverse / w_hh_reverse")
    if w_ih_reverse is not None:
        backward = _check_direction(x, w_ih_reverse, w_hh_reverse, b_ih_reverse, b_hh_reverse,
                                    "_reverse")  # fmt: skip
        if backward[1].shape != directions[0][1].shape:
            raise ValueError(
                f"lstm: w_hh_reverse {tuple(backward[1].shape)} must match w_hh "
                f"{tuple(directions[0][1].shape)}"
            )
        directions.append(backward)
    hidden, dirs = directions[0][1].shape[1], len(directions)
    for name, state in (("h0", h0), ("c0", c0)):
        if state is not None:
            state = c.check_array(state, name, ndim=3)
            c.check_same_dtype(x, (name, state))
            c.check_shape(state, name, (dirs, batch, hidden))
    lens = _check_lengths(lengths, batch, steps)
    s = LstmShape(batch, steps, x.shape[-1], hidden, dirs, batch_first)
    y, h_n, c_n = PLANS.get(s, x.dtype, gp.get_device())(x, directions, h0, c0, lens)
    return y, (h_n, c_n)

"""pygpukit.ops.recurrent: LSTM and bidirectional LSTM over a whole sequence.

One layer of ``torch.nn.LSTM`` with its parameter names and layouts, so a PyTorch state dict
maps directly: ``weight_ih_l0`` -> ``w_ih`` [4H, I], ``weight_hh_l0`` -> ``w_hh`` [4H, H],
``bias_ih_l0`` / ``bias_hh_l0`` -> ``b_ih`` / ``b_hh`` [4H], and the ``*_reverse`` tensors of a
bidirectional LSTM -> ``w_ih_reverse`` ... Gate rows in PyTorch's order i, f, g, o::

    gates = x_t @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)

On the GPU the input projections of all steps are one matmul per direction (tensor cores for
the 16-bit types), rounded to the dtype. The recurrence then runs in one of two kernels of
``kernels/lstm.cu``, both with a float32 state and float32 sums whatever the dtype:

- the sequence kernel (SM 9.0 and newer, ``8 <= hidden <= 256``): one launch for the whole
  sequence and both directions. A cluster of 8 blocks runs one direction for a slice of the
  batch, ``w_hh`` split over its blocks and held in registers for every step, ``h`` passed
  between them through distributed shared memory;
- the step kernel (every other case, or ``PYGPUKIT_LSTM_KERNEL=step``): one launch per time
  step for both directions at once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._plan import Launch, PlanCache, per_backend
from .reference import recurrent as reference

__all__ = ["lstm"]

#: (w_ih, w_hh, b_ih, b_hh) of one direction.
Direction = tuple[GPUArray, GPUArray, GPUArray | None, GPUArray | None]
#: Each batch row's valid length: int32 on the host, an integer GPUArray, or None (all full).
Lengths = np.ndarray | GPUArray | None


@dataclass(frozen=True, slots=True)
class LstmShape:
    """The sizes of one call: batch, steps, input and hidden widths, directions, layout."""

    batch: int
    steps: int
    inputs: int
    hidden: int
    dirs: int
    batch_first: bool


def _input_projections(s: LstmShape, x: GPUArray, directions: Sequence[Direction]) -> GPUArray:
    """``x @ w_ih.T`` of every step and direction: [D, B*T, 4H] in ``x``'s dtype and row order."""
    rows = s.batch * s.steps
    xw = gp.empty((s.dirs, rows, 4 * s.hidden), x.dtype)
    flat = x.reshape(rows, s.inputs)
    for d, (w_ih, _, _, _) in enumerate(directions):
        gp.matmul(flat, w_ih.swapaxes(0, 1), out=xw[d])
    return xw


def _row_strides(s: LstmShape) -> tuple[int, int]:
    """How far apart (in rows of x) consecutive batch rows and consecutive steps are."""
    return (s.steps, 1) if s.batch_first else (1, s.batch)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What both GPU plans start from: the input projections, the output and the lengths."""

    xw: GPUArray  # [D, B*T, 4H]: x @ w_ih.T of every step and direction
    y: GPUArray  # [B, T, D*H] (or [T, B, D*H]), to be written
    lens: GPUArray | int  # int32 [B] valid lengths, or 0 for "every row is full"
    weights: tuple[GPUArray | int, ...]  # w_hh, w_hh_reverse, b_ih, b_ih_reverse, b_hh, ...
    rows: tuple[int, int]  # :func:`_row_strides`


def _prepare(
    s: LstmShape, x: GPUArray, directions: Sequence[Direction], lengths: Lengths
) -> _Prepared:
    """The projections, output buffer, lengths and recurrent weights of one call."""
    fw, bw = directions[0], directions[-1]
    return _Prepared(
        xw=_input_projections(s, x, directions),
        y=gp.empty((*x.shape[:2], s.dirs * s.hidden), x.dtype),
        lens=_device_lengths(lengths),
        weights=(fw[1], bw[1], _ptr(fw[2]), _ptr(bw[2]), _ptr(fw[3]), _ptr(bw[3])),
        rows=_row_strides(s),
    )


def _device_lengths(lengths: Lengths) -> GPUArray | int:
    """The kernels' int32 ``[B]`` lengths (host ones uploaded), or 0 for "no lengths"."""
    if lengths is None:
        return 0
    if isinstance(lengths, GPUArray):
        return lengths.astype(gp.int32, copy=False)
    return gp.from_numpy(lengths)


@dataclass(frozen=True, slots=True)
class LstmPlan:
    """The GPU LSTM, one step kernel per time step: ``plan(x, directions, h0, c0, lengths)``."""

    s: LstmShape
    step: Launch

    def __call__(
        self,
        x: GPUArray,
        directions: Sequence[Direction],
        h0: GPUArray | None,
        c0: GPUArray | None,
        lengths: Lengths,
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        s = self.s
        p = _prepare(s, x, directions, lengths)
        state = (s.dirs, s.batch, s.hidden)
        h = h0.astype(gp.float32) if h0 is not None else gp.zeros(state, gp.float32)
        h_next = gp.empty(state, gp.float32)
        cell = c0.astype(gp.float32) if c0 is not None else gp.zeros(state, gp.float32)
        for step in range(s.steps):
            self.step(
                p.xw, *p.weights, h, h_next, cell, p.y, p.lens, s.batch, s.steps, s.hidden,
                s.dirs, step, *p.rows,
            )  # fmt: skip
            h, h_next = h_next, h
        return p.y, h.astype(x.dtype), cell.astype(x.dtype)


@dataclass(frozen=True, slots=True)
class SequenceLstmPlan:
    """The GPU LSTM in one launch of the sequence kernel (its grid made for this shape).

    ``slice_rows`` batch rows per cluster of blocks (one cluster per slice and direction).
    """

    s: LstmShape
    run: Launch
    slice_rows: int

    def __call__(
        self,
        x: GPUArray,
        directions: Sequence[Direction],
        h0: GPUArray | None,
        c0: GPUArray | None,
        lengths: Lengths,
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        s = self.s
        p = _prepare(s, x, directions, lengths)
        state = (s.dirs, s.batch, s.hidden)
        h_n, c_n = gp.empty(state, x.dtype), gp.empty(state, x.dtype)
        self.run(
            p.xw, *p.weights, _ptr(h0), _ptr(c0), h_n, c_n, p.y, p.lens, s.batch, s.steps,
            s.hidden, s.dirs, self.slice_rows, *p.rows,
        )  # fmt: skip
        return p.y, h_n, c_n


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
        lengths: Lengths,
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        s = self.s
        if isinstance(lengths, GPUArray):
            lengths = lengths.to_numpy()
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


@dataclass(frozen=True, slots=True)
class SequenceLimits:
    """What the sequence kernel handles (its ``PGK_CONSTANT`` values in ``kernels/lstm.cu``)."""

    cluster: int  # blocks per cluster: the hidden units of a direction are split over them
    min_hidden: int
    max_hidden: int
    max_rows: int  # batch rows per cluster
    rows_per_pass: int  # batch rows one pass over the weights serves
    lanes: int  # threads per hidden unit of a block

    @classmethod
    def from_kernels(cls) -> SequenceLimits:
        """The limits the built kernel file declares."""
        get = functools.partial(kl.constant, "lstm")
        return cls(
            get("LSTM_SEQ_CLUSTER"), get("LSTM_SEQ_MIN_HIDDEN"), get("LSTM_SEQ_MAX_HIDDEN"),
            get("LSTM_SEQ_MAX_ROWS"), get("LSTM_SEQ_PASS"), get("LSTM_SEQ_LANES"),
        )  # fmt: skip


def uses_sequence_kernel(
    hidden: int, sm: tuple[int, int] | None, choice: str, limits: SequenceLimits
) -> bool:
    """Whether an LSTM of this ``hidden`` size runs the one-launch sequence kernel.

    It needs thread-block clusters (SM 9.0 and newer), ``hidden`` within the kernel's limits
    (its weights live in registers: 4 x 16 per thread, at most 512 threads a block), and the
    ``lstm_kernel`` knob (``PYGPUKIT_LSTM_KERNEL``) left at ``auto``.
    """
    return (
        choice == "auto"
        and sm is not None
        and tuple(sm) >= (9, 0)
        and limits.min_hidden <= hidden <= limits.max_hidden
    )


def slice_rows(batch: int, dirs: int, sm_count: int, limits: SequenceLimits) -> int:
    """Batch rows per cluster of the sequence kernel.

    Spreads the batch over the clusters that run at once (one block per SM; a cluster's
    blocks share a GPC, so one SM in nine is left as slack) so each step's dot products stay
    short, in whole passes of ``rows_per_pass`` rows (a pass costs the same for 2 to 4 rows)
    and at most ``max_rows``.
    """
    clusters = max(1, sm_count // (limits.cluster + 1) // dirs)
    rows = -(-batch // clusters)
    if rows > 1:
        step = limits.rows_per_pass
        rows = -(-rows // step) * step
    return min(rows, limits.max_rows)


def sequence_plan(
    s: LstmShape, dtype: np.dtype[Any], rows: int, limits: SequenceLimits
) -> SequenceLstmPlan:
    """The sequence kernel's plan for ``s`` on the current device.

    ``rows``: batch rows per cluster, 1 to ``limits.max_rows`` (:func:`slice_rows` chooses).
    """
    slices = -(-s.batch // rows)
    units = -(-s.hidden // limits.cluster)
    block = -(-units * limits.lanes // 32) * 32
    kernel = kl.kernel("lstm", f"lstm_sequence_{c.kernel_suffix(dtype)}")
    return SequenceLstmPlan(s, Launch(kernel, (limits.cluster * slices, s.dirs), block), rows)


def _plan_cuda(s: LstmShape, dtype: np.dtype[Any], device: int) -> LstmPlan | SequenceLstmPlan:
    c.check_int32("lstm", hidden=s.hidden, batch=s.batch, steps=s.steps)
    suffix = c.kernel_suffix(dtype)
    info = gp.get_device_info(device)
    limits = SequenceLimits.from_kernels()
    if uses_sequence_kernel(s.hidden, info["sm"], config.get().lstm_kernel, limits):
        rows = slice_rows(s.batch, s.dirs, int(info["sm_count"] or 1), limits)
        return sequence_plan(s, dtype, rows, limits)
    kernel = kl.kernel("lstm", f"lstm_step_{suffix}")
    return LstmPlan(s, Launch(kernel, (s.hidden, s.dirs), kl.constant("lstm", "LSTM_BLOCK")))


def _plan_numpy(s: LstmShape, dtype: np.dtype[Any], device: int) -> ReferenceLstm:
    return ReferenceLstm(s)


#: LSTM plans by (shape, dtype, device).
PLANS: PlanCache[LstmPlan | SequenceLstmPlan | ReferenceLstm] = PlanCache(
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


def _check_lengths(lengths: Any, batch: int, steps: int) -> Lengths:
    if lengths is None:
        return None
    if isinstance(lengths, GPUArray):
        # Kept on the device (no host read, so a CUDA graph can capture the call): the values
        # are the caller's to keep in [0, T].
        lengths = c.check_array(lengths, "lengths", ndim=1)
        if lengths.dtype.kind not in "iu" or lengths.shape != (batch,):
            raise TypeError(
                f"lstm: device lengths must be an integer GPUArray [{batch}], got "
                f"{lengths.dtype} {tuple(lengths.shape)}"
            )
        return lengths
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
    lengths: Sequence[int] | np.ndarray | GPUArray | None = None,
    batch_first: bool = True,
) -> tuple[GPUArray, tuple[GPUArray, GPUArray]]:
    """One LSTM layer over a sequence, as ``torch.nn.LSTM`` (``num_layers=1``).

    ``x`` is [B, T, I] (``batch_first=True``, the default) or [T, B, I]; ``w_ih`` [4H, I],
    ``w_hh`` [4H, H], ``b_ih``/``b_hh`` [4H] (PyTorch's ``weight_ih_l0`` ...; gate rows i, f,
    g, o), all of ``x``'s dtype (float32, float16 or bfloat16). Passing ``w_ih_reverse`` and
    ``w_hh_reverse`` (and the optional reverse biases) makes it bidirectional: the output holds
    the forward then the backward hidden states on its last axis. ``h0``/``c0`` [D, B, H]
    (D = 2 when bidirectional) default to zeros. ``lengths`` (B host ints in [0, T], or an
    integer GPUArray [B] taken as given: no host read, so the call can be captured in a CUDA
    graph) gives each batch row's true length: later steps output zeros and leave the state
    alone, as PyTorch's packed sequences.

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

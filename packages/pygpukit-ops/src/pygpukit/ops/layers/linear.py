"""Linear (plain, fused QKV / gate-up) and the gated MLP of Llama-family models."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .. import _common as c
from .. import activations as act_ops
from .. import linear as linear_ops
from . import _checks


class Linear:
    """``y = activation(x @ weight.T + bias)`` with ``weight`` ``[N, K]`` (``nn.Linear`` layout).

    ``bias`` ``[N]`` is optional; ``activation`` is None, ``"relu"``, ``"gelu"``,
    ``"gelu_tanh"`` or ``"silu"`` (fused into the GEMV kernel for up to 8 rows in half
    precision, one epilogue kernel after ``gp.matmul`` otherwise). ``layer(x)`` takes ``x``
    ``[..., K]`` of the weight's dtype and returns ``[..., N]``; ``layer(x, out=y)`` writes
    ``y`` and allocates nothing. The plan for each number of rows is made at its first call.

    :meth:`fused` builds one layer from several weights of the same input (q/k/v, gate/up):
    one kernel reads them all, and :meth:`split` cuts the output back into its parts.

    ``out_dtype="float32"`` (for float16/bfloat16 weights) gives a float32 result, a language
    model's logits: up to ``GEMV_MAX_ROWS`` rows (every decode step) the GEMV kernel stores
    its float32 sums unrounded, since rounded to 16 bits the best two logits can tie; more rows
    are computed in the weight's dtype, as a framework does in that dtype, then widened (an
    intermediate of that dtype is allocated per call then).
    """

    def __init__(
        self,
        weight: GPUArray,
        bias: GPUArray | None = None,
        *,
        activation: str | None = None,
        out_dtype: Any = None,
    ) -> None:
        self.weight = _checks.weight(weight, "weight", 2)
        self.out_features, self.in_features = (int(d) for d in weight.shape)
        self.dtype = weight.dtype
        if bias is not None:
            _checks.weight(bias, "bias", 1)
            c.check_same_dtype(weight, ("bias", bias))
            c.check_shape(bias, "bias", (self.out_features,))
        self.bias = bias
        self.activation = activation
        self._act = linear_ops.activation_code(activation)
        #: The output's dtype: the weight's, or float32 (see the class docstring).
        self.out_dtype = _out_dtype(out_dtype, self.dtype)
        #: Output features of each part (one part unless built by :meth:`fused`).
        self.splits: tuple[int, ...] = (self.out_features,)
        self._weight_vector = self.in_features % 8 == 0 and weight.data_ptr % 16 == 0
        self._plans: _checks.PlanDict[tuple[int, bool], linear_ops.LinearPlan | WidenedPlan] = (
            _checks.PlanDict()
        )

    @classmethod
    def fused(
        cls,
        weights: Sequence[GPUArray],
        biases: Sequence[GPUArray | None] | None = None,
        *,
        activation: str | None = None,
        out_dtype: Any = None,
    ) -> Linear:
        """One layer for several projections of the same input, e.g. ``[wq, wk, wv]``.

        The weights (``[N_i, K]``, one dtype) are concatenated along N once, here, into a
        read-only array the layer owns (the parts can be freed after); ``biases``
        is None or one per weight (all given, or all None). The output's last axis holds the
        parts in order: :meth:`split` returns them.
        """
        parts = list(weights)
        if not parts:
            raise ValueError("fused() needs at least one weight")
        for i, w in enumerate(parts):
            _checks.weight(w, f"weights[{i}]", 2)
            c.check_same_dtype(parts[0], (f"weights[{i}]", w))
            if w.shape[1] != parts[0].shape[1]:
                raise ValueError(
                    f"weights[{i}] has K = {w.shape[1]}, weights[0] has {parts[0].shape[1]}: "
                    "fused projections read the same input"
                )
        bias = None
        if biases is not None:
            given = list(biases)
            if len(given) != len(parts):
                raise ValueError(f"biases has {len(given)} entries for {len(parts)} weights")
            if any(b is None for b in given):
                if any(b is not None for b in given):
                    raise ValueError("give a bias for every weight or for none (use zeros)")
            else:
                bias = gp.concatenate(given, axis=0) if len(given) > 1 else given[0]
        weight = gp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        # The concatenated copies belong to the layer, which never writes them.
        for own in (weight, bias):
            if own is not None and len(parts) > 1:
                own.setflags(write=False)
        layer = cls(weight, bias, activation=activation, out_dtype=out_dtype)
        layer.splits = tuple(int(w.shape[0]) for w in parts)
        return layer

    def split(self, y: GPUArray) -> tuple[GPUArray, ...]:
        """The parts of an output ``[..., N]`` (views; C-contiguous only when y has one row)."""
        views, start = [], 0
        for n in self.splits:
            views.append(y[..., start : start + n])
            start += n
        return tuple(views)

    def plan(self, rows: int, x_aligned: bool = True) -> linear_ops.LinearPlan | WidenedPlan:
        """The plan this layer uses for ``rows`` rows of x (made now if it has none yet)."""
        key = (rows, x_aligned)
        plan = self._plans.get(key)
        if plan is None:
            widen = self.out_dtype != self.dtype
            gemv_f32 = widen and rows <= linear_ops.GEMV_MAX_ROWS and self.in_features > 0
            plan = linear_ops.plan(
                rows,
                self.out_features,
                self.in_features,
                self.dtype,
                self._act,
                self._weight_vector and x_aligned,
                self.bias is not None,
                gemv_f32,
            )
            if widen and not gemv_f32:
                plan = WidenedPlan(plan, rows, self.out_features, self.dtype)
            self._plans[key] = plan
        return plan

    def __call__(self, x: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
        """``activation(x @ weight.T + bias)`` for ``x`` ``[..., K]``: ``[..., N]``."""
        _checks.check_input(x, "x", self.dtype, self.in_features)
        lead = tuple(x.shape[:-1])
        m = math.prod(lead)
        shape = (*lead, self.out_features)
        if out is not None:
            linear_ops.check_no_overlap(out, ("x", x))
        if not (m and self.out_features):
            return _checks.output(out, shape, self.out_dtype)
        aligned = x.data_ptr % 16 == 0
        plan = self._plans.get((m, aligned))
        if plan is None:
            plan = self.plan(m, aligned)
        if out is None and isinstance(plan, WidenedPlan):
            return plan.widened(x, self.weight, self.bias).reshape(shape)
        y = _checks.output(out, shape, self.out_dtype)
        plan(x, self.weight, self.bias, y)
        return y

    def __repr__(self) -> str:
        extra = f", splits={self.splits}" if len(self.splits) > 1 else ""
        return (
            f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
            f"dtype={self.dtype}, bias={self.bias is not None}, "
            f"activation={self.activation!r}{extra})"
        )


def _out_dtype(out_dtype: Any, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The layer's output dtype: ``dtype`` (None) or float32."""
    if out_dtype is None:
        return dtype
    dt = np.dtype(gp.dtypes.normalize(out_dtype))
    if dt not in (dtype, np.dtype(gp.float32)):
        raise TypeError(
            f"out_dtype must be None (the weight's {dtype}) or float32, got {out_dtype!r}"
        )
    return dt


@dataclass(frozen=True, slots=True)
class WidenedPlan:
    """A product in the weight's dtype, then widened into a float32 ``y`` (rows > GEMV's)."""

    inner: linear_ops.LinearPlan
    m: int
    n: int
    dtype: np.dtype[Any]

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        """Enqueue the product into a fresh array of the weight's dtype, then widen into y."""
        y[...] = self.widened(x, weight, bias).reshape(y.shape)

    def widened(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None) -> GPUArray:
        """The product as a new float32 ``[m, n]`` array: one cast of the rounded product.

        Without an ``out`` the layer returns this (assigning into a given float32 array casts
        into a temporary first, then copies: a second pass over the logits).
        """
        rounded = gp.empty((self.m, self.n), self.dtype)
        self.inner(x, weight, bias, rounded)
        return rounded.astype(gp.float32)


class GatedMLP:
    """``down(act(x @ w_gate.T) * (x @ w_up.T))``: the MLP of Llama, Qwen, Mistral, Gemma.

    ``w_gate`` and ``w_up`` ``[I, H]`` are fused into one ``[2I, H]`` projection at
    construction (one kernel reads both), ``w_down`` is ``[H, I]``. ``activation`` is
    ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` / ``"gelu"`` (GeGLU). For up to
    ``GEMV_MAX_ROWS`` rows (decode steps) the two intermediates are kept per number of rows and
    reused, so ``mlp(x, out=y)`` allocates nothing after the first call with that many rows and
    a captured CUDA graph keeps valid addresses; more rows (a prompt) get fresh intermediates
    per call, so prompts of many lengths do not pin their memory. The kept intermediates are
    per calling thread: two threads running one model (two serving engines sharing its
    weights) interleave their calls, and with one pair the second would overwrite the first's
    intermediate between its two kernels.
    """

    def __init__(
        self,
        w_gate: GPUArray,
        w_up: GPUArray,
        w_down: GPUArray,
        *,
        activation: str = "silu",
    ) -> None:
        if activation not in ("silu", "gelu_tanh", "gelu"):
            raise ValueError(
                f"activation must be 'silu', 'gelu_tanh' or 'gelu'; got {activation!r}"
            )
        self.gate_up = Linear.fused([w_gate, w_up])
        self.down = Linear(w_down)
        hidden, inter = self.gate_up.in_features, self.gate_up.splits[0]
        if self.gate_up.splits != (inter, inter):
            raise ValueError(
                f"w_gate {tuple(w_gate.shape)} and w_up {tuple(w_up.shape)} must have one shape"
            )
        if (self.down.in_features, self.down.out_features) != (inter, hidden):
            raise ValueError(
                f"w_down must be [{hidden}, {inter}] ([hidden, intermediate]), "
                f"got {tuple(w_down.shape)}"
            )
        self.activation = activation
        self.dtype = self.gate_up.dtype
        #: Kept intermediates by (thread id, rows). Owned by the layer, not by the thread: a
        #: CUDA graph captured on a thread that has ended still replays on their addresses.
        self._buffers: dict[tuple[int, int], tuple[GPUArray, GPUArray, Any]] = {}
        self._gated_plans: _checks.PlanDict[int, Any] = _checks.PlanDict()

    def _workspace(self, m: int) -> tuple[GPUArray, GPUArray, Any]:
        key = (threading.get_ident(), m)
        ws = self._buffers.get(key)
        if ws is None:
            inter = self.down.in_features
            h = gp.empty((m, 2 * inter), self.dtype)
            a = gp.empty((m, inter), self.dtype)
            ws = (h, a, self._gated_plans.get(m) or act_ops.gated_plan(h, a, self.activation))
            self._gated_plans[m] = ws[2]
            if m <= linear_ops.GEMV_MAX_ROWS:
                self._buffers[key] = ws
        return ws

    def __call__(self, x: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
        """The MLP of ``x`` ``[..., H]``: ``[..., H]``."""
        hidden = self.gate_up.in_features
        _checks.check_input(x, "x", self.dtype, hidden)
        lead = tuple(x.shape[:-1])
        m = math.prod(lead)
        y = _checks.output(out, (*lead, hidden), self.dtype)
        if m == 0:
            return y
        h, a, gated = self._workspace(m)
        self.gate_up(x.reshape(m, hidden), out=h)
        if gated is not None:
            gated(h, a)
        self.down(a, out=y.reshape(m, hidden))
        return y

    def __repr__(self) -> str:
        return (
            f"GatedMLP(hidden={self.gate_up.in_features}, intermediate={self.down.in_features}, "
            f"activation={self.activation!r}, dtype={self.dtype})"
        )

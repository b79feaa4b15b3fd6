"""Conv1d, ConvTranspose1d and LSTM layers: PyTorch's parameters, plans made once per shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pygpukit.array import GPUArray

from .. import conv as conv_ops
from .. import recurrent
from . import _checks


class _Conv:
    """A 1-D (transposed) convolution with its weight and bias; plans per (batch, length)."""

    _transposed = False

    def __init__(self, weight: GPUArray, bias: GPUArray | None, **options: Any) -> None:
        self.weight = _checks.weight(weight, "weight", 3)
        self.bias = bias
        self.dtype = weight.dtype
        self.options = options
        self._plans: dict[tuple[int, int], tuple[Any, conv_ops.Conv1dShape]] = {}
        # The options, bias and weight are checked against each other at the first call's plan.
        self.in_channels = int(weight.shape[0] if self._transposed else weight.shape[1])
        if not self._transposed:
            self.in_channels *= int(options.get("groups", 1))

    def _plan(self, x: GPUArray) -> tuple[Any, conv_ops.Conv1dShape]:
        key = (int(x.shape[0]), int(x.shape[2]))
        found = self._plans.get(key)
        if found is None:
            make = conv_ops.conv_transpose1d_plan if self._transposed else conv_ops.conv1d_plan
            found = make(x, self.weight, self.bias, **self.options)
            self._plans[key] = found
        return found

    def __call__(self, x: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
        """The convolution of ``x`` [B, C_in, L]: [B, C_out, L_out] (into ``out`` when given)."""
        _checks.check_input(x, "x", self.dtype)
        if x.ndim != 3 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"x must be [B, {self.in_channels}, L] for this layer, got shape {x.shape}"
            )
        plan, s = self._plan(x)
        y = _checks.output(out, (s.batch, s.c_out, s.out_length), self.dtype)
        if y.size:
            plan(x, self.weight, self.bias, y)
        return y


class Conv1d(_Conv):
    """``torch.nn.Conv1d`` over [B, C_in, L]: weight [C_out, C_in/groups, K], bias [C_out].

    ``Conv1d(weight, bias, stride=1, padding=0, dilation=1, groups=1)``; ``padding`` may be
    ``"same"`` or ``"valid"``. Weight norm, if the checkpoint has it, is folded by the caller.
    Equals :func:`pygpukit.ops.conv1d` with the same arguments.
    """

    def __init__(
        self,
        weight: GPUArray,
        bias: GPUArray | None = None,
        *,
        stride: int = 1,
        padding: int | str = 0,
        dilation: int = 1,
        groups: int = 1,
    ) -> None:
        super().__init__(
            weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups
        )


class ConvTranspose1d(_Conv):
    """``torch.nn.ConvTranspose1d``: weight [C_in, C_out/groups, K], bias [C_out].

    Equals :func:`pygpukit.ops.conv_transpose1d` with the same arguments.
    """

    _transposed = True

    def __init__(
        self,
        weight: GPUArray,
        bias: GPUArray | None = None,
        *,
        stride: int = 1,
        padding: int = 0,
        output_padding: int = 0,
        groups: int = 1,
        dilation: int = 1,
    ) -> None:
        super().__init__(
            weight, bias, stride=stride, padding=padding, output_padding=output_padding,
            groups=groups, dilation=dilation,
        )  # fmt: skip


_LSTM_NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
_LSTM_ARGS = ("w_ih", "w_hh", "b_ih", "b_hh")


class LSTM:
    """One ``torch.nn.LSTM`` layer (``num_layers=1``), uni- or bidirectional, batch first.

    ``LSTM(w_ih, w_hh, b_ih, b_hh, reverse=(w_ih_r, w_hh_r, b_ih_r, b_hh_r))`` or
    :meth:`from_state_dict`; calling it is :func:`pygpukit.ops.lstm` with these weights.
    """

    def __init__(
        self,
        w_ih: GPUArray,
        w_hh: GPUArray,
        b_ih: GPUArray | None = None,
        b_hh: GPUArray | None = None,
        *,
        reverse: tuple[GPUArray, GPUArray, GPUArray | None, GPUArray | None] | None = None,
        batch_first: bool = True,
    ) -> None:
        self.weights: dict[str, GPUArray | None] = dict(
            zip(_LSTM_ARGS, (w_ih, w_hh, b_ih, b_hh), strict=True)
        )
        for name, w in zip(_LSTM_ARGS, reverse or (), strict=False):
            self.weights[f"{name}_reverse"] = w
        self.batch_first = batch_first
        self.hidden_size = int(w_hh.shape[1]) if w_hh.ndim == 2 else 0
        self.bidirectional = reverse is not None

    @classmethod
    def from_state_dict(
        cls, tensors: Mapping[str, GPUArray], prefix: str = "", *, batch_first: bool = True
    ) -> LSTM:
        """The layer from PyTorch's names ``{prefix}weight_ih_l0`` ... ``{prefix}bias_hh_l0``.

        The ``_reverse`` tensors, when present, make it bidirectional; missing biases are None.
        """
        if f"{prefix}weight_ih_l0" not in tensors or f"{prefix}weight_hh_l0" not in tensors:
            raise KeyError(f"no LSTM weights {prefix}weight_ih_l0 / {prefix}weight_hh_l0 found")
        forward = [tensors.get(prefix + n) for n in _LSTM_NAMES]
        backward = [tensors.get(prefix + n + "_reverse") for n in _LSTM_NAMES]
        reverse = None
        if backward[0] is not None or backward[1] is not None:
            reverse = (backward[0], backward[1], backward[2], backward[3])
        return cls(*forward, reverse=reverse, batch_first=batch_first)  # type: ignore[arg-type]

    def __call__(
        self,
        x: GPUArray,
        h0: GPUArray | None = None,
        c0: GPUArray | None = None,
        *,
        lengths: Any = None,
    ) -> tuple[GPUArray, tuple[GPUArray, GPUArray]]:
        """``(y, (h_n, c_n))`` of the sequence ``x`` ([B, T, I] batch first): see :func:`lstm`."""
        return recurrent.lstm(
            x,
            **self.weights,  # type: ignore[arg-type]
            h0=h0,
            c0=c0,
            lengths=lengths,
            batch_first=self.batch_first,
        )

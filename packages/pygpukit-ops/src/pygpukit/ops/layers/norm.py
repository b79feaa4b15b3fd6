"""RMSNorm and LayerNorm layers, with the residual add fused in."""

from __future__ import annotations

import math
from typing import Any

from pygpukit.array import GPUArray

from .. import _common as c
from .. import normalization as norm_ops
from . import _checks


class _Norm:
    """A norm over the last axis with its weight (and bias); plans per (rows, vector width)."""

    _layer = False

    def __init__(self, weight: GPUArray, bias: GPUArray | None, eps: float) -> None:
        self.weight = _checks.weight(weight, "weight", 1)
        self.dim = int(weight.shape[0])
        self.dtype = weight.dtype
        if bias is not None:
            _checks.weight(bias, "bias", 1)
            c.check_same_dtype(weight, ("bias", bias))
            c.check_shape(bias, "bias", (self.dim,))
        self.bias = bias
        if not math.isfinite(eps) or eps < 0:
            raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
        self.eps = float(eps)
        self._plans: _checks.PlanDict[tuple[int, bool], Any] = _checks.PlanDict()

    def _plan(self, x: GPUArray, *arrays: GPUArray | None) -> Any:
        rows = x.size // self.dim if self.dim else 0
        aligned = all(a is None or a.data_ptr % 16 == 0 for a in (x, *arrays))
        key = (rows, aligned)
        plan = self._plans.get(key)
        if plan is None:
            plan = norm_ops.plan(x, self.weight, self.bias, *arrays)
            self._plans[key] = plan
        return plan

    def __call__(
        self,
        x: GPUArray,
        residual: GPUArray | None = None,
        *,
        out: GPUArray | None = None,
        sum_out: GPUArray | None = None,
    ) -> Any:
        """The norm of ``x`` ``[..., D]``; with a residual, ``(s, norm(s))``.

        ``s = x + residual`` is rounded to the dtype before the norm (as HF and vLLM).
        ``out`` (and, with a residual, ``sum_out``) receive the results: then nothing is
        allocated. ``out`` may be ``x``.
        """
        _checks.check_input(x, "x", self.dtype, self.dim)
        y = _checks.output(out, tuple(x.shape), self.dtype)
        if residual is None:
            if sum_out is not None:
                raise ValueError("sum_out is the residual sum: pass it with a residual")
            plan = self._plan(x, y)
            if plan is not None:
                plan(x, None, self.weight, self.bias, y, None, self.eps, self._layer)
            return y
        _checks.check_input(residual, "residual", self.dtype)
        c.check_shape(residual, "residual", tuple(x.shape))
        s = _checks.output(sum_out, tuple(x.shape), self.dtype)
        plan = self._plan(x, residual, y, s)
        if plan is not None:
            plan(x, residual, self.weight, self.bias, y, s, self.eps, self._layer)
        return s, y


class RMSNorm(_Norm):
    """``x * rsqrt(mean(x**2) + eps) * weight`` over the last axis (``weight`` ``[D]``).

    ``norm(x)`` returns the norm; ``norm(x, residual)`` returns ``(x + residual, norm(x +
    residual))`` from one kernel (the residual stream of a pre-norm transformer).
    """

    def __init__(self, weight: GPUArray, eps: float = 1e-6) -> None:
        super().__init__(weight, None, eps)

    def __repr__(self) -> str:
        return f"RMSNorm(dim={self.dim}, eps={self.eps}, dtype={self.dtype})"


class LayerNorm(_Norm):
    """``(x - mean) * rsqrt(var + eps) * weight (+ bias)`` over the last axis (biased variance).

    Called like :class:`RMSNorm`, residual form included.
    """

    _layer = True

    def __init__(self, weight: GPUArray, bias: GPUArray | None = None, eps: float = 1e-5) -> None:
        super().__init__(weight, bias, eps)

    def __repr__(self) -> str:
        return (
            f"LayerNorm(dim={self.dim}, eps={self.eps}, bias={self.bias is not None}, "
            f"dtype={self.dtype})"
        )

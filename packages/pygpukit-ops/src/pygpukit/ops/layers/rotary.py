"""The rotary position embedding layer: its cos/sin tables and launch plans."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from .. import _common as c
from .. import rope as rope_ops
from . import _checks


class Rotary:
    """Rotates q and k by each token's position (RoPE), tables built once at construction.

    ``head_dim`` is the heads' size; ``rotary_dim`` (default ``head_dim``) the rotated part;
    ``base`` the frequency base (``rope_theta``); ``max_positions`` the table rows;
    ``layout`` ``"neox"`` (Llama, Qwen, Mistral) or ``"gptj"``; ``table_dtype`` float32 (or
    the activations' dtype, to save memory). ``rotary(q, k, positions)`` takes q
    ``[tokens, Hq, D]`` and k ``[tokens, Hkv, D]`` (or ``[batch, seq, heads, D]``) and int32 /
    int64 positions ``[tokens]`` (or ``[batch, seq]``), and returns ``(q, k)`` rotated: in place
    by default (nothing allocated), new arrays with ``inplace=False``.

    ``inv_freq`` (``[rotary_dim // 2]``, replacing ``base ** (-2i / rotary_dim)``) and
    ``attention_factor`` (scaling the tables) are those of a long-context scaling
    (:func:`pygpukit.ops.rope_inv_freq`: ``linear``, ``llama3``, ``yarn``).
    """

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        max_positions: int = 4096,
        layout: str = "neox",
        table_dtype: Any = "float32",
        inv_freq: Any = None,
        attention_factor: float = 1.0,
    ) -> None:
        if layout not in ("neox", "gptj"):
            raise ValueError(f"layout must be 'neox' or 'gptj', got {layout!r}")
        rd = head_dim if rotary_dim is None else rotary_dim
        if isinstance(rd, bool) or not isinstance(rd, (int, np.integer)):
            raise TypeError(f"rotary_dim must be an int, got {type(rd).__name__}")
        if not 0 < rd <= head_dim:
            raise ValueError(f"rotary_dim must be in [2, head_dim={head_dim}], got {rd}")
        self.head_dim, self.rotary_dim = int(head_dim), int(rd)
        self.base, self.max_positions, self.layout = float(base), int(max_positions), layout
        self.cos, self.sin = rope_ops.rope_cos_sin(
            max_positions,
            self.rotary_dim,
            base,
            table_dtype,
            inv_freq=inv_freq,
            attention_factor=attention_factor,
        )
        self._plans: _checks.PlanDict[tuple[Any, ...], Any] = _checks.PlanDict()

    def __call__(
        self, q: GPUArray, k: GPUArray, positions: GPUArray, *, inplace: bool = True
    ) -> tuple[GPUArray, GPUArray]:
        """``(q, k)`` rotated by the angles of ``positions`` (see the class docstring)."""
        tokens, q_heads, kv_heads, head_dim, rd, max_pos = rope_ops.check_rope(
            q, k, self.cos, self.sin, positions, self.layout, self.rotary_dim
        )
        inplace = validation.boolean(inplace, "inplace", "Rotary")
        if inplace:
            c.check_writeable(q, "q (inplace=True)")
            c.check_writeable(k, "k (inplace=True)")
        q_out = q if inplace else gp.empty(q.shape, q.dtype)
        k_out = k if inplace else gp.empty(k.shape, k.dtype)
        if tokens == 0:
            return q_out, k_out
        key = (tokens, q_heads, kv_heads, head_dim, positions.dtype, q.dtype, inplace)
        plan = self._plans.get(key)
        if plan is None:
            flags = rope_ops.rope_flags(
                positions.dtype, self.layout == "gptj", inplace, self.cos.dtype
            )
            plan = rope_ops.PLANS.get(
                tokens, q_heads, kv_heads, head_dim, rd, max_pos, flags, q.dtype, gp.get_device()
            )
            self._plans[key] = plan
        plan(q, k, q_out, k_out, self.cos, self.sin, positions)
        return q_out, k_out

    def __repr__(self) -> str:
        return (
            f"Rotary(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, "
            f"max_positions={self.max_positions}, layout={self.layout!r})"
        )

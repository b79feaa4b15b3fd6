"""A decode step's bookkeeping on the device in one launch: :func:`decode_advance`.

A generation loop that keeps its state on the GPU (so a captured step graph serves every
position and the sampled token never visits the host) must, after each sample, move the token
into place, bump the position, record the token and update the attention length. As elementwise
int32 ops that is five to seven tiny kernels a token; here it is one thread of one kernel
(``decode_advance`` in ``kernels/decode_linear.cu``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import per_backend

__all__ = ["decode_advance"]


def decode_advance(
    next_token: GPUArray,
    token: GPUArray,
    position: GPUArray,
    lens: GPUArray,
    history: GPUArray,
    capacity: int,
) -> None:
    """Advance one sequence's decode state by the sampled ``next_token`` (all int32 ``[1]``).

    ``position`` becomes ``p = position + 1``; ``token`` becomes ``next_token``;
    ``history[p] = next_token`` when ``p < len(history)``; ``lens`` becomes the next step's
    attention length ``min(p + 1, capacity)`` (``capacity``: the KV cache's slots). Enqueued
    without waiting; nothing is read back.
    """
    for name, a in (("next_token", next_token), ("token", token), ("position", position),
                    ("lens", lens)):  # fmt: skip
        c.check_array(a, name, dtypes=[np.int32])
        if a.size != 1:
            raise ValueError(f"{name} must hold one int32, got shape {a.shape}")
    c.check_array(history, "history", dtypes=[np.int32], ndim=1)
    for name, a in (("token", token), ("position", position), ("lens", lens),
                    ("history", history)):  # fmt: skip
        c.check_writeable(a, name)
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    c.check_int32("decode_advance", capacity=capacity, history=history.size)
    _advance(next_token, token, position, lens, history, capacity)


def _advance_cuda(*args: Any) -> None:
    next_token, token, position, lens, history, capacity = args
    kernel = kl.kernel("decode_linear", "decode_advance")
    kernel.launch(1, 32, (next_token, token, position, lens, history, history.size, capacity))


def _advance_numpy(*args: Any) -> None:
    next_token, token, position, lens, history, capacity = args
    t = int(c.host(next_token).reshape(-1)[0])
    p = int(c.host(position).reshape(-1)[0]) + 1
    c.host(position).reshape(-1)[0] = p
    c.host(token).reshape(-1)[0] = t
    if 0 <= p < history.size:
        c.host(history)[p] = t
    c.host(lens).reshape(-1)[0] = min(p + 1, capacity)


_advance = per_backend(cpu=_advance_numpy, cuda=_advance_cuda)

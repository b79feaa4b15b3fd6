"""Rotary position embeddings in NumPy (NeoX and GPT-J layouts)."""

from __future__ import annotations

import numpy as np


def rotate(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_dim: int, gptj: bool
) -> np.ndarray:
    """Rotate ``x`` ``[T, H, D]`` (float32) by per-token tables ``[T, rotary_dim/2]``."""
    half = rotary_dim // 2
    y = x.copy()
    cs, sn = cos[:, None, :], sin[:, None, :]
    if gptj:
        x0, x1 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        y[..., 0:rotary_dim:2] = x0 * cs - x1 * sn
        y[..., 1:rotary_dim:2] = x1 * cs + x0 * sn
    else:
        x0, x1 = x[..., :half], x[..., half:rotary_dim]
        y[..., :half] = x0 * cs - x1 * sn
        y[..., half:rotary_dim] = x1 * cs + x0 * sn
    return y


def table_rows(positions: np.ndarray, max_pos: int) -> np.ndarray:
    """Positions as int64 row indices; ``ValueError`` for one outside ``[0, max_pos)``."""
    pos = positions.reshape(-1).astype(np.int64)
    bad = (pos < 0) | (pos >= max_pos)
    if bad.any():
        raise ValueError(
            f"positions must be in [0, {max_pos}) (the rows of cos/sin); got {int(pos[bad][0])}"
        )
    return pos

"""LSTM over a sequence in NumPy (PyTorch's gate order i, f, g, o and weight layout)."""

from __future__ import annotations

import numpy as np


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def lstm_direction(
    x: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray | None,
    b_hh: np.ndarray | None,
    h0: np.ndarray,
    c0: np.ndarray,
    lengths: np.ndarray | None,
    reverse: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction over ``x`` [B, T, I] from ``h0``, ``c0`` [B, H]: ``(y [B, T, H], h, c)``.

    ``reverse`` walks time backwards. With ``lengths`` [B], steps at or past a row's length
    keep its state and give zeros (PyTorch's packed sequences).
    """
    batch, steps, _ = x.shape
    hidden = w_hh.shape[1]
    pre = x @ w_ih.T
    if b_ih is not None:
        pre = pre + b_ih
    if b_hh is not None:
        pre = pre + b_hh
    h, c = h0.copy(), c0.copy()
    y = np.zeros((batch, steps, hidden), dtype=x.dtype)
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        gates = pre[:, t] + h @ w_hh.T
        i, f, g, o = (gates[:, q * hidden : (q + 1) * hidden] for q in range(4))
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        live = np.ones(batch, bool) if lengths is None else t < lengths
        c = np.where(live[:, None], c_new, c)
        h = np.where(live[:, None], h_new, h)
        y[:, t] = np.where(live[:, None], h_new, 0)
    return y, h, c

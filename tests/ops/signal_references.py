"""Float64 NumPy references for the ``[B, C, L]`` signal ops: convolutions, LSTM, norms.

Written from the definitions (PyTorch's documentation of ``conv1d``, ``conv_transpose1d``,
``nn.LSTM``, ``InstanceNorm1d``), independently of ``pygpukit.ops``'s own NumPy path: loops
over taps and positions, scatter where the op gathers. Shared by the CPU tests and the GPU
tests (``tests/ops/conftest.py`` puts this folder on ``sys.path``). Not a test module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


def conv1d_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: int = 1,
    padding: tuple[int, int] = (0, 0),
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """``y[n, o, t] = b[o] + sum_{c in group(o), k} w[o, c, k] * x[n, c, t*stride - pl + k*d]``."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    batch, _, length = x.shape
    c_out, c_group, kernel = w.shape
    pl, pr = padding
    out_length = (length + pl + pr - dilation * (kernel - 1) - 1) // stride + 1
    y = np.zeros((batch, c_out, out_length))
    per_group_out = c_out // groups
    for o in range(c_out):
        g = o // per_group_out
        xs = x64[:, g * c_group : (g + 1) * c_group]  # [B, Cg, L]
        for k in range(kernel):
            for t in range(out_length):
                pos = t * stride - pl + k * dilation
                if 0 <= pos < length:
                    y[:, o, t] += xs[:, :, pos] @ w64[o, :, k]
    if b is not None:
        y += b.astype(np.float64)[None, :, None]
    return y


def conv_transpose1d_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """Each input sample scatters ``w[c, :, k] * x[n, c, l]`` to output ``l*stride - pad + k*d``."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    batch, c_in, length = x.shape
    _, per_group_out, kernel = w.shape
    c_out = per_group_out * groups
    c_group = c_in // groups
    out_length = (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    y = np.zeros((batch, c_out, out_length))
    for c in range(c_in):
        g = c // c_group
        for k in range(kernel):
            for t_in in range(length):
                t = t_in * stride - padding + k * dilation
                if 0 <= t < out_length:
                    y[:, g * per_group_out : (g + 1) * per_group_out, t] += (
                        x64[:, c, t_in, None] * w64[c, :, k][None, :]
                    )
    if b is not None:
        y += b.astype(np.float64)[None, :, None]
    return y


def lstm_ref(
    x: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray | None,
    b_hh: np.ndarray | None,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    reverse: bool = False,
    lengths: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One LSTM direction over ``x`` [B, T, I], row by row and step by step, in float64.

    Returns ``(y [B, T, H], h [B, H], c [B, H])``; a row's steps at or past its length are
    skipped (state kept, output zero).
    """
    x64 = x.astype(np.float64)
    batch, steps, _ = x.shape
    hidden = w_hh.shape[1]
    wi, wh = w_ih.astype(np.float64), w_hh.astype(np.float64)
    bias = np.zeros(4 * hidden)
    for b in (b_ih, b_hh):
        if b is not None:
            bias = bias + b.astype(np.float64)
    y = np.zeros((batch, steps, hidden))
    h_out, c_out = np.zeros((batch, hidden)), np.zeros((batch, hidden))
    for n in range(batch):
        h = h0[n].astype(np.float64) if h0 is not None else np.zeros(hidden)
        cell = c0[n].astype(np.float64) if c0 is not None else np.zeros(hidden)
        length = steps if lengths is None else lengths[n]
        order = range(length - 1, -1, -1) if reverse else range(length)
        for t in order:
            z = wi @ x64[n, t] + wh @ h + bias
            i = 1 / (1 + np.exp(-z[:hidden]))
            f = 1 / (1 + np.exp(-z[hidden : 2 * hidden]))
            g = np.tanh(z[2 * hidden : 3 * hidden])
            o = 1 / (1 + np.exp(-z[3 * hidden :]))
            cell = f * cell + i * g
            h = o * np.tanh(cell)
            y[n, t] = h
        h_out[n], c_out[n] = h, cell
    return y, h_out, c_out


def ada_in_ref(
    x: np.ndarray,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """``(1 + gamma) * InstanceNorm1d(x) + beta`` (each left out when None), per row in float64."""
    x64 = x.astype(np.float64)
    batch, channels, _ = x.shape
    y = np.empty_like(x64)
    for n in range(batch):
        for ch in range(channels):
            row = x64[n, ch]
            v = (row - row.sum() / row.size) / np.sqrt(np.var(row) + eps)
            if weight is not None:
                v = v * float(weight[ch])
            if bias is not None:
                v = v + float(bias[ch])
            if gamma is not None:
                v = v * (1 + float(gamma[n, ch]))
            if beta is not None:
                v = v + float(beta[n, ch])
            y[n, ch] = v
    return y


def channel_layernorm_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float = 1e-5
) -> np.ndarray:
    """Kokoro's text-encoder LayerNorm: transpose to [B, L, C], layer-norm over C, back."""
    t = x.astype(np.float64).transpose(0, 2, 1)
    mu = t.mean(-1, keepdims=True)
    y = (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + eps) * w.astype(np.float64)
    if b is not None:
        y = y + b.astype(np.float64)
    return y.transpose(0, 2, 1)


def snake_ref(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``x + (1 / alpha) * sin(alpha * x) ** 2`` with alpha [C] broadcast as [1, C, 1]."""
    a = alpha.astype(np.float64).reshape(1, -1, 1)
    x64 = x.astype(np.float64)
    return x64 + (1 / a) * np.sin(a * x64) ** 2


def leaky_relu_ref(x: np.ndarray, slope: float) -> np.ndarray:
    """``max(0, x) + slope * min(0, x)``."""
    x64 = x.astype(np.float64)
    return np.maximum(x64, 0) + slope * np.minimum(x64, 0)


@contextlib.contextmanager
def torch_full_fp32(torch: Any) -> Iterator[None]:
    """PyTorch with TF32 off for convolutions, RNNs and matmuls (restored after).

    cuDNN runs float32 convolutions and LSTMs on TF32 tensor cores by default, 1e-3 away from
    float32; the float32 comparisons need full precision on both sides.
    """
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved

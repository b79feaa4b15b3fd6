"""Private NumPy versions of the operators Kokoro needs that ``pygpukit.ops`` lacks so far.

Each is a plain float32 implementation with PyTorch's semantics (layouts ``[B, C, L]``), used by
:mod:`pygpukit.tts.kokoro` through :mod:`pygpukit.tts._ops`, which prefers the ops package's
version of a name once it exists. They are reference code, not the fast path.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "adain",
    "channel_layer_norm",
    "conv1d",
    "conv_transpose1d",
    "layer_norm",
    "leaky_relu",
    "lstm_bidirectional",
    "snake",
]


def conv1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv1d``: x ``[B, C_in, L]``, weight ``[C_out, C_in/groups, K]``."""
    b, _c_in, _ = x.shape
    c_out, c_per_group, k = weight.shape
    if padding:
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    # Windows [B, C_in, L_out, K]: tap j of output t reads x[t * stride + j * dilation].
    windows = sliding_window_view(x, (k - 1) * dilation + 1, axis=2)[:, :, ::stride, ::dilation]
    l_out = windows.shape[2]
    cols = windows.reshape(b, groups, c_per_group, l_out, k).transpose(0, 1, 3, 2, 4)
    cols = cols.reshape(b, groups, l_out, c_per_group * k)
    w = weight.reshape(groups, c_out // groups, c_per_group * k)
    out = np.matmul(cols, w.transpose(0, 2, 1)[None])  # [B, G, L_out, C_out/G]
    out = out.transpose(0, 1, 3, 2).reshape(b, c_out, l_out)
    if bias is not None:
        out = out + bias[None, :, None]
    return np.ascontiguousarray(out, dtype=np.float32)


def conv_transpose1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv_transpose1d``: weight ``[C_in, C_out/groups, K]``."""
    b, c_in, length = x.shape
    _, out_per_group, k = weight.shape
    in_per_group = c_in // groups
    c_out = out_per_group * groups
    full = (length - 1) * stride + k
    xg = x.reshape(b, groups, in_per_group, length)
    wg = weight.reshape(groups, in_per_group, out_per_group * k)
    # Every input step's contribution [B, G, L, C_out/G * K], then scattered tap by tap.
    contrib = np.matmul(xg.transpose(0, 1, 3, 2), wg[None]).reshape(
        b, groups, length, out_per_group, k
    )
    out = np.zeros((b, groups, out_per_group, full + output_padding), dtype=np.float32)
    last = (length - 1) * stride + 1
    for j in range(k):
        out[:, :, :, j : j + last : stride] += contrib[:, :, :, :, j].transpose(0, 1, 3, 2)
    out = out.reshape(b, c_out, -1)[:, :, padding : full + output_padding - padding]
    if bias is not None:
        out = out + bias[None, :, None]
    return np.ascontiguousarray(out, dtype=np.float32)


def leaky_relu(x: np.ndarray, negative_slope: float = 0.01) -> np.ndarray:
    """``max(x, 0) + negative_slope * min(x, 0)``."""
    return np.where(x >= 0, x, x * np.float32(negative_slope)).astype(np.float32)


def snake(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Snake activation ``x + sin(alpha x)^2 / alpha``, alpha ``[1, C, 1]``."""
    return (x + np.sin(alpha * x) ** 2 / alpha).astype(np.float32)


def layer_norm(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> np.ndarray:
    """LayerNorm over the last axis (no affine where ``weight``/``bias`` are None)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(np.float32)


def channel_layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> np.ndarray:
    """LayerNorm over the channel axis of ``[B, C, L]``."""
    return np.swapaxes(layer_norm(np.swapaxes(x, 1, 2), gamma, beta, eps), 1, 2)


def adain(
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = 1e-5,
    norm_weight: np.ndarray | None = None,
    norm_bias: np.ndarray | None = None,
) -> np.ndarray:
    """Adaptive instance norm ``(1 + gamma) * instance_norm(x) + beta``; gamma/beta ``[B, C]``."""
    mean = x.mean(axis=2, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=2, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if norm_weight is not None:
        y = y * norm_weight[None, :, None]
    if norm_bias is not None:
        y = y + norm_bias[None, :, None]
    return ((1.0 + gamma[:, :, None]) * y + beta[:, :, None]).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_direction(
    x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, bias: np.ndarray, reverse: bool
) -> np.ndarray:
    """One direction of a PyTorch LSTM (gates i, f, g, o) over ``x [B, T, I]``."""
    b, t, _ = x.shape
    hidden = w_hh.shape[1]
    pre = x @ w_ih.T + bias  # [B, T, 4H]: the input projection of every step at once
    h = np.zeros((b, hidden), dtype=np.float32)
    c = np.zeros((b, hidden), dtype=np.float32)
    out = np.empty((b, t, hidden), dtype=np.float32)
    steps = range(t - 1, -1, -1) if reverse else range(t)
    for step in steps:
        gates = pre[:, step] + h @ w_hh.T
        i = _sigmoid(gates[:, :hidden])
        f = _sigmoid(gates[:, hidden : 2 * hidden])
        g = np.tanh(gates[:, 2 * hidden : 3 * hidden])
        o = _sigmoid(gates[:, 3 * hidden :])
        c = f * c + i * g
        h = o * np.tanh(c)
        out[:, step] = h
    return out


def lstm_bidirectional(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """A one-layer bidirectional ``torch.nn.LSTM`` (batch_first): ``[B, T, I] -> [B, T, 2H]``.

    ``params`` holds PyTorch's names without prefix (``weight_ih_l0``, ``bias_hh_l0_reverse``...).
    """
    fwd = _lstm_direction(
        x,
        params["weight_ih_l0"],
        params["weight_hh_l0"],
        params["bias_ih_l0"] + params["bias_hh_l0"],
        reverse=False,
    )
    bwd = _lstm_direction(
        x,
        params["weight_ih_l0_reverse"],
        params["weight_hh_l0_reverse"],
        params["bias_ih_l0_reverse"] + params["bias_hh_l0_reverse"],
        reverse=True,
    )
    return np.concatenate([fwd, bwd], axis=-1)

"""1-D convolution and transposed convolution in NumPy ([B, C, L] signals, PyTorch layouts)."""

from __future__ import annotations

import numpy as np


def conv1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: int,
    pad_left: int,
    pad_right: int,
    dilation: int,
    groups: int,
) -> np.ndarray:
    """``x`` [B, C_in, L] with ``weight`` [C_out, C_in/groups, K]: [B, C_out, L_out].

    Computed in ``x``'s precision (float32 or wider) as one contraction over the gathered
    windows of each group.
    """
    batch = x.shape[0]
    c_out, c_group, kernel = weight.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad_left, pad_right)))
    out_length = (padded.shape[-1] - dilation * (kernel - 1) - 1) // stride + 1
    taps = np.arange(kernel)[:, None] * dilation + np.arange(out_length)[None, :] * stride
    windows = padded[:, :, taps].reshape(batch, groups, c_group, kernel, out_length)
    w = weight.reshape(groups, c_out // groups, c_group, kernel).astype(x.dtype)
    y = np.einsum("gock,bgckt->bgot", w, windows, optimize=True).reshape(batch, c_out, out_length)
    if bias is not None:
        y = y + bias.astype(x.dtype)[None, :, None]
    return y


def conv_transpose1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: int,
    padding: int,
    output_padding: int,
    dilation: int,
    groups: int,
) -> np.ndarray:
    """``x`` [B, C_in, L] with ``weight`` [C_in, C_out/groups, K]: [B, C_out, L_out].

    ``L_out = (L - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1``; each
    tap's products are scattered onto the strided output positions, then the padding is cut.
    """
    batch, c_in, length = x.shape
    _, c_out_group, kernel = weight.shape
    c_in_group = c_in // groups
    full = (length - 1) * stride + dilation * (kernel - 1) + 1 + output_padding
    acc = np.zeros((batch, groups, c_out_group, full), dtype=x.dtype)
    xg = x.reshape(batch, groups, c_in_group, length)
    w = weight.reshape(groups, c_in_group, c_out_group, kernel).astype(x.dtype)
    span = (length - 1) * stride + 1
    for k in range(kernel):
        start = k * dilation
        acc[..., start : start + span : stride] += np.einsum("gco,bgcl->bgol", w[..., k], xg)
    out_length = full - 2 * padding
    y = acc.reshape(batch, groups * c_out_group, full)[..., padding : padding + out_length]
    if bias is not None:
        y = y + bias.astype(x.dtype)[None, :, None]
    return y

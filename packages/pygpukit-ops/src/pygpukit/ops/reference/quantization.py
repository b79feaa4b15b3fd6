"""GGUF (ggml) tensor types dequantized in NumPy."""

from __future__ import annotations

import numpy as np


def dequantize(
    raw: np.ndarray, name: str, n: int, block_bytes: int, float_view: np.dtype | None
) -> np.ndarray:
    """float32 values of ``n`` elements of ggml type ``name`` stored in ``raw`` (uint8).

    ``float_view`` is the storage dtype of the float types (F32, F16, BF16), None for the
    block types (Q8_0, Q4_0, Q4_1: ``block_bytes`` per block of 32 elements).
    """
    if float_view is not None:
        return raw.view(float_view).astype(np.float32)
    blocks = raw.reshape(-1, block_bytes)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # [n_blocks, 1]
    if name == "Q8_0":
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
        return (q * d).reshape(n)
    qs = blocks[:, 2:18] if name == "Q4_0" else blocks[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)  # j and j + 16
    if name == "Q4_0":
        return ((q - 8) * d).reshape(n)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    return (q * d + m).reshape(n)

"""The operators the Kokoro network calls, by name.

``stft_polar`` / ``istft_polar`` are the ops package's audio family (``pygpukit.ops.audio.stft``
/ ``istft``), called on arrays uploaded from the host. The others are still the private NumPy
versions in :mod:`pygpukit.tts._numpy_ops`: conv1d, conv_transpose1d, the LSTM, AdaIN, channel
LayerNorm, Snake and LeakyReLU come with the ops package's own issue, and this module is the one
place that switches the network over to them.
"""

from __future__ import annotations

import numpy as np

import pygpukit as gp
from pygpukit.ops.audio.stft import istft, stft

from ._numpy_ops import (
    adain,
    channel_layer_norm,
    conv1d,
    conv_transpose1d,
    layer_norm,
    leaky_relu,
    lstm_bidirectional,
    snake,
)

__all__ = [
    "adain",
    "channel_layer_norm",
    "conv1d",
    "conv_transpose1d",
    "istft_polar",
    "layer_norm",
    "leaky_relu",
    "lstm_bidirectional",
    "snake",
    "stft_polar",
]


def stft_polar(x: np.ndarray, n_fft: int, hop_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and phase ``[B, n_fft // 2 + 1, frames]`` of ``torch.stft``.

    Centered, reflect-padded, periodic Hann window.
    """
    magnitude, phase = stft(
        gp.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), n_fft, hop_length, output="polar"
    )
    return magnitude.to_numpy(), phase.to_numpy()


def istft_polar(
    magnitude: np.ndarray, phase: np.ndarray, n_fft: int, hop_length: int
) -> np.ndarray:
    """``torch.istft(magnitude * exp(1j * phase))`` (centered, periodic Hann): ``[B, samples]``."""
    out = istft(
        gp.from_numpy(np.ascontiguousarray(magnitude, dtype=np.float32)),
        n_fft,
        hop_length,
        phase=gp.from_numpy(np.ascontiguousarray(phase, dtype=np.float32)),
    )
    return out.to_numpy()

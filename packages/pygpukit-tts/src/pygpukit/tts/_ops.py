"""The operators the Kokoro network calls, by name.

Today every one is the private NumPy version in :mod:`pygpukit.tts._numpy_ops`: the ops
package's conv1d, conv_transpose1d, LSTM, AdaIN, channel LayerNorm, Snake, LeakyReLU and the
audio family's stft/istft take GPU arrays and land separately; this module is the one place
that switches the network over to them.
"""

from __future__ import annotations

from ._numpy_ops import (
    adain,
    channel_layer_norm,
    conv1d,
    conv_transpose1d,
    istft,
    layer_norm,
    leaky_relu,
    lstm_bidirectional,
    snake,
    stft,
)

__all__ = [
    "adain",
    "channel_layer_norm",
    "conv1d",
    "conv_transpose1d",
    "istft",
    "layer_norm",
    "leaky_relu",
    "lstm_bidirectional",
    "snake",
    "stft",
]

"""Shapes and inputs the random-weight Kokoro GPU tests share (``gpu/test_gpu_tts_*.py``).

``SMALL_RATES`` is a small network with Kokoro-82M's vocoder rates (10 x 6 upsampling, n_fft 20,
hop 5), big enough to exercise every kernel family at the real strides and quick to build.
"""

from __future__ import annotations

import numpy as np

from pygpukit.tts import KokoroConfig

SMALL_RATES = KokoroConfig(
    hidden_dim=64,
    style_dim=32,
    albert_hidden=64,
    albert_heads=4,
    albert_intermediate=128,
    albert_layers=2,
    albert_embedding=32,
    upsample_initial_channel=32,
)


def token_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` random phoneme ids between the two pad tokens (``n + 2`` ids)."""
    return np.array([0, *rng.integers(1, 170, n), 0])

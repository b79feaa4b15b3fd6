"""NumPy float64 YIN pitch estimation (de Cheveigné and Kawahara, 2002), in librosa's form.

For each frame ``x`` of ``N`` samples: the autocorrelation ``r(tau)`` over the whole frame, the
difference ``d(tau) = 2 (r(0) - r(tau)) - sum_{m < tau} x_m^2``, its cumulative mean
normalised form ``d'(tau) = d(tau) / (mean(d(1..tau)) + tiny)``, then over the lags of the
allowed periods the first local minimum below the threshold (a voiced frame) or else the global
minimum, refined by parabolic interpolation; ``f0 = sr / period``.
"""

from __future__ import annotations

import numpy as np


def cmnd(frames: np.ndarray, max_period: int) -> np.ndarray:
    """``d'(tau)`` for ``tau`` in ``[0, max_period]`` of frames ``[..., n, N]`` (float64)."""
    frames = np.asarray(frames, dtype=np.float64)
    size = frames.shape[-1]
    spectrum = np.fft.rfft(frames, 2 * size, axis=-1)
    r = np.fft.irfft(np.abs(spectrum) ** 2, 2 * size, axis=-1)[..., : max_period + 1]
    energy = np.cumsum(frames[..., :max_period] ** 2, axis=-1)
    d = 2.0 * (r[..., :1] - r[..., 1:]) - energy
    mean = np.cumsum(d, axis=-1) / np.arange(1, max_period + 1)
    out = np.ones_like(r)
    out[..., 1:] = d / (mean + np.finfo(np.float32).tiny)
    return out


def pick(y: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The period pick over ``y = d'`` restricted to the allowed lags ``[..., n, lags]``.

    Returns the chosen lag index plus its parabolic shift, and whether it was a trough below
    ``threshold``.
    """
    n = y.shape[-1]
    trough = np.zeros(y.shape, dtype=bool)
    if n > 1:
        trough[..., 0] = y[..., 0] < y[..., 1]
        trough[..., 1:-1] = (y[..., 1:-1] < y[..., :-2]) & (y[..., 1:-1] <= y[..., 2:])
        trough[..., -1] = y[..., -1] < y[..., -2]
    below = trough & (y < threshold)
    voiced = np.asarray(below.any(axis=-1))
    index = np.where(voiced, np.argmax(below, axis=-1), np.argmin(y, axis=-1))
    lag = index.astype(np.float64)
    inner = (index > 0) & (index < n - 1)
    i = np.clip(index, 1, max(1, n - 2))
    take = lambda k: np.take_along_axis(y, np.clip(k, 0, n - 1)[..., None], axis=-1)[..., 0]  # noqa: E731
    left, mid, right = take(i - 1), take(i), take(i + 1)
    a = right + left - 2.0 * mid
    b = 0.5 * (right - left)
    ok = inner & (np.abs(b) < np.abs(a))
    lag += np.where(ok, -b / np.where(ok, a, 1.0), 0.0)
    return lag, voiced


def yin(
    frames: np.ndarray, sr: float, min_period: int, max_period: int, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(f0, voiced)`` of frames ``[..., n, N]``."""
    y = cmnd(frames, max_period)[..., min_period : max_period + 1]
    lag, voiced = pick(y, threshold)
    return np.asarray(sr / (min_period + lag)), voiced

"""The merged harmonic source of an iSTFTNet vocoder in NumPy (see ``ops.harmonic_source``)."""

from __future__ import annotations

import numpy as np


def harmonic_source(
    start: np.ndarray,
    slope: np.ndarray,
    f0: np.ndarray,
    weight: np.ndarray,
    bias: float,
    up: int,
    amp: float,
    voiced_f0: float,
) -> np.ndarray:
    """``tanh(bias + sum_h weight[h] * amp * sin(2 pi phase))`` on voiced samples, [B, F * up].

    ``start``/``slope`` [B, H, F + 1] are the left-extended per-frame phase tables (cycles and
    cycles per sample); sample ``t`` reads frame ``(t + half) // up`` at ramp
    ``(t + half) % up + offset`` (``half = up - up // 2``, ``offset`` 0.5 for an even ``up``).
    """
    frames = start.shape[2] - 1
    length = frames * up
    p = np.arange(length) + (up - up // 2)
    frame, ramp = p // up, (p % up).astype(np.float32) + np.float32(0.5 if up % 2 == 0 else 0.0)
    phase = start[:, :, frame] + slope[:, :, frame] * ramp  # [B, H, L] float32
    sines = np.sin(phase * np.float32(2.0 * np.pi)) * np.float32(amp)
    merged = np.einsum("h,bhl->bl", weight.astype(np.float32), sines)
    voiced = np.repeat(f0 > voiced_f0, up, axis=-1)
    return np.tanh(np.where(voiced, merged, 0).astype(np.float32) + np.float32(bias))

"""Onset strength and onset detection (librosa's ``onset_strength`` and ``onset_detect``).

``onset_strength`` runs on the GPU: the mel power spectrogram, decibels, then the mean over mel
bands of the positive frame-to-frame rise (runtime elementwise ops and a reduction), delayed
to line up with the frames (:mod:`pygpukit.ops.reference.onset`). ``onset_detect`` picks the
peaks of the normalised envelope on the host (a sequential rule over a few thousand values):
it copies the envelope back, a synchronisation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from ..reference import onset as reference
from .mel import mel_spectrogram, power_to_db

__all__ = ["onset_detect", "onset_strength"]


def onset_strength(
    x: GPUArray,
    sr: float = 22050,
    n_fft: int = 2048,
    hop_length: int = 512,
    lag: int = 1,
    n_mels: int = 128,
    center: bool = True,
    pad_mode: str = "constant",
) -> GPUArray:
    """Spectral-flux onset envelope ``[..., n_frames]`` (float32): librosa's ``onset_strength``.

    ``mean_over_mels(max(0, S[:, t] - S[:, t - lag]))`` with ``S`` the mel power spectrogram
    in dB (floored at max - 80), shifted right by ``lag`` frames (plus ``n_fft // (2 hop)`` when
    ``center``) so each value sits at the frame where the rise ends; zeros before.
    """
    op = "onset_strength"
    lag = validation.size(lag, "lag", op, minimum=1)
    mel = mel_spectrogram(
        x, sr, n_fft, hop_length, center=center, pad_mode=pad_mode, n_mels=n_mels, fmax=sr / 2
    )
    db = power_to_db(mel, top_db=80.0)
    frames = db.shape[-1]
    lead = db.shape[:-2]
    delay = lag + (n_fft // (2 * hop_length) if center else 0)
    out = gp.zeros((*lead, frames), np.float32)
    keep = min(frames - lag, frames - delay)
    if keep > 0:
        rise = gp.maximum(db[..., lag : lag + keep] - db[..., :keep], 0.0).mean(axis=-2)
        out[..., delay : delay + keep] = rise
    return out


def onset_detect(
    x: GPUArray,
    sr: float = 22050,
    hop_length: int = 512,
    units: str = "frames",
    *,
    delta: float = 0.07,
    **strength_args: Any,
) -> np.ndarray:
    """Onsets of a 1-D signal (NumPy int64 frame indices, or sample indices / seconds).

    librosa's ``onset_detect``: the :func:`onset_strength` envelope scaled to [0, 1], then a
    peak at least ``delta`` above the mean of the surrounding 0.1 s on each side, the largest
    within 30 ms before it, and at least 30 ms after the previous one. ``units``:
    ``"frames"``, ``"samples"`` (``frame * hop_length``) or ``"time"`` (seconds).
    """
    op = "onset_detect"
    validation.choice(units, ("frames", "samples", "time"), "units", op)
    if not isinstance(x, GPUArray) or x.ndim != 1:
        raise ValueError(
            f"{op}: x must be a 1-D GPUArray (one signal), got {getattr(x, 'shape', x)!r}"
        )
    env = (
        onset_strength(x, sr, hop_length=hop_length, **strength_args).to_numpy().astype(np.float64)
    )
    if env.size == 0 or not np.isfinite(env).all() or not env.any():
        peaks = np.zeros(0, dtype=np.int64)
    else:
        env = env - env.min()
        env /= env.max() + np.finfo(np.float64).tiny

        def frames_in(seconds: float) -> int:  # librosa's `seconds * sr // hop_length`
            return int((seconds * float(sr)) // hop_length)

        peaks = reference.peak_pick(
            env,
            pre_max=frames_in(0.03),
            post_max=frames_in(0.0) + 1,
            pre_avg=frames_in(0.10),
            post_avg=frames_in(0.10) + 1,
            delta=delta,
            wait=frames_in(0.03),
        )
    if units == "samples":
        return peaks * hop_length
    if units == "time":
        return peaks * hop_length / float(sr)
    return peaks

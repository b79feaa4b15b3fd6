"""NumPy float64 mel scale, mel filterbanks, Whisper's log-mel frontend, decibels and MFCCs.

The filterbank is the triangular one of librosa's ``filters.mel`` (Slaney's Auditory Toolbox
scale, or HTK's ``2595 log10(1 + f / 700)``), with Slaney's area normalisation or none.
"""

from __future__ import annotations

import math

import numpy as np

# Slaney's scale: linear below 1 kHz (200/3 Hz a mel), logarithmic above (6.4x per 27 mels).
_F_SP = 200.0 / 3.0
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray | float, htk: bool = False) -> np.ndarray:
    """Frequencies in Hz to mels (Slaney's scale, or HTK's when ``htk``)."""
    f = np.asarray(hz, dtype=np.float64)
    if htk:
        return 2595.0 * np.log10(1.0 + f / 700.0)
    mels = f / _F_SP
    log_part = _MIN_LOG_MEL + np.log(np.maximum(f, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(f >= _MIN_LOG_HZ, log_part, mels)


def mel_to_hz(mels: np.ndarray | float, htk: bool = False) -> np.ndarray:
    """Mels back to Hz (the inverse of :func:`hz_to_mel`)."""
    m = np.asarray(mels, dtype=np.float64)
    if htk:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    log_part = _MIN_LOG_HZ * np.exp(_LOG_STEP * (np.maximum(m, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return np.where(m >= _MIN_LOG_MEL, log_part, _F_SP * m)


def mel_filterbank(
    sr: float,
    n_fft: int,
    n_mels: int,
    fmin: float,
    fmax: float,
    htk: bool,
    norm: str | None,
) -> np.ndarray:
    """Triangular filters ``[n_mels, n_fft // 2 + 1]`` over the one-sided FFT bins.

    Filter i rises from mel point i to i + 1 and falls to i + 2 (``n_mels + 2`` points evenly
    spaced in mels between ``fmin`` and ``fmax``), linear in Hz; ``norm="slaney"`` scales each
    to unit area (``2 / (f_{i+2} - f_i)``).
    """
    bins = np.linspace(0.0, sr / 2.0, n_fft // 2 + 1)
    points = mel_to_hz(np.linspace(hz_to_mel(fmin, htk), hz_to_mel(fmax, htk), n_mels + 2), htk)
    widths = np.diff(points)
    ramps = points[:, None] - bins[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    if norm == "slaney":
        weights *= (2.0 / (points[2:] - points[:-2]))[:, None]
    return weights


def whisper_log_mel(power: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Whisper's scaling of a power spectrogram ``[..., n_bins, F]``.

    Mel, log10 floored at 1e-10, clamped to (max - 8) per batch item, then ``(x + 4) / 4``.
    """
    mel = np.einsum("mk,...kf->...mf", filters, power)
    log = np.log10(np.maximum(mel, 1e-10))
    top = log.max(axis=(-2, -1), keepdims=True)
    return (np.maximum(log, top - 8.0) + 4.0) / 4.0


def power_to_db(s: np.ndarray, amin: float, top_db: float | None) -> np.ndarray:
    """``10 log10(max(s, amin))`` (reference power 1).

    Floored at (max - top_db) per batch item (the last two axes) when ``top_db`` is given.
    """
    db = 10.0 * np.log10(np.maximum(s, amin))
    if top_db is not None:
        db = np.maximum(db, db.max(axis=(-2, -1), keepdims=True) - top_db)
    return db


def dct_basis(n_out: int, n_in: int) -> np.ndarray:
    """The orthonormal DCT-II ``[n_out, n_in]`` (scipy's ``dct(type=2, norm="ortho")``)."""
    k = np.arange(n_out)[:, None]
    n = np.arange(n_in)[None, :]
    basis = np.cos(math.pi * k * (2 * n + 1) / (2 * n_in)) * math.sqrt(2.0 / n_in)
    basis[0] /= math.sqrt(2.0)
    return basis

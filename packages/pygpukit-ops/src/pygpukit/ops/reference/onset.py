"""NumPy onset envelopes and peak picking (librosa's ``onset_strength`` and ``peak_pick``).

The onset strength of a spectrogram ``S`` in decibels ``[..., bins, frames]`` is the mean over
bins of the positive part of its frame-to-frame difference (``lag`` frames apart), delayed so
that frame ``t`` compares ``t`` with ``t - lag`` (plus ``n_fft // (2 hop)`` frames for centred
STFTs, whose frames start half a window early).
"""

from __future__ import annotations

import numpy as np


def onset_strength(db: np.ndarray, lag: int, delay: int) -> np.ndarray:
    """The onset envelope ``[..., frames]`` of a dB spectrogram ``[..., bins, frames]``."""
    frames = db.shape[-1]
    rise = np.maximum(0.0, db[..., lag:] - db[..., :-lag]).mean(axis=-2)
    out = np.zeros((*db.shape[:-2], frames))
    keep = max(0, min(rise.shape[-1], frames - delay))
    out[..., delay : delay + keep] = rise[..., :keep]
    return out


def peak_pick(
    x: np.ndarray,
    pre_max: int,
    post_max: int,
    pre_avg: int,
    post_avg: int,
    delta: float,
    wait: int,
) -> np.ndarray:
    """Indices of the peaks of a 1-D envelope (librosa's rule).

    ``x[n]`` is a peak when it is the maximum of ``x[n - pre_max : n + post_max]``, at least
    ``delta`` above the mean of ``x[n - pre_avg : n + post_avg]`` (both windows clipped to the
    signal), nonzero, and more than ``wait`` samples after the previous peak.
    """
    x = np.asarray(x, dtype=np.float64)
    peaks: list[int] = []
    last = -np.inf
    for n in range(x.shape[0]):
        lo, hi = max(0, n - pre_max), min(x.shape[0], n + post_max)
        if x[n] != x[lo:hi].max() or x[n] == 0:
            continue
        mean = x[max(0, n - pre_avg) : min(x.shape[0], n + post_avg)].mean()
        if x[n] >= mean + delta and n > last + wait:
            peaks.append(n)
            last = n
    return np.asarray(peaks, dtype=np.int64)

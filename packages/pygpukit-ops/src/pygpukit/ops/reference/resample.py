"""NumPy band-limited resampling: a Kaiser-windowed sinc filter applied in polyphase form.

Between rates in the ratio ``up / down`` (reduced), output sample ``j`` sits at input time
``j * down / up``; it is the sum of the input samples within ``zeros`` zero crossings of the
low-pass sinc (cutoff ``rolloff * min(1, up / down)`` of the input's Nyquist), each weighted by
the sinc and a Kaiser window. Only ``up`` different weight sets (phases) exist; they are built
once (:func:`design`) and shared by every output sample of the same phase.
"""

from __future__ import annotations

import math

import numpy as np

#: Zero crossings on each side, roll-off and Kaiser beta: the "best" quality of the
#: windowed-sinc resamplers (resampy's kaiser_best), about 140 dB of stopband attenuation.
ZEROS = 64
ROLLOFF = 0.9475937167399596
BETA = 14.769656459379492


def ratio(orig_sr: int, target_sr: int) -> tuple[int, int]:
    """``(up, down)``: ``target_sr / orig_sr`` in lowest terms."""
    g = math.gcd(orig_sr, target_sr)
    return target_sr // g, orig_sr // g


def output_length(length: int, up: int, down: int) -> int:
    """``ceil(length * up / down)``: the samples of a resampled signal (librosa's count)."""
    return -(-length * up // down)


def half_width(up: int, down: int) -> int:
    """Taps on each side of the centre: ``ZEROS`` zero crossings of the sinc, in input samples."""
    return math.ceil(ZEROS / (ROLLOFF * min(1.0, up / down)))


def design(up: int, down: int) -> tuple[np.ndarray, int]:
    """The polyphase filter ``[up, n_taps]`` (float64) and ``half``, the taps before centre.

    Phase ``p`` holds the weights of output samples at input time ``q + p / up``: tap ``t``
    multiplies input sample ``q - half + t``.
    """
    cutoff = ROLLOFF * min(1.0, up / down)
    half = half_width(up, down)
    taps = np.arange(2 * half + 1, dtype=np.float64)
    phases = np.arange(up, dtype=np.float64)[:, None] / up
    offset = half - taps[None, :] + phases  # output time minus input time, in input samples
    inside = np.clip(offset / (half + 1), -1.0, 1.0)
    window = np.i0(BETA * np.sqrt(1.0 - inside**2)) / np.i0(BETA)
    return cutoff * np.sinc(cutoff * offset) * window, half


def resample(x: np.ndarray, up: int, down: int, filters: np.ndarray, half: int) -> np.ndarray:
    """``x`` ``[..., L]`` resampled by ``up / down`` with :func:`design`'s filters (float64).

    Input samples outside the signal count as zeros.
    """
    x = np.asarray(x, dtype=np.float64)
    length = x.shape[-1]
    n_out = output_length(length, up, down)
    n_taps = filters.shape[1]
    padded = np.zeros((*x.shape[:-1], length + 2 * n_taps + 1))
    padded[..., n_taps : n_taps + length] = x
    out = np.empty((*x.shape[:-1], n_out))
    chunk = max(1, (1 << 21) // n_taps)
    for start in range(0, n_out, chunk):
        j = np.arange(start, min(n_out, start + chunk), dtype=np.int64)
        pos = j * down
        phase = pos % up
        base = pos // up - half + n_taps
        idx = base[:, None] + np.arange(n_taps)[None, :]
        out[..., j] = np.einsum("...jt,jt->...j", padded[..., idx], filters[phase])
    return out

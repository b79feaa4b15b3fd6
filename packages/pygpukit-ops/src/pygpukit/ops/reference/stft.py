"""NumPy float64 short-time Fourier transform: windows, framing, STFT, inverse STFT, DFT bases.

The spectra here are complex128 ``[..., n_fft // 2 + 1, n_frames]`` (librosa's and
``torch.stft``'s axis order); the op module converts them to the GPU layouts. The DFT bases are
what the GPU path multiplies frames by (the window folded in), built here so that the CPU tests
check them against ``numpy.fft``.
"""

from __future__ import annotations

import math

import numpy as np

WINDOWS = ("hann", "hamming", "rectangular")


def window(kind: str | np.ndarray, win_length: int, n_fft: int) -> np.ndarray:
    """A periodic window of ``win_length`` samples, zero-padded on both sides to ``n_fft``.

    ``kind``: ``"hann"`` / ``"hamming"`` (periodic, as ``torch.hann_window`` and
    ``scipy.signal.get_window`` make them for spectral analysis), ``"rectangular"``, or the
    window's values (``win_length`` of them). The padding puts ``(n_fft - win_length) // 2``
    zeros first, as librosa and torch do.
    """
    if isinstance(kind, str):
        n = np.arange(win_length, dtype=np.float64)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(2.0 * math.pi * n / win_length)
        elif kind == "hamming":
            w = 0.54 - 0.46 * np.cos(2.0 * math.pi * n / win_length)
        elif kind == "rectangular":
            w = np.ones(win_length)
        else:
            raise ValueError(f"unknown window {kind!r}; use one of {WINDOWS} or an array")
    else:
        w = np.asarray(kind, dtype=np.float64).reshape(-1)
    left = (n_fft - win_length) // 2
    out = np.zeros(n_fft)
    out[left : left + win_length] = w
    return out


def n_frames(length: int, n_fft: int, hop: int, center: bool) -> int:
    """How many frames the STFT of ``length`` samples has (``1 + L // hop`` centred, even n_fft)."""
    padded = length + 2 * (n_fft // 2) if center else length
    return 1 + (padded - n_fft) // hop


def frame(x: np.ndarray, n_fft: int, hop: int, center: bool, pad_mode: str) -> np.ndarray:
    """The frames ``[..., n_frames, n_fft]`` of ``x`` ``[..., L]``.

    Padded by n_fft // 2 when ``center``: ``pad_mode`` ``"reflect"`` or ``"constant"`` (zeros).
    """
    x = np.asarray(x, dtype=np.float64)
    if center:
        pad = [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)]
        x = np.pad(x, pad, mode="reflect" if pad_mode == "reflect" else "constant")
    count = 1 + (x.shape[-1] - n_fft) // hop
    idx = np.arange(count)[:, None] * hop + np.arange(n_fft)[None, :]
    return x[..., idx]


def stft(
    x: np.ndarray, n_fft: int, hop: int, win: np.ndarray, center: bool, pad_mode: str
) -> np.ndarray:
    """The one-sided STFT ``[..., n_fft // 2 + 1, n_frames]`` (complex128, unnormalized)."""
    frames = frame(x, n_fft, hop, center, pad_mode) * win
    return np.swapaxes(np.fft.rfft(frames, n=n_fft, axis=-1), -1, -2)


def istft(
    spec: np.ndarray,
    n_fft: int,
    hop: int,
    win: np.ndarray,
    center: bool,
    length: int | None,
) -> np.ndarray:
    """The inverse of :func:`stft`: windowed overlap-add over the summed squared window.

    Samples where that sum is below float32's ``tiny`` are left undivided (librosa's rule).
    ``length`` trims or zero-pads the result; None keeps everything the frames cover (minus
    ``n_fft // 2`` on each side when ``center``).
    """
    spec = np.asarray(spec)
    count = spec.shape[-1]
    frames = np.fft.irfft(np.swapaxes(spec, -1, -2), n=n_fft, axis=-1) * win
    total = n_fft + hop * (count - 1)
    y = np.zeros((*spec.shape[:-2], total))
    env = np.zeros(total)
    for f in range(count):
        y[..., f * hop : f * hop + n_fft] += frames[..., f, :]
        env[f * hop : f * hop + n_fft] += win * win
    tiny = np.finfo(np.float32).tiny
    y = np.where(env > tiny, y / np.where(env > tiny, env, 1.0), y)
    start = n_fft // 2 if center else 0
    if length is None:
        end = total - (n_fft // 2 if center else 0)
        return y[..., start:end]
    out = np.zeros((*spec.shape[:-2], length))
    part = y[..., start : start + length]
    out[..., : part.shape[-1]] = part
    return out


def _angles(n_fft: int) -> np.ndarray:
    """``2 pi k n / n_fft`` for bins k and samples n, reduced mod n_fft exactly (int64)."""
    k = np.arange(n_fft // 2 + 1, dtype=np.int64)[:, None]
    n = np.arange(n_fft, dtype=np.int64)[None, :]
    return 2.0 * math.pi * ((k * n) % n_fft) / n_fft


def dft_basis(win: np.ndarray) -> np.ndarray:
    """The forward basis ``B [2 * n_bins, n_fft]``.

    ``B @ frame`` is the real parts, then the imaginary parts, of ``rfft(win * frame)``.
    """
    angles = _angles(win.shape[0])
    return np.concatenate([np.cos(angles) * win, -np.sin(angles) * win], axis=0)


def idft_basis(win: np.ndarray) -> np.ndarray:
    """``B [n_fft, 2 * n_bins]``: ``B @ [re; im]`` is ``win * irfft(re + i im)``.

    Each bin counts twice (itself and its mirror) except DC and, for even n_fft, Nyquist;
    their imaginary parts drop out, as ``irfft`` ignores them.
    """
    n_fft = win.shape[0]
    angles = _angles(n_fft)
    weight = np.full(n_fft // 2 + 1, 2.0)
    weight[0] = 1.0
    if n_fft % 2 == 0:
        weight[-1] = 1.0
    weight /= n_fft
    cos = (np.cos(angles) * weight[:, None]).T * win[:, None]
    sin = (-np.sin(angles) * weight[:, None]).T * win[:, None]
    return np.concatenate([cos, sin], axis=1)

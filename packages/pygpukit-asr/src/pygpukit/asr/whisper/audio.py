"""Whisper's audio frontend: input checks, file loading and the log-mel spectrogram.

The log-mel is Whisper's: a periodic Hann window of 400 samples every 160 (centred, reflect
padding), the power spectrum, a Slaney mel filterbank (librosa's default: Slaney scale and
area normalisation), ``log10`` of at least 1e-10, clamped to ``max - 8``, then ``(x + 4) / 4``.
It runs in NumPy float64 on the host here; the mel of a window is a few milliseconds of the
CPU next to the encoder, and the GPU version belongs to the audio ops of ``pygpukit.ops``.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import numpy as np

from ..errors import AudioError
from .config import HOP_LENGTH, N_FFT, SAMPLE_RATE

__all__ = ["as_waveform", "load_audio", "log_mel_spectrogram", "mel_filters"]


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    lin = m * (200.0 / 3)
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0))
    return np.where(m >= 15.0, log, lin)


@functools.cache
def mel_filters(n_mels: int, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """The ``[n_mels, n_fft // 2 + 1]`` Slaney-normalised triangular filterbank (float64)."""
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(
        np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sr / 2)), n_mels + 2)
    )
    widths = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    weights.setflags(write=False)
    return weights


@functools.cache
def _window() -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """Whisper's log-mel of a 16 kHz float waveform: ``[n_mels, (len + padding) // 160]`` float32.

    ``padding`` zeros are appended first (``transcribe`` appends 30 s so that the last window
    is whole).
    """
    x = np.asarray(audio, np.float64)
    if padding:
        x = np.concatenate([x, np.zeros(padding)])
    half = N_FFT // 2
    x = np.pad(x, half, mode="reflect") if x.size > half else np.pad(x, half)
    frames = 1 + (x.size - N_FFT) // HOP_LENGTH
    idx = np.arange(N_FFT)[None, :] + HOP_LENGTH * np.arange(frames)[:, None]
    spec = np.fft.rfft(x[idx] * _window(), axis=-1)
    power = (spec.real**2 + spec.imag**2)[:-1]  # Whisper drops the last frame
    mel = power @ mel_filters(n_mels).T
    logm = np.log10(np.maximum(mel, 1e-10))
    logm = np.maximum(logm, logm.max() - 8.0) if logm.size else logm
    return ((logm + 4.0) / 4.0).T.astype(np.float32)


def as_waveform(audio: Any, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Check and convert a waveform (NumPy array, GPUArray or list) to float32 mono 16 kHz.

    Raises :class:`AudioError` for a wrong rank, dtype or sample rate, or non-finite samples.
    """
    if hasattr(audio, "to_numpy") and not isinstance(audio, np.ndarray):
        audio = audio.to_numpy()
    arr = np.asarray(audio)
    if arr.dtype.kind not in "fi":
        raise AudioError(
            f"audio of dtype {arr.dtype}: pass float32/float64 samples in [-1, 1] (or int16 PCM)"
        )
    if arr.ndim != 1:
        raise AudioError(
            f"audio of shape {arr.shape}: pass one mono channel, a 1-D array of samples "
            "(average the channels of a stereo signal first)"
        )
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise AudioError(f"sample_rate must be a positive int, got {sample_rate!r}")
    if arr.dtype.kind == "i":
        scale = float(np.iinfo(arr.dtype).max) + 1.0
        arr = arr.astype(np.float32) / scale
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        raise AudioError("audio has NaN or infinite samples; clean the signal before transcribing")
    if sample_rate != SAMPLE_RATE:
        arr = _resample(arr, sample_rate)
    return arr


def _resample(x: np.ndarray, rate: int) -> np.ndarray:
    """Resample to 16 kHz with the ops package's resampler where it exists."""
    try:
        from pygpukit.ops import resample  # type: ignore[attr-defined]
    except ImportError:
        raise AudioError(
            f"audio at {rate} Hz: Whisper needs 16000 Hz; resample it first (for example "
            "`sox in.wav -r 16000 out.wav`)"
        ) from None
    import pygpukit as gp

    return np.asarray(resample(gp.from_numpy(x), rate, SAMPLE_RATE).to_numpy(), np.float32)


def load_audio(path: str | pathlib.Path) -> np.ndarray:
    """Read an audio file (wav, flac, ogg, mp3 where libsndfile has it) as mono 16 kHz float32."""
    p = pathlib.Path(path)
    if not p.is_file():
        raise AudioError(f"{p}: no such audio file", path=str(p))
    try:
        import soundfile
    except ImportError:
        raise AudioError(
            "reading audio files needs the soundfile package: pip install soundfile", path=str(p)
        ) from None
    try:
        data, rate = soundfile.read(str(p), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises its own LibsndfileError / RuntimeError types
        raise AudioError(f"{p}: cannot decode audio: {exc}", path=str(p)) from exc
    if data.size == 0:
        raise AudioError(f"{p}: the file holds no samples", path=str(p))
    return as_waveform(data.mean(axis=1), int(rate))

"""Whisper's audio input: checks, file loading and the log-mel, on the ops package's audio ops.

``pygpukit.ops.log_mel_spectrogram`` is Whisper's frontend (a periodic Hann window of 400
samples every 160, the power spectrum, the Slaney mel filterbank, ``log10`` clamped to
``max - 8``, ``(x + 4) / 4``), on the GPU (NumPy float64 on the CPU backend);
``ops.load_audio`` reads files through soundfile and ``ops.resample`` converts other rates.
This module turns their inputs and errors into what ``transcribe`` documents.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.ops.audio.io import AudioFileError
from pygpukit.ops.audio.io import load_audio as ops_load_audio
from pygpukit.ops.audio.mel import log_mel_spectrogram as ops_log_mel
from pygpukit.ops.audio.resample import resample

from ..errors import AudioError
from .config import SAMPLE_RATE

__all__ = ["as_waveform", "load_audio", "log_mel_spectrogram"]


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> GPUArray:
    """Whisper's log-mel of 16 kHz samples: ``[n_mels, (len + padding) // 160]`` float32.

    ``padding`` zeros are appended first (``transcribe`` appends 30 s so that the last window
    is whole).
    """
    return ops_log_mel(gp.from_numpy(audio), n_mels, padding=padding)


def as_waveform(audio: Any, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Check and convert a waveform (NumPy array, GPUArray or list) to float32 mono 16 kHz.

    Raises :class:`AudioError` for a wrong rank, dtype or sample rate, or non-finite samples.
    """
    if isinstance(audio, GPUArray):
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
        arr = arr.astype(np.float32) / np.float32(float(np.iinfo(arr.dtype).max) + 1.0)
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        raise AudioError("audio has NaN or infinite samples; clean the signal before transcribing")
    if sample_rate != SAMPLE_RATE and arr.size:
        resampled = resample(gp.from_numpy(arr), sample_rate, SAMPLE_RATE)
        arr = np.asarray(resampled.to_numpy(), np.float32)
    return arr


def load_audio(path: str | pathlib.Path) -> np.ndarray:
    """Read an audio file (wav, flac, ogg, mp3 where libsndfile has it) as mono 16 kHz float32."""
    p = pathlib.Path(path)
    try:
        wave = ops_load_audio(p, sr=SAMPLE_RATE, mono=True)
    except FileNotFoundError:
        raise AudioError(f"{p}: no such audio file", path=str(p)) from None
    except ImportError as exc:
        raise AudioError(f"{p}: reading audio files needs soundfile: {exc}", path=str(p)) from None
    except AudioFileError as exc:
        raise AudioError(f"{p}: cannot decode audio: {exc.reason}", path=str(p)) from None
    return np.asarray(wave.to_numpy(), np.float32)

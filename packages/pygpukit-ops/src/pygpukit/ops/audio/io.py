"""Reading audio files into GPUArrays: ``load_audio(path, sr=16000, mono=True)``.

Files are decoded by ``soundfile`` (libsndfile: WAV, FLAC, OGG/Vorbis, MP3 where the bundled
libsndfile has it; ``pip install "pygpukit-ops[audio]"``), uploaded once, mixed down and
resampled on the GPU (:func:`pygpukit.ops.resample`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.errors import PyGPUkitError

from .resample import resample

__all__ = ["AudioFileError", "load_audio"]


class AudioFileError(PyGPUkitError, ValueError):
    """An audio file could not be used: unreadable, corrupt, an unknown format, or empty.

    ``path`` is the file, ``reason`` what was wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _soundfile() -> Any:
    try:
        import soundfile
    except ImportError as e:  # pragma: no cover - soundfile is a test dependency
        raise ImportError(
            'load_audio needs the soundfile package: pip install "pygpukit-ops[audio]"'
        ) from e
    except OSError as e:  # pragma: no cover - soundfile without its libsndfile
        raise ImportError(f"soundfile could not load libsndfile: {e}") from e
    return soundfile


def load_audio(path: str | os.PathLike[str], sr: int | None = 16000, mono: bool = True) -> GPUArray:
    """The samples of an audio file as float32 in [-1, 1]: ``[L]`` (mono) or ``[channels, L]``.

    ``sr`` resamples to that rate on the GPU (16 kHz, Whisper's, by default; ``None`` keeps the
    file's rate); ``mono`` averages the channels. Raises ``FileNotFoundError`` for a missing
    file and :class:`AudioFileError` for one that cannot be decoded (corrupt, a header cut short,
    not an audio format soundfile knows), is empty, or holds no samples or non-finite ones. A
    file whose data is cut short gives the samples it holds (libsndfile's behaviour).
    """
    sf = _soundfile()
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"load_audio: no such file: {name}")
    if os.path.isdir(name):
        raise AudioFileError(name, "is a directory, not an audio file")
    if os.path.getsize(name) == 0:
        raise AudioFileError(name, "is empty (0 bytes)")
    try:
        data, rate = sf.read(name, dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError, TypeError, ValueError) as e:
        raise AudioFileError(
            name, f"cannot be decoded as audio ({e}); soundfile reads WAV, FLAC, OGG and MP3"
        ) from None
    if data.shape[0] == 0:
        raise AudioFileError(name, "holds no samples")
    if not np.isfinite(data).all():
        raise AudioFileError(name, "holds NaN or infinite samples")
    x = gp.from_numpy(np.ascontiguousarray(data.T))  # [channels, L]
    if mono:
        x = x[0].copy() if x.shape[0] == 1 else x.mean(axis=0)
    if sr is not None and sr != rate:
        x = resample(x, int(rate), sr)
    return x

"""The result of a synthesis: float32 samples at 24 kHz with their phoneme durations."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import SAMPLE_RATE

__all__ = ["FRAME_SAMPLES", "Audio"]

FRAME_SAMPLES = 600  # Kokoro-82M's duration frame: 25 ms at 24 kHz (KokoroConfig.frame_samples)


@dataclass
class Audio:
    """Speech samples (float32, mono) and the frames each phoneme lasts.

    ``durations[i]`` is the number of frames (25 ms, :data:`FRAME_SAMPLES` samples, for
    Kokoro-82M) given to ``phonemes[i]``. Long input is made of ``chunks``, joined in
    ``phonemes`` by a space of 0 frames; the padding tokens at both ends of each chunk are not
    listed (they hold the rest of the samples).
    """

    samples: np.ndarray
    phonemes: str
    durations: np.ndarray
    sample_rate: int = SAMPLE_RATE
    chunks: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Length in seconds."""
        return len(self.samples) / self.sample_rate

    def __len__(self) -> int:
        return len(self.samples)

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        return self.samples if dtype is None else self.samples.astype(dtype)

    def save(self, path: str | Path) -> Path:
        """Write the samples as a sound file (format from the suffix: .wav, .flac, .ogg)."""
        try:
            import soundfile
        except ImportError as exc:
            raise ImportError(
                "Audio.save needs soundfile: pip install 'pygpukit-tts[audio]'"
            ) from exc
        out = Path(path)
        soundfile.write(str(out), self.samples, self.sample_rate)
        return out

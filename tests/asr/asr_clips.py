"""The synthesized test clips of ``tests/asr/data`` (made by ``tools/asr_speech.py`` and
``tools/asr_longform.py``), and long recordings laid out from them."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import numpy as np

DATA = pathlib.Path(__file__).resolve().parent / "data"


def sentences() -> dict[str, str]:
    """Name -> text of the clips."""
    return json.loads((DATA / "sentences.json").read_text())


def speech(name: str) -> np.ndarray:
    """A clip as float32 16 kHz samples."""
    return np.load(DATA / f"{name}.npy").astype(np.float32) / 32768.0


def speech_bounds(audio: np.ndarray) -> tuple[float, float]:
    """First and last sample above 1% of the peak, in seconds: where the voice is."""
    loud = np.nonzero(np.abs(audio) > 0.01 * np.abs(audio).max())[0]
    return loud[0] / 16000, loud[-1] / 16000


@dataclass(frozen=True)
class Placed:
    """One sentence laid into a recording: its text, the clip's span and where the voice is."""

    text: str
    start: float
    end: float
    onset: float
    offset: float


def longform_clips() -> list[tuple[str, np.ndarray]]:
    """The eleven sentences (``tools/asr_longform.py``'s eight and the three clips above), as
    ``(text, float32 16 kHz samples)``."""
    with np.load(DATA / "longform.npz") as z:
        codes, offsets, mu = z["codes"], z["offsets"], float(z["mu"])
    y = codes.astype(np.float64) / 127.0
    audio = (np.sign(y) * np.expm1(np.abs(y) * np.log1p(mu)) / mu).astype(np.float32)
    texts = json.loads((DATA / "longform.json").read_text())
    clips = [(t, audio[offsets[i] : offsets[i + 1]]) for i, t in enumerate(texts)]
    return clips + [(text, speech(name)) for name, text in sentences().items()]


def long_recording(
    seconds: float, rng: np.random.Generator, silence: tuple[float, float] = (1.0, 6.0)
) -> tuple[np.ndarray, list[Placed]]:
    """``seconds`` of 16 kHz audio: the sentences in random order (each round a new shuffle,
    never one twice in a row) with random silences between them, and where each went."""
    clips = longform_clips()
    sr = 16000
    audio = np.zeros(int(seconds * sr), np.float32)
    placed: list[Placed] = []
    order: list[int] = []
    pos = int(rng.uniform(0.5, 3.0) * sr)
    while True:
        if not order:
            order = list(rng.permutation(len(clips)))
            if placed and clips[order[0]][0] == placed[-1].text:
                order.append(order.pop(0))
        text, clip = clips[order.pop(0)]
        if pos + clip.size > audio.size:
            break
        audio[pos : pos + clip.size] = clip
        onset, offset = speech_bounds(clip)
        start = pos / sr
        placed.append(Placed(text, start, start + clip.size / sr, start + onset, start + offset))
        pos += clip.size + int(rng.uniform(*silence) * sr)
    return audio, placed

"""The synthesized test clips of ``tests/asr/data`` (made by ``tools/asr_speech.py``)."""

from __future__ import annotations

import json
import pathlib

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

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

"""pygpukit.asr: speech recognition (Whisper) on PyGPUkit.

Distributed as ``pygpukit-asr`` (``pip install "pygpukit[asr]"``)::

    from pygpukit import asr
    model = asr.load("whisper-small/")          # Hugging Face or faster-whisper (CTranslate2) dir
    print(model.transcribe("talk.wav").text)

Guide: docs/asr.md.
"""

from .api import DTYPES, WhisperModel, load
from .errors import (
    ASRError,
    AudioError,
    CTranslate2FormatError,
    ModelFormatError,
    UnsupportedModelError,
)
from .whisper.config import NAMED_CONFIGS, SAMPLE_RATE, WhisperConfig
from .whisper.transcribe import Segment, Transcription

__all__ = [
    "DTYPES",
    "NAMED_CONFIGS",
    "SAMPLE_RATE",
    "ASRError",
    "AudioError",
    "CTranslate2FormatError",
    "ModelFormatError",
    "Segment",
    "Transcription",
    "UnsupportedModelError",
    "WhisperConfig",
    "WhisperModel",
    "load",
]

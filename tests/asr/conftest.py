"""Fixtures of the pygpukit.asr tests: the real Whisper tiny.en and the synthesized speech.

Also puts this folder on ``sys.path`` (for ``tests/asr/gpu``: the asset module).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import asr_clips  # noqa: E402
from asr_whisper_asset import AssetUnavailable, whisper_tiny_en  # noqa: E402


@pytest.fixture(scope="session")
def tiny_en_dir() -> pathlib.Path:
    """Whisper tiny.en (CTranslate2 fp16 folder), fetched once into ``<repo>/.cache/models``."""
    try:
        return whisper_tiny_en()
    except AssetUnavailable as exc:
        pytest.skip(f"Whisper tiny.en unavailable: {exc}")


@pytest.fixture(scope="session")
def sentences() -> dict[str, str]:
    """Name -> text of the synthesized clips (tools/asr_speech.py)."""
    return asr_clips.sentences()

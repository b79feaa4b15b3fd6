"""The on-disk and in-memory cache of compiled kernels.

Key: sha256 over everything that changes the code (source, name expressions,
compile options, target arch, NVRTC version, :data:`KERNEL_ABI_VERSION`, and the
contents of every header the source pulls in with ``#include "..."`` from the
``-I`` folders of the options: editing such a header recompiles).
An entry file is ``MAGIC`` + the sha256 of its payload + the payload (a JSON
header with the key and lowered names, then the cubin), so a truncated or
corrupted file is detected on load and treated as a miss. Files are written to
a temporary name in the same folder and moved into place with ``os.replace``,
so readers never see half a file.

Where: ``$PYGPUKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pygpukit/kernels``
(``~/.cache/pygpukit/kernels``). ``PYGPUKIT_CACHE_DIR=""`` or
``gp.set_jit_cache_dir(None)`` keeps compiled kernels in memory only. A folder
that cannot be used (a file, not writable, a path the system refuses) is reported
once per process, pointed at the user's line, and kernels stay in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import env
from ._caller import user_stacklevel
from ._environment import KERNEL_ABI_VERSION

__all__ = [
    "KERNEL_ABI_VERSION",
    "CacheEntry",
    "cache_dir",
    "cache_key",
    "load",
    "set_cache_dir",
    "store",
]


MAGIC = b"PYGPUKIT-KERNEL-CACHE-1\n"
_DIGEST_LEN = 64  # hex sha256

_UNSET = object()
_override: object = _UNSET
_memory: dict[str, CacheEntry] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class CacheEntry:
    """A compiled kernel module: the cubin and NVRTC's lowered names of name expressions."""

    cubin: bytes
    lowered: dict[str, str]


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
_MAX_HEADERS = 256  # a bound on the walk; a real kernel includes a handful


def _include_dirs(options: Sequence[str]) -> list[Path]:
    dirs = []
    for i, opt in enumerate(options):
        if opt in ("-I", "--include-path") and i + 1 < len(options):
            dirs.append(Path(options[i + 1]))
        elif opt.startswith("--include-path="):
            dirs.append(Path(opt.split("=", 1)[1]))
        elif opt.startswith("-I") and len(opt) > 2:
            dirs.append(Path(opt[2:]))
    return dirs


def included_headers(source: str, options: Sequence[str]) -> dict[str, str]:
    """``{path: sha256}`` of the headers ``source`` includes with quotes, transitively.

    Quoted names are looked up next to the including header (for nested includes), then in
    the ``-I`` folders of ``options``, as NVRTC does; names found nowhere are left to NVRTC
    to report. Angle-bracket includes (the CUDA headers) are covered by the NVRTC version.
    """
    dirs = _include_dirs(options)
    found: dict[str, str] = {}
    pending: list[tuple[str, Path | None]] = [
        (name, None) for name in _QUOTED_INCLUDE.findall(source)
    ]
    while pending and len(found) < _MAX_HEADERS:
        name, beside = pending.pop()
        for folder in ([beside] if beside is not None else []) + dirs:
            path = folder / name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            key = str(path.resolve())
            if key not in found:
                found[key] = hashlib.sha256(data).hexdigest()
                text = data.decode("utf-8", errors="replace")
                pending += [(n, path.parent) for n in _QUOTED_INCLUDE.findall(text)]
            break
    return found


def cache_key(
    source: str,
    name_expressions: Sequence[str],
    options: Sequence[str],
    arch: str,
    nvrtc_version: tuple[int, int],
) -> str:
    """Return the hex sha256 identifying one compilation (included headers' contents too)."""
    blob = json.dumps(
        {
            "abi": KERNEL_ABI_VERSION,
            "arch": arch,
            "nvrtc": list(nvrtc_version),
            "options": list(options),
            "names": list(name_expressions),
            "source": source,
            "headers": sorted(included_headers(source, options).values()),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` for cached kernels; ``None`` keeps them in memory only."""
    global _override
    _override = None if path is None else Path(path)


def reset_cache_dir() -> None:
    """Forget :func:`set_cache_dir`: back to ``PYGPUKIT_CACHE_DIR`` or the platform default."""
    global _override
    _override = _UNSET


def cache_dir() -> Path | None:
    """Return the folder cached kernels go to, or None in memory-only mode."""
    if _override is not _UNSET:
        return _override  # type: ignore[return-value]
    if env.is_set("PYGPUKIT_CACHE_DIR"):
        return env.path("PYGPUKIT_CACHE_DIR")  # None when empty: memory only
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pygpukit" / "kernels"


def _encode(key: str, entry: CacheEntry) -> bytes:
    header = json.dumps({"key": key, "lowered": entry.lowered}).encode("utf-8")
    payload = len(header).to_bytes(8, "little") + header + entry.cubin
    return MAGIC + hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload


def _decode(key: str, data: bytes) -> CacheEntry | None:
    if not data.startswith(MAGIC):
        return None
    start = len(MAGIC)
    digest = data[start : start + _DIGEST_LEN]
    payload = data[start + _DIGEST_LEN + 1 :]
    if hashlib.sha256(payload).hexdigest().encode("ascii") != digest or len(payload) < 8:
        return None
    size = int.from_bytes(payload[:8], "little")
    try:
        header = json.loads(payload[8 : 8 + size])
    except ValueError:
        return None
    if header.get("key") != key:
        return None
    return CacheEntry(payload[8 + size :], dict(header.get("lowered", {})))


def entry_path(key: str) -> Path | None:
    """Return the file holding ``key``'s entry (None in memory-only mode)."""
    folder = cache_dir()
    return None if folder is None else folder / f"{key}.cubin"


def load(key: str) -> CacheEntry | None:
    """Return the cached entry for ``key`` (memory first, then disk), or None.

    A disk entry that fails its hash check is deleted and reported as a miss.
    """
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        return hit
    path = entry_path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    entry = _decode(key, data)
    if entry is None:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    with _lock:
        _memory[key] = entry
    return entry


def store(key: str, entry: CacheEntry) -> None:
    """Remember ``entry`` in memory and, unless memory-only, write it atomically to disk.

    A folder that cannot be written is not an error: the kernel stays cached in memory
    (with a once-only ``RuntimeWarning``).
    """
    with _lock:
        _memory[key] = entry
    path = entry_path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(key, entry))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError) as exc:  # ValueError: a path the system cannot represent
        _warn_unwritable(path.parent, exc)


_warned_unwritable = False


def _warn_unwritable(folder: Path, exc: Exception) -> None:
    """Say once that the disk cache is unusable (compiling still works)."""
    global _warned_unwritable
    if not _warned_unwritable:
        _warned_unwritable = True
        source = (
            "set by gp.set_jit_cache_dir()"
            if _override is not _UNSET
            else "set by PYGPUKIT_CACHE_DIR"
            if env.is_set("PYGPUKIT_CACHE_DIR")
            else "the default folder"
        )
        warnings.warn(
            f"cannot write the kernel cache in {folder} ({source}; {exc}); compiled "
            "kernels stay in memory only. Set PYGPUKIT_CACHE_DIR to a writable folder (or to "
            "'' to keep kernels in memory without this warning).",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )


def clear_memory() -> None:
    """Forget the in-memory entries (the disk cache is untouched)."""
    with _lock:
        _memory.clear()

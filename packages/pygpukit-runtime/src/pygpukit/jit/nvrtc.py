"""NVRTC for run-time kernels: located and loaded once per process, and what was tried."""

from __future__ import annotations

import threading
from typing import Any

from ..backend.select import backend as _backend
from ..errors import LibraryNotFoundError

__all__ = [
    "get_nvrtc_path",
    "get_nvrtc_version",
    "is_nvrtc_available",
    "nvrtc_status",
    "require_nvrtc",
]

_nvrtc_lock = threading.Lock()
_nvrtc_status: dict[str, Any] | None = None


def nvrtc_status() -> dict[str, Any]:
    """Locate and load NVRTC once; ``{"loaded", "path", "source", "tried", "version", "error"}``."""
    global _nvrtc_status
    with _nvrtc_lock:
        if _nvrtc_status is not None:
            return _nvrtc_status
        from .._environment import library_candidates, trace_library_load
        from ..backend.select import native, native_error

        status: dict[str, Any] = {
            "loaded": False,
            "path": None,
            "source": None,
            "tried": [],
            "version": None,
            "error": None,
        }
        mod = native()
        candidates = library_candidates("nvrtc")
        if mod is None:
            status["error"] = f"pygpukit._native did not load ({native_error()})"
            status["tried"] = [[c.path, "not tried: no native module"] for c in candidates]
        else:
            try:
                info = mod.load_nvrtc([c.path for c in candidates])
                trace_library_load("nvrtc", info)
                status["tried"] = [list(t) for t in info.get("tried", [])]
                if info["loaded"]:
                    status["loaded"] = True
                    status["path"] = info["path"]
                    status["version"] = tuple(mod.nvrtc_version())
                    status["source"] = next(
                        (c.source for c in candidates if c.path == info["path"]), "system"
                    )
            except Exception as exc:  # an incomplete native build is reported, not raised
                status["error"] = f"{type(exc).__name__}: {exc}"
        _nvrtc_status = status
        return status


def is_nvrtc_available() -> bool:
    """Return whether custom kernels can be compiled and run here (NVRTC and a CUDA GPU)."""
    return bool(_backend().name == "cuda" and nvrtc_status()["loaded"])


def get_nvrtc_path() -> str | None:
    """Return the path NVRTC was loaded from, or None."""
    path = nvrtc_status()["path"]
    return None if path is None else str(path)


def get_nvrtc_version() -> tuple[int, int] | None:
    """Return NVRTC's ``(major, minor)`` version, or None when it is not available."""
    version = nvrtc_status()["version"]
    return None if version is None else (int(version[0]), int(version[1]))


def require_nvrtc() -> tuple[int, int]:
    """NVRTC's version; ``LibraryNotFoundError`` listing every candidate tried if missing."""
    status = nvrtc_status()
    if not status["loaded"]:
        tried = [(str(t[0]), str(t[1])) for t in status["tried"]]
        if status["error"]:
            tried.append(("pygpukit._native", status["error"]))
        raise LibraryNotFoundError("nvrtc", tried)
    version: tuple[int, int] = status["version"]
    return version

"""Point warnings at the user's line, not at PyGPUkit's internals or Python's machinery.

``warnings.warn(..., stacklevel=user_stacklevel())`` skips every frame of the
``pygpukit`` package (all its folders: the runtime and the ops, llm, asr and tts
distributions may live apart) and of the standard library's plumbing that can sit
between the user and the first call (``runpy`` for ``python -m``, ``threading``
and ``concurrent.futures`` for work in threads, ``importlib`` for imports). When
no user frame is left (``python -m pygpukit demo``, a thread whose target is a
PyGPUkit function) the warning points at the outermost PyGPUkit frame instead of
at ``runpy`` or ``threading``.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

__all__ = ["user_stacklevel"]

_PLUMBING_MODULES = ("runpy", "threading", "concurrent.futures", "importlib", "contextlib")


def _package_dirs() -> tuple[str, ...]:
    package = sys.modules.get("pygpukit")
    paths = list(getattr(package, "__path__", ()))
    if not paths:
        paths = [os.path.dirname(os.path.abspath(__file__))]
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths)


def _is_pygpukit(frame: FrameType, dirs: tuple[str, ...]) -> bool:
    name = frame.f_globals.get("__name__", "")
    if name == "pygpukit" or name.startswith("pygpukit."):
        return True
    return frame.f_code.co_filename.startswith(dirs)  # also pygpukit/__main__.py under runpy


def _is_plumbing(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__", "")
    if name.startswith("<frozen ") or frame.f_code.co_filename.startswith("<frozen "):
        return True
    return any(name == m or name.startswith(m + ".") for m in _PLUMBING_MODULES)


def _hidden_by_warnings(frame: FrameType) -> bool:
    """Frames ``warnings.warn`` steps over when counting ``stacklevel`` (the import system)."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def user_stacklevel(skip: int = 0) -> int:
    """The ``stacklevel`` that points a warning issued by the caller at the user's line.

    ``skip`` extra frames above the caller are treated as internal too.
    """
    dirs = _package_dirs()
    frame: FrameType | None = sys._getframe(1)
    level = 1
    outermost_internal = 1
    while frame is not None:
        if level > 1 and _hidden_by_warnings(frame):
            frame = frame.f_back  # warnings.warn skips these itself: they take no level
            continue
        if skip > 0:
            skip -= 1
            outermost_internal = level
        elif _is_pygpukit(frame, dirs):
            outermost_internal = level
        elif not _is_plumbing(frame):
            return level
        frame = frame.f_back
        level += 1
    return outermost_internal

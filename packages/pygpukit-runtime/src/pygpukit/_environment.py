"""Where PyGPUkit finds CUDA's libraries and headers.

Dependency-free on purpose (standard library only): the build tools load this
file by path before the package is installed, and the runtime imports it to tell
the C++ loader which candidates to try. The search order is the one in
docs/internals.md: pip ``nvidia-*`` wheels, then ``CUDA_PATH`` / ``CUDA_HOME``,
then the system loader. The current directory is never searched.

Set ``PYGPUKIT_DEBUG_LIBRARY_LOAD=1`` to print every candidate tried, why it failed and which
one loaded (:func:`trace_library_load`, called by each loader with the C++ loader's result).

It also holds :data:`KERNEL_ABI_VERSION`, the one fact about kernels that build
time and run time must share: the kernel build writes it into every manifest,
and the runtime, the ops package and the JIT disk cache check or key on it.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The calling convention of kernels (argument packing, shared headers). Bump it when that
#: changes: cubins whose manifest carries another version are refused, and JIT cache entries
#: keyed on another version are never found.
KERNEL_ABI_VERSION = 1

__all__ = [
    "KERNEL_ABI_VERSION",
    "LIBRARIES",
    "Candidate",
    "debug_library_load",
    "include_dirs",
    "library_candidates",
    "nvidia_wheel_roots",
    "trace_library_load",
]


@dataclass(frozen=True)
class Candidate:
    """One place a library may be loaded from.

    ``path`` is an absolute file path, or a bare soname that the system loader
    resolves (``source == "system"``).
    """

    path: str
    source: str  # "pip wheel", "CUDA_PATH", "CUDA_HOME" or "system"


# Library name -> (sonames tried in order, sub-folders of an nvidia wheel root).
# cu13 wheels put everything under nvidia/cu13/lib; cu12 wheels use one folder per library.
LIBRARIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cuda": (("libcuda.so.1",), ()),
    "nvrtc": (
        ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"),
        ("cu13/lib", "cuda_nvrtc/lib"),
    ),
    "cublasLt": (
        ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"),
        ("cu13/lib", "cublas/lib"),
    ),
}


def debug_library_load() -> bool:
    """True when ``PYGPUKIT_DEBUG_LIBRARY_LOAD=1`` asks for a trace of every candidate."""
    if __package__:  # imported as pygpukit._environment: the validated reader
        from .env import flag

        return flag("PYGPUKIT_DEBUG_LIBRARY_LOAD")
    # Loaded by path from tools/ (no package): the same values, unvalidated.
    value = os.environ.get("PYGPUKIT_DEBUG_LIBRARY_LOAD", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def trace_library_load(name: str, result: Mapping[str, Any]) -> None:
    """Print a load's failed candidates and its outcome to stderr when debugging is asked for.

    ``result`` is what ``_native.load_driver`` / ``load_nvrtc`` / ``load_cublaslt`` return:
    ``tried`` (``(path, why it failed)`` pairs), ``loaded`` and ``path``.
    """
    if not debug_library_load():
        return
    for path, why in result.get("tried", ()):
        print(f"pygpukit: {name}: {path}: {why}", file=sys.stderr)
    outcome = f"loaded {result.get('path')}" if result.get("loaded") else "not loaded"
    print(f"pygpukit: {name}: {outcome}", file=sys.stderr)


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    for entry in sys.path:
        if entry and os.path.isabs(entry) and entry.endswith(("site-packages", "dist-packages")):
            dirs.append(entry)
    with contextlib.suppress(AttributeError):  # some virtualenv layouts lack it
        dirs.extend(site.getsitepackages())
    user = getattr(site, "getusersitepackages", lambda: "")()
    if user:
        dirs.append(user)
    seen: set[str] = set()
    unique = []
    for d in dirs:
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            unique.append(d)
    return unique


def nvidia_wheel_roots() -> list[str]:
    """The ``site-packages/nvidia`` folders of the installed pip ``nvidia-*`` wheels."""
    roots = []
    for d in _site_dirs():
        root = os.path.join(d, "nvidia")
        if os.path.isdir(root):
            roots.append(root)
    return roots


def _toolkit_roots() -> list[tuple[str, str]]:
    roots = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = os.environ.get(var)
        if value and os.path.isdir(value):
            roots.append((value, var))
    return roots


def library_candidates(name: str) -> list[Candidate]:
    """Every place ``name`` ("cuda", "nvrtc" or "cublasLt") may be loaded from, in search order."""
    sonames, wheel_subdirs = LIBRARIES[name]
    found: list[Candidate] = []
    for root in nvidia_wheel_roots():
        for sub in wheel_subdirs:
            for so in sonames:
                path = os.path.join(root, sub, so)
                if os.path.isfile(path):
                    found.append(Candidate(path, "pip wheel"))
    for root, var in _toolkit_roots():
        for libdir in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            for so in sonames:
                path = os.path.join(root, libdir, so)
                if os.path.isfile(path):
                    found.append(Candidate(path, var))
    found.extend(Candidate(so, "system") for so in sonames)
    return found


def include_dirs() -> list[Candidate]:
    """Folders holding ``cuda.h`` (driver API types), searched like the libraries.

    NVRTC has no built-in ``cuda_fp16.h``; these folders are what the kernel
    compiler passes as ``-I`` so fp16/bf16 kernels compile.
    """
    found: list[Candidate] = []
    for root in nvidia_wheel_roots():
        for sub in ("cu13/include", "cuda_runtime/include"):
            path = os.path.join(root, sub)
            if os.path.isfile(os.path.join(path, "cuda.h")):
                found.append(Candidate(path, "pip wheel"))
    for root, var in _toolkit_roots():
        path = os.path.join(root, "include")
        if os.path.isfile(os.path.join(path, "cuda.h")):
            found.append(Candidate(path, var))
    return found

"""Load the ops package's built-in kernels: the cubin for this GPU, else a JIT compile.

The wheel ships ``_kernels/sm_<arch>/<file>.cubin`` for each SM it was built for,
the sources (and their ``*.cuh`` headers) in ``_kernels/src/``, and a
``manifest.json`` with the NVRTC options (``tools/build_kernels.py``). A GPU
with no matching cubin (a newer SM) gets the source compiled once with the same
options, through ``gp.jit``'s disk cache. Kernels are ``extern "C"`` entry
points; their signatures are parsed from the shipped source, so they are called
like any ``gp.jit`` kernel.
"""

from __future__ import annotations

import functools
import json
import pathlib
import threading
from typing import Any

from pygpukit.backend import select as _select
from pygpukit.errors import DeviceNotSupportedError
from pygpukit.jit.compile import load as _load
from pygpukit.jit.kernel import Kernel
from pygpukit.jit.signature import signature as _signature
from pygpukit.kernels import KERNEL_ABI_VERSION, KernelLibrary

KERNEL_DIR = pathlib.Path(__file__).resolve().parent / "_kernels"
#: The ops package's kernels as a library: constants (and the manifest) read through it.
LIBRARY = KernelLibrary(KERNEL_DIR, "pygpukit-ops")

_lock = threading.Lock()
_modules: dict[tuple[str, int], Any] = {}
_kernels: dict[tuple[str, str, int], Kernel] = {}


@functools.cache
def manifest() -> dict[str, Any]:
    """The manifest written with the cubins (archs, NVRTC options, kernel files)."""
    path = KERNEL_DIR / "manifest.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ImportError(
            f"the kernels of pygpukit-ops are missing ({path}): {exc}; reinstall pygpukit-ops "
            "(or rebuild with tools/dev_build.py)"
        ) from exc
    if data.get("kernel_abi") != KERNEL_ABI_VERSION:
        raise ImportError(
            f"the kernels in {KERNEL_DIR} have kernel ABI {data.get('kernel_abi')}, this "
            f"pygpukit-ops expects {KERNEL_ABI_VERSION}; reinstall pygpukit-ops"
        )
    return data


def constant(file: str, name: str) -> int:
    """The integer ``PGK_CONSTANT(name, ...)`` of ``kernels/<file>.cu`` (from the manifest).

    Launch geometry the kernels define (tile sizes, heads per CTA, split bounds), read on
    every backend; ``KeyError`` listing the file's constants for an unknown name.
    """
    return LIBRARY.constant(file, name)


@functools.cache
def _source(file: str) -> str:
    return (KERNEL_DIR / "src" / f"{file}.cu").read_text(encoding="utf-8")


def jit_options() -> list[str]:
    """NVRTC options of the JIT fallback: the build's, plus the shipped headers' folder.

    ``gp.jit``'s cache key covers the headers a source includes from its ``-I`` folders, so a
    cubin compiled against an older ``*.cuh`` is never reused after an upgrade.
    """
    return LIBRARY.jit_options()


def _cubin_folder(device: int, backend: Any) -> str | None:
    """The ``sm_<arch>`` folder whose cubins run on ``device``, or None (JIT fallback).

    The runtime's rule for its own built-in kernels (``_native.choose_cubin_arch``): the exact
    SM (an ``a`` build first), else the newest lower minor of the same major without ``a``.
    """
    major, minor = backend.device_info(device)["sm"]
    available = [f"sm_{a}" for a in manifest()["archs"]]
    native = _select.native()
    assert native is not None  # only the CUDA backend loads cubins, and it runs on _native
    folder: str = native.choose_cubin_arch(major, minor, available)
    return folder or None


def _module(file: str, device: int, backend: Any) -> Any:
    key = (file, device)
    module = _modules.get(key)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(key)
        if module is None:
            folder = _cubin_folder(device, backend)
            cubin = KERNEL_DIR / str(folder) / f"{file}.cubin"
            if folder is not None and cubin.exists():
                module = backend.load_module(cubin.read_bytes(), device)
            else:  # a GPU this wheel has no cubin for: compile the shipped source once
                module, _ = _load(_source(file), f"{file}.cu", (), jit_options())
            _modules[key] = module
    return module


def kernel(file: str, func: str) -> Kernel:
    """The ``extern "C"`` kernel ``func`` of ``kernels/<file>.cu``, loaded on the current device.

    Cached per (file, function, device): after the first call this is a dict lookup.
    Raises ``DeviceNotSupportedError`` on the CPU backend.
    """
    backend = _select.backend()
    device = int(backend.get_device())
    key = (file, func, device)
    k = _kernels.get(key)
    if k is not None:
        return k
    if backend.name != "cuda":
        raise DeviceNotSupportedError(
            f"pygpukit.ops kernel {func} needs a CUDA GPU; the CPU backend runs the NumPy version"
        )
    module = _module(file, device, backend)
    params = _signature(_source(file), func, None)
    k = Kernel(module.function(func), func, params)
    _kernels[key] = k
    return k

"""Which backend runs this process, and why: chosen once, on first use.

Never at ``import pygpukit``: the first call that needs a backend (creating an
array, asking for a device) probes CUDA. The CUDA backend is used when
``pygpukit._native`` imports, ``libcuda.so.1`` loads and a device with SM 80 or
newer exists. Otherwise the CPU simulation backend runs, after a once-only
:class:`~pygpukit.errors.BackendFallbackWarning` saying why.

``PYGPUKIT_BACKEND=cpu`` forces the CPU backend (no warning);
``PYGPUKIT_BACKEND=cuda`` makes a missing GPU an error instead of a fallback.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from types import ModuleType
from typing import Any

from .. import env, errors
from .._caller import user_stacklevel
from .._rust_loader import rust_module

__all__ = ["backend", "native", "native_error", "status"]

_lock = threading.Lock()
_selected: Any = None  # the backend module once chosen
_status: dict[str, Any] = {}
_native: ModuleType | None = None
_native_error: str | None = None
_native_tried = False

MIN_SM = (8, 0)


def native() -> ModuleType | None:
    """Import ``pygpukit._native`` once; None (with :func:`native_error`) when it fails."""
    global _native, _native_error, _native_tried
    if not _native_tried:
        _native_tried = True
        try:
            rust_module()  # _native imports it: load it here, where its warnings are handled
            module = importlib.import_module("pygpukit._native")
            module._set_error_types(errors)
            _native = module
        except Exception as exc:  # a missing or half-built extension must not break import
            _native_error = f"{type(exc).__name__}: {exc}"
    return _native


def native_error() -> str | None:
    """Why ``pygpukit._native`` did not load (None when it loaded or was not tried)."""
    return _native_error


def _probe_cuda() -> tuple[ModuleType | None, str, dict[str, Any]]:
    """Try the CUDA backend; return ``(module or None, why not, details)``."""
    from .._environment import library_candidates, trace_library_load

    details: dict[str, Any] = {"driver": None, "devices": []}
    mod = native()
    if mod is None:
        return (
            None,
            f"the native module pygpukit._native is missing or incomplete ({_native_error})",
            details,
        )
    try:
        driver = mod.load_driver([c.path for c in library_candidates("cuda")])
        trace_library_load("cuda", driver)
        details["driver"] = driver
        if not driver["loaded"]:
            return None, "CUDA driver not detected (libcuda.so.1 could not be loaded)", details
        mod.init()
        count = mod.device_count()
    except errors.CudaError as exc:
        if exc.name == "CUDA_ERROR_NO_DEVICE":
            return None, "No GPU devices found (cuDeviceGetCount == 0)", details
        return None, f"the CUDA driver failed to initialise: {exc}", details
    except Exception as exc:  # an incomplete _native build is reported, not raised
        return None, f"pygpukit._native is incomplete ({type(exc).__name__}: {exc})", details
    if count == 0:
        return None, "No GPU devices found (cuDeviceGetCount == 0)", details
    infos = [mod.device_info(i) for i in range(count)]
    details["devices"] = infos
    if not any(tuple(info["sm"]) >= MIN_SM for info in infos):
        first = infos[0]
        major, minor = first["sm"]
        return (
            None,
            f"GPU 0 ({first['name']}) has compute capability {major}.{minor}; PyGPUkit needs "
            "SM 80 or newer (Ampere, Ada, Hopper, Blackwell)",
            details,
        )
    try:
        cuda = importlib.import_module("pygpukit.backend.cuda")
        # Register the device backend with the Rust pools now, not at the first allocation,
        # so gp.memory reports (and limits) the GPU pools from the start.
        mod.connect_memory_pool()
    except Exception as exc:  # reported as the reason for the fallback
        return (
            None,
            f"the CUDA backend failed to start ({type(exc).__name__}: {exc})",
            details,
        )
    return cuda, "", details


def _select() -> Any:
    global _selected
    with _lock:
        if _selected is not None:
            return _selected
        # Every PYGPUKIT_* variable is checked now, on every backend: a bad value is
        # reported at the first use of the runtime, even where this backend never reads it.
        env.validate_all()
        forced = env.get("PYGPUKIT_BACKEND") or ""
        from . import cpu

        if forced == "cpu":
            _status.update(backend="cpu", reason="forced by PYGPUKIT_BACKEND=cpu", details={})
            _selected = cpu
            return cpu
        module, reason, details = _probe_cuda()
        if module is None:
            if forced == "cuda":
                raise errors.DeviceNotSupportedError(
                    f"PYGPUKIT_BACKEND=cuda, but the CUDA backend is unusable: {reason}. "
                    "Unset PYGPUKIT_BACKEND to fall back to the CPU backend."
                )
            _status.update(backend="cpu", reason=reason, details=details)
            warnings.warn(
                f"Falling back to CPU simulation backend: {reason}. "
                "Run `python -m pygpukit info` for details.",
                errors.BackendFallbackWarning,
                stacklevel=user_stacklevel(),
            )
            _selected = cpu
            return cpu
        _status.update(backend="cuda", reason="", details=details)
        _selected = module
        return module


def backend() -> Any:
    """Return the process's backend module, choosing it on the first call."""
    selected = _selected
    return selected if selected is not None else _select()


def status() -> dict[str, Any]:
    """Return ``{"backend", "reason", "details"}`` for the chosen backend (chooses it first)."""
    backend()
    return dict(_status)

"""Compile and load run-time kernels: NVRTC options, the disk cache, modules per device."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from .. import _jit_cache
from ..backend.select import backend as _backend
from ..errors import CompileError, DeviceNotSupportedError
from .nvrtc import require_nvrtc

__all__ = [
    "get_jit_cache_dir",
    "load",
    "load_source",
    "require_gpu",
    "reset_jit_cache_dir",
    "set_jit_cache_dir",
]


def set_jit_cache_dir(path: str | None) -> None:
    """Cache compiled kernels in ``path``; ``None`` keeps them in memory only."""
    _jit_cache.set_cache_dir(path)


def reset_jit_cache_dir() -> None:
    """Undo :func:`set_jit_cache_dir`: use ``PYGPUKIT_CACHE_DIR`` or the platform cache folder."""
    _jit_cache.reset_cache_dir()


def get_jit_cache_dir() -> str | None:
    """Return the kernel cache folder (None in memory-only mode)."""
    folder = _jit_cache.cache_dir()
    return None if folder is None else str(folder)


_modules: dict[tuple[str, int], Any] = {}
# (source, program, name expressions, options, device) -> (module, lowered names) of this process.
_loaded: dict[tuple[Any, ...], tuple[Any, dict[str, str]]] = {}
_modules_lock = threading.Lock()


def require_gpu(b: Any) -> None:
    """``DeviceNotSupportedError`` unless backend ``b`` is the CUDA one."""
    if b.name != "cuda":
        raise DeviceNotSupportedError(
            "Custom CUDA kernels (gp.jit) need a CUDA GPU (SM 80 or newer); this process runs "
            "on the CPU simulation backend. Run `python -m pygpukit info` to see why."
        )


@functools.cache
def _include_flags() -> tuple[str, ...]:
    """``-I`` flags for the CUDA headers, searched once per process (a file-system scan)."""
    from .._environment import include_dirs

    return tuple(f"-I{c.path}" for c in include_dirs())


def _options(b: Any, device: int, options: Iterable[str]) -> list[str]:
    opts = [str(o) for o in options]
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.append(f"--gpu-architecture={b.arch(device)}")
    opts.extend(_include_flags())
    return opts


def load(
    source: str, program: str, name_expressions: Sequence[str], options: Iterable[str]
) -> tuple[Any, dict[str, str]]:
    """Compile (or fetch from the cache) and load on the current device."""
    b = _backend()
    require_gpu(b)
    device = int(b.get_device())
    # Loaded before in this process: no hashing, no disk, no option building.
    call = (source, program, tuple(name_expressions), tuple(options), device)
    hit = _loaded.get(call)
    if hit is not None:
        return hit
    version = require_nvrtc()
    opts = _options(b, device, options)
    key = _jit_cache.cache_key(source, name_expressions, opts, b.arch(device), version)
    entry = _jit_cache.load(key)
    if entry is None:
        try:
            cubin, _log, lowered = b.compile(source, program, opts, list(name_expressions))
        except CompileError as exc:
            raise CompileError(exc.log, source, program) from None
        entry = _jit_cache.CacheEntry(bytes(cubin), dict(lowered))
        _jit_cache.store(key, entry)
    with _modules_lock:
        module = _modules.get((key, device))
        if module is None:
            module = b.load_module(entry.cubin, device)
            _modules[(key, device)] = module
        _loaded[call] = (module, entry.lowered)
    return module, entry.lowered


def load_source(source: str, program: str, options: Sequence[str]) -> Any:
    """The module of ``source`` (no name expressions) on the current device, compiled once."""
    return load(source, program, (), options)[0]

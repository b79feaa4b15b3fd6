"""Load a module of packages/pygpukit-runtime/src/pygpukit by path, without importing pygpukit.

The build tools run before pygpukit is installed; importing a module by file keeps one copy of
its code for build time and run time (the library search rules of ``_environment.py``, the
kernel build of ``kernels/build.py``).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

_RUNTIME = pathlib.Path(__file__).resolve().parent.parent / "packages/pygpukit-runtime/src/pygpukit"


def load_runtime_module(relative: str, name: str) -> ModuleType:
    """The runtime's module at ``relative`` (``"kernels/build.py"``) registered as ``name``."""
    spec = importlib.util.spec_from_file_location(name, _RUNTIME / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


def load_environment() -> ModuleType:
    """Return the pygpukit._environment module (library discovery)."""
    return load_runtime_module("_environment.py", "_pygpukit_environment")

"""Load packages/pygpukit-runtime/src/pygpukit/_environment.py by path.

The build tools run before pygpukit is installed; importing the discovery module
by file keeps one copy of the search rules for build time and run time.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

_PATH = (
    pathlib.Path(__file__).resolve().parent.parent
    / "packages/pygpukit-runtime/src/pygpukit/_environment.py"
)


def load_environment() -> ModuleType:
    """Return the pygpukit._environment module without importing pygpukit."""
    spec = importlib.util.spec_from_file_location("_pygpukit_environment", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module

"""Load ``pygpukit._rust`` once, with its warnings pointed at the user's line.

The Rust core reads ``PYGPUKIT_MEMORY_LIMIT`` when it loads and warns about a value
it cannot read. Raised from inside an import, that warning would name Python's
import machinery; loaded through :func:`rust_module`, it is issued again as an
:class:`~pygpukit.errors.EnvironmentVariableWarning` at the first line of user
code that made the runtime load.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from types import ModuleType

from ._caller import user_stacklevel
from .errors import EnvironmentVariableWarning

__all__ = ["rust_module"]


@functools.cache
def rust_module() -> ModuleType:
    """``pygpukit._rust``, imported on the first call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("pygpukit._rust")
    for warning in caught:
        message = str(warning.message)
        category = (
            EnvironmentVariableWarning if message.startswith("PYGPUKIT_") else warning.category
        )
        warnings.warn(message, category, stacklevel=user_stacklevel())
    return module

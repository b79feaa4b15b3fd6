"""Checks that code leaves no device memory behind (shared by the test folders).

A device array kept at module level (a cache of constants, say) outlives every model and test:
it pins its pool segment for the life of the process, on the GPU also the stream it was made on
(with that stream's matmul workspace), and it makes pool statistics depend on which files ran
before in the same process.
"""

from __future__ import annotations

import sys
from typing import Any

from pygpukit.array import GPUArray


def _holds_array(value: Any, depth: int = 0) -> bool:
    if isinstance(value, GPUArray):
        return True
    if depth < 2 and isinstance(value, dict):
        return any(_holds_array(v, depth + 1) for v in list(value.values()))
    if depth < 2 and isinstance(value, (list, tuple, set)):
        return any(_holds_array(v, depth + 1) for v in list(value))
    return False


def module_level_arrays(prefix: str = "pygpukit") -> list[str]:
    """``module.name`` of every global of an imported ``prefix`` module that holds a GPUArray
    (itself, or in a dict, list, tuple or set up to two levels down)."""
    found = []
    for name, module in list(sys.modules.items()):
        if name == prefix or name.startswith(prefix + "."):
            for key, value in list(vars(module).items()):
                if _holds_array(value):
                    found.append(f"{name}.{key}")
    return found

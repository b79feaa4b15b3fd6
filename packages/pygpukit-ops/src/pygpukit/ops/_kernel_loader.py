"""The ops package's built-in kernels, through the runtime's package kernel API.

``_kernels/`` is what ``pygpukit.kernels.build`` wrote at wheel build (cubins per SM, the
sources, ``manifest.json``); :data:`LIBRARY` loads from it like any package's
:class:`pygpukit.kernels.KernelLibrary`: the cubin for this GPU, else the shipped source
compiled once through ``gp.jit``'s disk cache; argument types from the manifest.
"""

from __future__ import annotations

import pathlib

from pygpukit.kernels import KernelLibrary

__all__ = ["KERNEL_DIR", "LIBRARY", "constant", "kernel"]

KERNEL_DIR = pathlib.Path(__file__).resolve().parent / "_kernels"
#: The ops package's kernels (``kernels/*.cu``).
LIBRARY = KernelLibrary(KERNEL_DIR, "pygpukit-ops")


#: ``kernel(file, func)``: entry point ``func`` of ``kernels/<file>.cu`` on the current device
#: (:meth:`KernelLibrary.kernel`; bound directly, so an op's lookup is one call). Cached per
#: (file, function, device); ``DeviceNotSupportedError`` on the CPU backend.
kernel = LIBRARY.kernel


def constant(file: str, name: str) -> int:
    """The integer ``PGK_CONSTANT(name, ...)`` of ``kernels/<file>.cu`` (from the manifest).

    Launch geometry the kernels define (tile sizes, heads per CTA, split bounds), read on
    every backend; ``KeyError`` listing the file's constants for an unknown name.
    """
    return LIBRARY.constant(file, name)

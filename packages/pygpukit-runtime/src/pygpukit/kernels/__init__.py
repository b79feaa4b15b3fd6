"""Kernels shipped by a package: build per SM, load the cubin for the device, launch.

The one mechanism for packages outside the runtime (``pygpukit.ops`` uses it, and so can
any third-party package); docs/kernels.md walks through it.

- Sources: ``kernels/<file>.cu`` including ``"pygpukit/kernel.cuh"``, with each entry point
  declared by ``PGK_KERNEL(name, (params...)) { ... }`` and the integer constants the host
  side needs by ``PGK_CONSTANT(NAME, value)``.
- Build (wheel build time, no GPU needed): ``python -m pygpukit.kernels.build --out
  <package>/_kernels --archs "80;86;89;90a;100a;120a" kernels/*.cu`` writes the cubins, the
  sources and ``manifest.json`` (entry points with their argument type codes, constants).
- Run time: ``lib = KernelLibrary(<package>/_kernels, "my-package")``; ``lib.kernel(file,
  name)`` is a :class:`Kernel` (``k.launch(grid, block, args)`` or ``k(*args)``),
  ``lib.constant(file, NAME)`` an int.

:func:`host_array` and :func:`target_arch` are what a package's CPU path and launch
planning need from the runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array import GPUArray
from ..backend import select
from ..jit.kernel import Kernel, TensorMap
from ..jit.signature import Param
from .build import INCLUDE_DIR, KERNEL_ABI_VERSION
from .library import KernelLibrary

__all__ = [
    "INCLUDE_DIR",
    "KERNEL_ABI_VERSION",
    "Kernel",
    "KernelLibrary",
    "Param",
    "TensorMap",
    "host_array",
    "target_arch",
]


def host_array(x: GPUArray) -> np.ndarray:
    """The NumPy array holding a CPU-backend ``x``'s elements: a view, no copy.

    For a package's NumPy path on the CPU backend: results can be written into it, unless
    ``x`` is read-only (``x.flags.writeable`` False), whose view is read-only too.
    ``TypeError`` for an array on a GPU, whose memory the host cannot address.
    """
    if not isinstance(x, GPUArray):
        raise TypeError(f"host_array needs a GPUArray, got {type(x).__name__}")
    if x.device != "cpu":
        raise TypeError(
            f"host_array: the array lives on {x.device}; only CPU-backend arrays have a host "
            "view (use x.to_numpy() for a copy)"
        )
    impl: Any = x._impl
    view = np.asarray(impl)
    if not x.flags.writeable and view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def target_arch(device: int | None = None) -> str:
    """The NVRTC target of a device (``"sm_90a"`` on Hopper); the current device by default.

    ``DeviceNotSupportedError`` on the CPU backend.
    """
    from ..jit.compile import require_gpu

    backend = select.backend()
    require_gpu(backend)
    return str(backend.arch(int(backend.get_device()) if device is None else int(device)))

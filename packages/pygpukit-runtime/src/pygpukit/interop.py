"""Zero-copy exchange with other array libraries: DLPack both ways.

``GPUArray`` exports with ``__dlpack__`` / ``__dlpack_device__`` (and
``__cuda_array_interface__`` v3 on CUDA); :func:`from_dlpack` imports any
producer (PyTorch, CuPy, JAX, NumPy) without copying. On CUDA the producer is
asked to make its data ready on PyGPUkit's current stream (the DLPack stream
protocol). On the CPU backend only host producers can be imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .array import GPUArray, _wrap
from .backend.select import backend as _backend
from .dtypes import normalize

__all__ = ["from_dlpack"]

_KDL_CPU = 1
_KDL_CUDA = 2


def from_dlpack(obj: Any) -> GPUArray:
    """Return a GPUArray sharing memory with ``obj`` (an object with ``__dlpack__``).

    ``TypeError`` for objects that are not DLPack producers or hold an
    unsupported dtype; ``BufferError`` when the data lives where this backend
    cannot reach it (CUDA memory on the CPU backend).
    """
    if isinstance(obj, GPUArray):
        return obj
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise TypeError(
            f"from_dlpack() needs an object with __dlpack__ and __dlpack_device__, "
            f"got {type(obj).__name__}"
        )
    b = _backend()
    device_type = int(obj.__dlpack_device__()[0])
    expected = _KDL_CUDA if b.name == "cuda" else _KDL_CPU
    if device_type != expected:
        where = "CUDA" if b.name == "cuda" else "CPU simulation"
        raise BufferError(
            f"from_dlpack(): the {type(obj).__name__} lives on DLPack device type {device_type}, "
            f"which the {where} backend cannot share; copy it there first "
            "(e.g. gp.asarray(numpy_array))"
        )
    impl = b.from_dlpack(obj)
    normalize(b.dtype(impl))  # TypeError for dtypes PyGPUkit does not support
    # A read-only NumPy producer (CPU backend) stays read-only here.
    readonly = isinstance(impl, np.ndarray) and not impl.flags.writeable
    return _wrap(impl, b, readonly)

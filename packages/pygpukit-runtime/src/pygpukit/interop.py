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
from .validation import describe

__all__ = ["from_dlpack"]


def _device_type(obj: Any) -> int:
    """``obj.__dlpack_device__()[0]``, or ``TypeError`` when it is not ``(int, int)``."""
    device = obj.__dlpack_device__()
    if (
        not isinstance(device, tuple)
        or len(device) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in device)
    ):
        raise TypeError(
            f"from_dlpack(): the {type(obj).__name__}'s __dlpack_device__() returned "
            f"{describe(device)}, not a (device_type, device_id) pair of ints"
        )
    return int(device[0])


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
            f"got {describe(obj)}"
        )
    b = _backend()
    device_type = _device_type(obj)
    expected = _KDL_CUDA if b.name == "cuda" else _KDL_CPU
    if device_type != expected:
        where = "CUDA" if b.name == "cuda" else "CPU simulation"
        raise BufferError(
            f"from_dlpack(): the {type(obj).__name__} lives on DLPack device type {device_type}, "
            f"which the {where} backend cannot share; copy it there first "
            "(e.g. gp.asarray(numpy_array))"
        )
    try:
        impl = b.from_dlpack(obj)
    except (TypeError, ValueError, BufferError) as exc:
        if isinstance(exc, BufferError) or "dtype" in str(exc):
            raise  # the producer's own refusal, or an unsupported dtype: already clear
        raise TypeError(
            f"from_dlpack(): the {type(obj).__name__}'s __dlpack__() did not return a valid"
            f" DLPack capsule ({exc})"
        ) from None
    normalize(b.dtype(impl))  # TypeError for dtypes PyGPUkit does not support
    # A read-only NumPy producer (CPU backend) stays read-only here.
    readonly = isinstance(impl, np.ndarray) and not impl.flags.writeable
    return _wrap(impl, b, readonly)

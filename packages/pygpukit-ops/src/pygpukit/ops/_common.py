"""Shared plumbing of the ops: argument checks, and the bridge to the CPU backend's buffers.

Every op takes and returns ``GPUArray``s. On the CUDA backend it launches a
built-in kernel (:mod:`._kernel_loader`) on the current stream and returns at
once; on the CPU backend it runs the NumPy version (:mod:`.reference`) on the
array's host buffer (:func:`host`), computing in float32 or wider and rounding
once to the output dtype, which is also the reference the GPU tests compare
against. Which of the two runs is chosen once per process (:mod:`._plan`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray, check_writeable
from pygpukit.kernels import host_array

HALF_DTYPES = (np.dtype(gp.float16), np.dtype(gp.bfloat16))
FLOAT_DTYPES = (np.dtype(gp.float32), *HALF_DTYPES)

#: The dtype part of the kernels' ``extern "C"`` entry-point names (``rmsnorm_bf16``, ...).
KERNEL_SUFFIX = {
    np.dtype(gp.float32): "f32",
    np.dtype(gp.float16): "f16",
    np.dtype(gp.bfloat16): "bf16",
}


def kernel_suffix(dtype: np.dtype) -> str:
    """``f32`` / ``f16`` / ``bf16``: the entry-point suffix of a dtype the op already checked."""
    return KERNEL_SUFFIX[dtype]


def host(x: GPUArray) -> np.ndarray:
    """The NumPy view of a CPU-backend array (no copy)."""
    return host_array(x)


def to_array(values: np.ndarray, dtype: Any) -> GPUArray:
    """A new array on the current backend holding ``values`` rounded to ``dtype``."""
    return gp.from_numpy(np.ascontiguousarray(np.asarray(values).astype(np.dtype(dtype))))


def write_into(out: GPUArray, values: np.ndarray) -> None:
    """Store ``values`` (rounded to ``out``'s dtype) into the CPU-backend array ``out``."""
    host(out)[...] = np.asarray(values).astype(out.dtype)


def f32(x: GPUArray) -> np.ndarray:
    """A CPU-backend array's values as float32 (float64 stays float64)."""
    a = host(x)
    return a if a.dtype == np.float64 else a.astype(np.float32)


def check_array(
    x: Any,
    name: str,
    *,
    dtypes: Iterable[Any] | None = None,
    ndim: int | Iterable[int] | None = None,
    contiguous: bool = True,
) -> GPUArray:
    """Validate an array argument: type, dtype, rank and (by default) C-contiguity.

    Raises ``TypeError`` for a non-GPUArray or a dtype outside ``dtypes``,
    ``ValueError`` for a wrong rank or a strided view (with the fix in the message).
    """
    if not isinstance(x, GPUArray):
        raise TypeError(f"{name} must be a GPUArray, got {type(x).__name__}")
    # The checks run on every launch: the common cases (dtype tuples such as FLOAT_DTYPES, an
    # int or tuple rank) are tested as given; lists are normalized only on the error path.
    if dtypes is not None and x.dtype not in dtypes:
        allowed = [np.dtype(d) for d in dtypes]
        if x.dtype not in allowed:
            names = ", ".join(str(d) for d in allowed)
            raise TypeError(f"{name} must have dtype {names}; got {x.dtype}")
    if ndim is not None:
        rank = x.ndim
        if rank != ndim if isinstance(ndim, int) else rank not in tuple(ndim):
            ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
            want = " or ".join(str(r) for r in ranks)
            raise ValueError(f"{name} must be {want}-D, got shape {x.shape}")
    if contiguous and not x.is_contiguous():
        raise ValueError(f"{name} must be C-contiguous (got strides {x.strides}); pass x.copy()")
    return x


def check_same_dtype(first: GPUArray, *others: tuple[str, GPUArray | None]) -> None:
    """Raise ``TypeError`` unless every named array in ``others`` has ``first``'s dtype."""
    for name, a in others:
        if a is not None and a.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {a.dtype}, expected {first.dtype} like the input")


def check_shape(x: GPUArray | None, name: str, shape: tuple[int, ...]) -> None:
    """Raise ``ValueError`` unless ``x`` (when given) has exactly ``shape``."""
    if x is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def check_out(out: GPUArray | None, shape: tuple[int, ...], dtype: Any, name: str = "out") -> None:
    """Validate an ``out=`` array: exact shape and dtype, C-contiguous, writeable."""
    if out is None:
        return
    check_array(out, name, dtypes=[dtype])
    check_shape(out, name, shape)
    check_writeable(out, name)


def result(out: GPUArray | None, shape: tuple[int, ...], dtype: Any) -> GPUArray:
    """``out`` when given (already checked), else a new uninitialised array."""
    return out if out is not None else gp.empty(shape, dtype)


#: The largest value a kernel's ``int`` parameter holds.
INT32_MAX = 2**31 - 1


def check_int32(op: str, **sizes: int) -> None:
    """Raise ``ValueError`` when a size for a kernel's ``int`` parameter exceeds ``INT32_MAX``.

    The kernels take widths, head counts, vocabulary sizes and the like as 32-bit ints (their
    offsets are 64-bit); a larger value would otherwise surface as a ``TypeError`` from the
    argument packing. Called on the CUDA path only: the NumPy path has no such limit.
    """
    for name, value in sizes.items():
        if value > INT32_MAX:
            raise ValueError(
                f"{op}: {name} = {value} is above 2**31 - 1, the most its GPU kernel takes; "
                "split the call into smaller pieces"
            )

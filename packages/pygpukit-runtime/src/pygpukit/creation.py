"""Array creation, and the way back to NumPy.

``empty/zeros/ones/full``, ``*_like``, ``arange``, ``linspace``, ``eye``,
``from_numpy``/``asarray``; ``to_numpy``/``asnumpy``.

Every function takes ``device=None`` (the current device) and ``stream=None``
(the current stream). Without a ``dtype``, functions that only get a shape make
**float32** (the GPU's working type); ``full`` and ``arange`` infer it from
their values (integers give int64, bools bool, floats float32); ``from_numpy``
and ``asarray`` keep NumPy's dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _indexing
from . import validation as _v
from .array import GPUArray, _wrap
from .backend.select import backend as _backend
from .dtypes import NAMES, SUPPORTED, float32, normalize

__all__ = [
    "arange",
    "asarray",
    "asnumpy",
    "empty",
    "empty_like",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "to_numpy",
    "zeros",
    "zeros_like",
]


def _target(backend: Any, device: int | None) -> int:
    if device is None:
        return int(backend.get_device())
    from .device import _check_ordinal

    return _check_ordinal(device)


def _stream_impl(stream: Any, op: str = "") -> Any:
    return None if stream is None else _v.stream(stream, "stream", op)


def _fits(dims: tuple[int, ...], dtype_name: str, op: str) -> None:
    """``ValueError`` naming the shape when its byte size overflows a 64-bit size."""
    if math.prod(dims) > _MAX_ITEMS_ANY_DTYPE:
        _v.byte_size(dims, SUPPORTED[dtype_name].itemsize, op)


#: Shapes up to this many elements fit 2**63 - 1 bytes in every dtype (8 bytes at most).
_MAX_ITEMS_ANY_DTYPE = (2**63 - 1) // 8


def _dtype_for(dtype: Any, default: np.dtype[Any]) -> np.dtype[Any]:
    return default if dtype is None else _v.dtype(dtype)


def _infer_scalar_dtype(value: Any) -> np.dtype[Any]:
    """The dtype ``full`` infers from a fill value (NumPy's for NumPy scalars)."""
    if isinstance(value, (bool, np.bool_)):
        return SUPPORTED["bool"]
    if isinstance(value, (int, np.integer)):
        return SUPPORTED["int64"] if isinstance(value, int) else normalize(np.asarray(value).dtype)
    if isinstance(value, (float, np.floating)):
        return float32 if isinstance(value, float) else normalize(np.asarray(value).dtype)
    raise TypeError(f"fill value must be a real number or bool, got {_v.describe(value)}")


def _scalar(value: Any, dtype: np.dtype[Any]) -> Any:
    """``value`` converted to ``dtype`` as NumPy would, as a Python scalar."""
    try:
        converted = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot represent {_v.describe(value)} as {dtype.name}: {exc}") from None
    except OverflowError:
        raise ValueError(
            f"fill value {_v.describe(value)} is out of range for {dtype.name}"
        ) from None
    if converted.ndim != 0:
        raise ValueError(f"fill value must be a scalar, got an array of shape {converted.shape}")
    return converted.item()


def empty(
    shape: Any,
    dtype: Any = None,
    device: int | None = None,
    stream: Any = None,
    *,
    evictable: bool = False,
) -> GPUArray:
    """Return a new uninitialised array of ``shape`` (dtype float32 by default).

    ``evictable=True`` lets the memory pool spill the array to pinned host
    memory when it needs room (a limit or a full device) and bring it back,
    contents intact, before the next operation that uses it. Its address may
    change then: ``data_ptr`` and DLPack exports are valid until the pool next
    needs room. See :mod:`pygpukit.memory`.
    """
    # The allocation hot path (gp.empty + drop is benchmarked against PyTorch's allocator): no
    # helper calls beyond the shape check, the dtype name cached per dtype argument, and
    # device=None passed through so the backend takes the current device itself instead of a
    # get_device() round trip.
    dims = _indexing.normalize_shape(shape)
    try:
        name = _EMPTY_NAMES[dtype]
    except (KeyError, TypeError):
        name = _dtype_name(dtype)
    _fits(dims, name, "empty")
    if evictable is not False and evictable is not True:
        evictable = _v.boolean(evictable, "evictable", "empty")
    b = _backend()
    impl = b.empty(
        dims,
        name,
        None if device is None else _target(b, device),
        None if stream is None else _v.stream(stream, "stream", "empty"),
        evictable,
    )
    out = _object_new(GPUArray)
    out._impl = impl
    out._backend = b
    out._readonly = False
    return out


_object_new = object.__new__
# dtype argument -> NumPy name for ``empty`` (hashable arguments only); None is float32.
_EMPTY_NAMES: dict[Any, str] = {None: "float32"}


def _dtype_name(dtype: Any) -> str:
    name = NAMES[normalize(dtype)]
    try:
        if len(_EMPTY_NAMES) < 256:
            _EMPTY_NAMES[dtype] = name
    except TypeError:  # an unhashable dtype-like: no caching
        pass
    return name


def full(
    shape: Any, fill_value: Any, dtype: Any = None, device: int | None = None, stream: Any = None
) -> GPUArray:
    """Return a new array of ``shape`` filled with ``fill_value``."""
    dims = _indexing.normalize_shape(shape)
    dt = _infer_scalar_dtype(fill_value) if dtype is None else _v.dtype(dtype, "dtype", "full")
    _fits(dims, NAMES[dt], "full")
    value = _scalar(fill_value, dt)
    stream_impl = _stream_impl(stream, "full")
    b = _backend()
    return _wrap(b.full(dims, NAMES[dt], value, _target(b, device), stream_impl), b)


def zeros(shape: Any, dtype: Any = None, device: int | None = None, stream: Any = None) -> GPUArray:
    """Return a new array of zeros (dtype float32 by default)."""
    return full(shape, 0, _dtype_for(dtype, float32), device, stream)


def ones(shape: Any, dtype: Any = None, device: int | None = None, stream: Any = None) -> GPUArray:
    """Return a new array of ones (dtype float32 by default)."""
    return full(shape, 1, _dtype_for(dtype, float32), device, stream)


def _like(a: Any, dtype: Any, shape: Any) -> tuple[Any, np.dtype[Any], int | None]:
    if isinstance(a, GPUArray):
        device: int | None = a._backend.device_of(a._impl)
        base_dtype = a.dtype
        base_shape: Any = a.shape
    elif isinstance(a, np.ndarray):
        device = None
        base_dtype = normalize(a.dtype)
        base_shape = a.shape
    else:
        raise TypeError(f"expected a GPUArray or a NumPy array, got {_v.describe(a)}")
    return (
        base_shape if shape is None else shape,
        base_dtype if dtype is None else normalize(dtype),
        device,
    )


def empty_like(a: Any, dtype: Any = None, shape: Any = None) -> GPUArray:
    """Return a new uninitialised array with ``a``'s shape, dtype and device."""
    s, dt, device = _like(a, dtype, shape)
    return empty(s, dt, device)


def zeros_like(a: Any, dtype: Any = None, shape: Any = None) -> GPUArray:
    """Return zeros with ``a``'s shape, dtype and device."""
    s, dt, device = _like(a, dtype, shape)
    return full(s, 0, dt, device)


def ones_like(a: Any, dtype: Any = None, shape: Any = None) -> GPUArray:
    """Return ones with ``a``'s shape, dtype and device."""
    s, dt, device = _like(a, dtype, shape)
    return full(s, 1, dt, device)


def full_like(a: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> GPUArray:
    """Return an array filled with ``fill_value`` with ``a``'s shape, dtype and device."""
    s, dt, device = _like(a, dtype, shape)
    return full(s, fill_value, dt, device)


def _real(value: Any, what: str) -> Any:
    _v.real(value, what, "arange")
    return value


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: Any = None,
    device: int | None = None,
    stream: Any = None,
) -> GPUArray:
    """Return evenly spaced values in ``[start, stop)`` (``arange(n)`` is ``0 .. n-1``).

    The length is ``ceil((stop - start) / step)`` as in NumPy; values are
    ``start + i * step``. ``ValueError`` for a zero step.
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = _real(start, "start"), _real(stop, "stop"), _real(step, "step")
    if step == 0:
        raise ValueError("arange step must not be zero")
    span = (stop - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: the length (stop - start) / step is {span}, not finite")
    n = max(0, math.ceil(span))
    if dtype is None:
        all_int = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dt = SUPPORTED["int64"] if all_int else float32
    else:
        dt = _v.dtype(dtype, "dtype", "arange")
    _fits((n,), NAMES[dt], "arange")
    stream_impl = _stream_impl(stream, "arange")
    b = _backend()
    impl = b.arange(start, step, n, NAMES[dt], _target(b, device), stream_impl)
    return _wrap(impl, b)


def linspace(
    start: float,
    stop: float,
    num: int = 50,
    endpoint: bool = True,
    dtype: Any = None,
    device: int | None = None,
    stream: Any = None,
) -> GPUArray:
    """Return ``num`` evenly spaced values from ``start`` to ``stop`` (NumPy's values).

    Computed in float64 on the host and copied over (``num`` is small in practice).
    """
    count = _v.size(num, "num", "linspace")
    endpoint = _v.boolean(endpoint, "endpoint", "linspace")
    _v.real(start, "start", "linspace")
    _v.real(stop, "stop", "linspace")
    dt = float32 if dtype is None else _v.dtype(dtype, "dtype", "linspace")
    _fits((count,), NAMES[dt], "linspace")
    values = np.linspace(start, stop, count, endpoint=endpoint, dtype=np.float64)
    return from_numpy(values.astype(dt), device=device, stream=stream)


def eye(
    N: int,
    M: int | None = None,
    k: int = 0,
    dtype: Any = None,
    device: int | None = None,
    stream: Any = None,
) -> GPUArray:
    """Return an ``N x M`` array with ones on diagonal ``k`` and zeros elsewhere."""
    rows = _v.size(N, "N", "eye")
    cols = rows if M is None else _v.size(M, "M", "eye")
    diag = _v.index(k, "k", "eye")
    out = zeros((rows, cols), dtype, device, stream)
    length = max(0, min(rows, cols - diag) if diag >= 0 else min(rows + diag, cols))
    if length:
        item = out.itemsize
        offset = diag * item if diag >= 0 else -diag * cols * item
        b = out._backend
        start = b.offset(out._impl)
        b.fill(b.view(out._impl, (length,), ((cols + 1) * item,), start + offset), 1)
    return out


def from_numpy(
    array: np.ndarray,
    device: int | None = None,
    stream: Any = None,
    *,
    evictable: bool = False,
) -> GPUArray:
    """Copy a NumPy array or scalar (any strides, a supported dtype) to the device.

    Without ``stream`` the copy is done when this returns. With ``stream`` it is
    asynchronous: this returns once ``array`` has been read (it may be modified
    then), and work enqueued on ``stream`` afterwards sees the data.

    Uploads with ``stream``, and pageable ones of 1 MiB and more without, go
    through the transfer engine: from 8 MiB, host threads copy the array into a
    small pinned ring that a kernel reads out over PCIe (about 90% of the
    pinned-copy rate on an H200 host; set ``PYGPUKIT_UPLOAD_KERNEL=0`` to keep
    uploads off the SMs), below that through pinned staging and the copy engine.
    Since the kernel writes the destination as the host fills the ring, an
    upload queued behind unfinished work on ``stream`` returns only once that
    work is done and all but the last 16 MiB have been copied; upload on a
    stream of its own to overlap with compute. Without ``stream``, page-locked
    arrays (:func:`pygpukit.memory.pinned_empty`) and smaller ones go straight
    to the copy engine.
    ``evictable``: as for :func:`empty`.
    """
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"from_numpy: array must be a numpy.ndarray, got {_v.describe(array)}; "
            "use gp.asarray() for other objects"
        )
    evictable = _v.boolean(evictable, "evictable", "from_numpy")
    stream_impl = _stream_impl(stream, "from_numpy")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("="))
    _v.dtype(array.dtype, "array.dtype", "from_numpy")  # TypeError for unsupported dtypes
    if not array.flags.c_contiguous:  # backends copy C-contiguous host memory only
        array = array.copy(order="C")
    b = _backend()
    impl = b.from_numpy(array, _target(b, device), stream_impl, stream is None, evictable)
    return _wrap(impl, b)


def asarray(obj: Any, dtype: Any = None, device: int | None = None, stream: Any = None) -> GPUArray:
    """Return ``obj`` as a GPUArray (itself when it already is one, converted as asked).

    CUDA-resident DLPack producers (PyTorch, CuPy, JAX arrays on the GPU) are
    shared without a copy (:func:`pygpukit.from_dlpack`); anything else is copied
    from ``numpy.asarray(obj)``.
    """
    if not isinstance(obj, GPUArray) and _on_cuda_device(obj):
        from .interop import from_dlpack

        obj = from_dlpack(obj)
    if isinstance(obj, GPUArray):
        out = obj if dtype is None else obj.astype(dtype, copy=False)
        return out if device is None else out.to_device(device)
    try:
        host = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=normalize(dtype))
    except (ValueError, OverflowError) as exc:
        # Ragged nested lists, values that do not fit the dtype: NumPy's reason, not its repr.
        raise ValueError(f"asarray: cannot convert {_v.describe(obj)}: {exc}") from None
    if host.dtype == object:
        raise TypeError(f"asarray: cannot convert {_v.describe(obj)} to a numeric array")
    return from_numpy(host, device=device, stream=stream)


def _on_cuda_device(obj: Any) -> bool:
    """Whether ``obj`` is a DLPack producer holding CUDA device memory (kDLCUDA)."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or not hasattr(obj, "__dlpack__"):
        return False
    try:
        return int(device()[0]) == 2
    except (TypeError, ValueError, IndexError, BufferError):
        return False


def to_numpy(a: GPUArray) -> np.ndarray:
    """Copy a GPUArray to a new NumPy array (a sync point)."""
    if not isinstance(a, GPUArray):
        raise TypeError(f"to_numpy: a must be a GPUArray, got {_v.describe(a)}")
    return a.to_numpy()


def asnumpy(a: Any) -> np.ndarray:
    """Return a NumPy array: a copy of a GPUArray, or ``numpy.asarray`` of anything else."""
    if isinstance(a, GPUArray):
        return a.to_numpy()
    return np.asarray(a)

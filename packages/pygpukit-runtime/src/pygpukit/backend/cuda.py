"""The CUDA backend: the backend protocol (:mod:`.base`) over ``pygpukit._native``.

Deliberately thin: every function forwards to one ``_native`` call, which does
the CUDA work in C++ (allocations through the Rust pool, launches through its
dispatch controller). An array impl is a ``_native.Array``; streams, events,
graphs, modules and functions are the ``_native`` classes themselves. Nothing
here runs per element.

Importing this module (done by :mod:`.select` once the driver loaded and a
device was found) tells ``_native`` where the built-in kernels are.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from .._environment import KERNEL_ABI_VERSION, include_dirs, library_candidates
from .select import native

_native: Any = native()
if _native is None:  # select imports this module only after _native loaded
    raise ImportError("pygpukit._native is not available")

name = "cuda"

_KERNEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_kernels")


def _register_kernels() -> None:
    """Point ``_native`` at the shipped cubins (NVRTC is loaded only if one must be compiled)."""
    manifest = os.path.join(_KERNEL_DIR, "manifest.json")
    try:
        with open(manifest, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ImportError(
            f"the built-in kernels of pygpukit-runtime are missing ({manifest}): {exc}; "
            "reinstall pygpukit-runtime (or rebuild with tools/dev_build.py)"
        ) from exc
    abi = json.loads(text).get("kernel_abi")
    if abi != KERNEL_ABI_VERSION:
        raise ImportError(
            f"the built-in kernels in {_KERNEL_DIR} have kernel ABI {abi}, this pygpukit-runtime "
            f"expects {KERNEL_ABI_VERSION}; reinstall pygpukit-runtime (or rebuild with "
            "tools/dev_build.py)"
        )
    _native.set_kernel_dir(
        _KERNEL_DIR,
        text,
        [c.path for c in include_dirs()],
        [c.path for c in library_candidates("nvrtc")],
    )


_register_kernels()

# --- devices ---------------------------------------------------------------------------

device_count = _native.device_count
device_info = _native.device_info
get_device = _native.get_device
set_device = _native.set_device
synchronize = _native.synchronize
arch = _native.target_arch

# --- streams, events, graphs -----------------------------------------------------------

Stream = _native.Stream
Event = _native.Event
priority_range = _native.priority_range
set_launches_keep_gil = _native.set_launches_keep_gil
begin_capture = _native.begin_capture
end_capture = _native.end_capture


def current_stream() -> Any:
    """The calling thread's current stream on its current device."""
    return _native.current_stream()


def default_stream(device: int) -> Any:
    """``device``'s default stream (a thread's current one until it sets another)."""
    return _native.default_stream(device)


def set_current_stream(stream: Any) -> None:
    """Make ``stream`` current for its device (``None``: the current device's default)."""
    _native.set_current_stream(stream)


# --- array creation and transfer -------------------------------------------------------


# An uninitialised C-contiguous array (memory from the Rust pool; spillable if evictable):
# `_native.empty(shape, dtype, device, stream, evictable)` itself, a raw METH_FASTCALL function
# (device None: the current device), so gp.empty adds no Python frame here.
empty = _native.empty


def full(shape: tuple[int, ...], dtype: str, value: Any, device: int, stream: Any) -> Any:
    """A C-contiguous array filled with ``value``."""
    out = _native.empty(shape, dtype, device, stream)
    out.fill(value, stream)
    return out


def arange(start: Any, step: Any, n: int, dtype: str, device: int, stream: Any) -> Any:
    """``start + i * step``: float64 math for floating dtypes, int64 for integer ones."""
    if not _dtypes.is_floating(_dtypes.normalize(dtype)) and not (
        float(start).is_integer() and float(step).is_integer()
    ):
        # Fractional start/step into an integer dtype: compute in float64, truncate like NumPy.
        values = _native.arange(float(start), float(step), n, "float64", device, stream)
        return values.astype(dtype, stream)
    return _native.arange(start, step, n, dtype, device, stream)


def from_numpy(
    array: np.ndarray, device: int, stream: Any, blocking: bool, evictable: bool = False
) -> Any:
    """A new C-contiguous device copy of ``array``.

    Not blocking: through the Rust transfer engine (pinned staging, copy stream);
    returns once ``array`` has been read, ``stream`` sees the data.
    """
    out = _native.empty(array.shape, array.dtype.name, device, stream, evictable)
    out.copy_from_host(array, stream, blocking)
    return out


def to_numpy(impl: Any, stream: Any, out: np.ndarray | None = None) -> np.ndarray:
    """A host array (``out``, else a new one) with the impl's values; waits (GIL released).

    C++ copies 1 MiB and more into pageable memory through the transfer engine's
    pinned pipeline, and pinned memory (``out`` from ``pinned_empty``) directly.
    """
    host = np.empty(impl.shape, dtype=_dtypes.normalize(impl.dtype)) if out is None else out
    impl.copy_to_host(host, stream)
    return host


@functools.cache
def _download_worker() -> ThreadPoolExecutor:
    # One thread: downloads run in submission order, each through the transfer engine with the
    # GIL released; the caller's thread only orders the copy after its stream.
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="pygpukit-d2h")


def to_numpy_async(impl: Any, stream: Any, out: np.ndarray | None = None) -> Future[np.ndarray]:
    """Start copying the impl to a host array (``out``, else a new one); the future's result.

    The copy is ordered after the work enqueued on ``stream`` so far; the
    future keeps the device data and the host array alive until it is done.
    """
    host = np.empty(impl.shape, dtype=_dtypes.normalize(impl.dtype)) if out is None else out
    download = impl.download(host, stream)

    def run() -> np.ndarray:
        download.run()
        host: np.ndarray = download.host
        return host

    return _download_worker().submit(run)


def connect_pool() -> None:
    """Register the CUDA backend with the Rust pools now (the first allocation does otherwise)."""
    _native.connect_pool()


def evictable(impl: Any) -> bool:
    """Whether the impl's buffer may be spilled to host memory under pressure."""
    return bool(impl.evictable)


# --- metadata --------------------------------------------------------------------------


def dtype(impl: Any) -> np.dtype[Any]:
    """The impl's element type as a NumPy dtype (ml_dtypes for bfloat16)."""
    return _dtypes.normalize(impl.dtype)


def offset(impl: Any) -> int:
    """Byte offset of element 0 from the start of the buffer."""
    return impl.offset


def buffer_nbytes(impl: Any) -> int:
    """Size of the buffer the impl views."""
    return impl.buffer_nbytes


def device_of(impl: Any) -> int:
    """The device holding the impl's buffer."""
    return impl.device


def data_ptr(impl: Any) -> int:
    """Device address of element 0."""
    return impl.data_ptr


def is_c_contiguous(impl: Any) -> bool:
    """Whether the impl is C-contiguous."""
    return impl.is_c_contiguous


# --- views and copies ------------------------------------------------------------------


def view(impl: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any:
    """Another view of the impl's buffer (bounds checked in C++)."""
    return impl.view(shape, strides, offset)


def view_dtype(impl: Any, dtype: str) -> Any:
    """The same bytes as another dtype of the same itemsize."""
    return impl.view_dtype(dtype)


def copy(impl: Any) -> Any:
    """A new C-contiguous array with the impl's values."""
    out = _native.Array.empty(impl.shape, impl.dtype, impl.device, None)
    out.copy_from(impl)
    return out


def astype(impl: Any, dtype: str) -> Any:
    """A new C-contiguous array converted to ``dtype`` (one cast kernel)."""
    return impl.astype(dtype)


def copy_into(dst: Any, src: Any) -> None:
    """Copy ``src`` into ``dst`` (same shape, any strides and devices), casting like astype."""
    if src.dtype != dst.dtype:
        src = src.astype(dst.dtype)
    dst.copy_from(src)


def fill(impl: Any, value: Any) -> None:
    """Set every element of the (possibly strided) impl to ``value``."""
    impl.fill(value)


# --- interop ---------------------------------------------------------------------------


def dlpack(impl: Any, stream: int | None) -> Any:
    """A 'dltensor' capsule over the impl; the consumer's ``stream`` waits for pending work."""
    return _native.to_dlpack(impl, stream)


def dlpack_device(impl: Any) -> tuple[int, int]:
    """``(2, device)``: kDLCUDA."""
    return (2, impl.device)


def from_dlpack(obj: Any) -> Any:
    """An impl sharing memory with a CUDA DLPack producer (zero-copy).

    Our current stream is passed as the consumer stream, so the producer orders
    its pending work before anything we enqueue.
    """
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) != 2:
        raise BufferError(
            f"from_dlpack on the CUDA backend needs CUDA device memory (DLPack device type 2), "
            f"got device type {int(device_type)}; use gp.asarray to copy host data"
        )
    stream = _native.current_stream(int(device_id))
    try:
        capsule = obj.__dlpack__(stream=stream.handle)
    except TypeError:  # producers predating the stream keyword
        capsule = obj.__dlpack__()
    return _native.from_dlpack(capsule)


def cuda_array_interface(impl: Any) -> dict[str, Any]:
    """``__cuda_array_interface__`` v3 of the impl (strides None when C-contiguous)."""
    np_dtype = _dtypes.normalize(impl.dtype)
    return {
        "shape": impl.shape,
        "typestr": np_dtype.str,
        "descr": [("", np_dtype.str)],
        "data": (impl.data_ptr, False),
        "strides": None if impl.is_c_contiguous else impl.strides,
        "version": 3,
        "stream": impl.stream.handle,
    }


# --- JIT -------------------------------------------------------------------------------


def compile(
    source: str, name: str, options: Sequence[str], name_expressions: Sequence[str]
) -> tuple[bytes, str, dict[str, str]]:
    """NVRTC to a cubin for the current device's exact architecture unless options name one."""
    return _native.compile(source, name, list(options), list(name_expressions))


def load_module(cubin: bytes, device: int) -> Any:
    """Load a cubin on ``device``."""
    return _native.Module(cubin, device)


def tensor_map(impl: Any, box: Sequence[int], swizzle: int) -> Any:
    """A TMA descriptor of ``impl`` (cuTensorMapEncodeTiled); ValueError for a bad layout."""
    return _native.TensorMap(impl, list(box), swizzle)


# The array ops live in one module per family; imported last because they use the helpers above.
from .cuda_linalg import matmul, matmul_new, matmul_nt, matmul_nt_new  # noqa: E402, F401
from .cuda_reduce import cumsum, reduce, softmax, take, tri  # noqa: E402, F401

# --- elementwise: one _native call each; see native/ops/elementwise.hpp ---------------------
binary = _native.binary
unary = _native.unary
where = _native.where


def clip(a: Any, lo: Any, hi: Any, out: Any) -> Any:
    """``minimum(maximum(a, lo), hi)`` (either bound may be None): two launches."""
    if lo is None and hi is None:
        raise ValueError("clip: one of lo and hi must be given")
    if lo is not None:
        a = _native.binary("maximum", a, lo, out if hi is None else None)
    if hi is not None:
        a = _native.binary("minimum", a, hi, out)
    return a

"""The CPU simulation backend: the backend protocol over NumPy.

An array impl is a ``numpy.ndarray`` viewing a flat ``uint8`` buffer that
:func:`_host_buffer` allocated (the one place host memory for arrays comes
from, so the Rust host pool can take it over). Streams are always idle, events
are host timestamps, and features that need a GPU (custom kernels, CUDA graphs)
raise :class:`~pygpukit.errors.DeviceNotSupportedError`. This backend is also
the reference that GPU results are tested against.
"""

from __future__ import annotations

import os
import platform
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from .. import memory as _memory
from ..errors import DeviceNotSupportedError

name = "cpu"

_NEEDS_GPU = (
    "{what} need a CUDA GPU (SM 80 or newer); this process runs on the CPU simulation backend. "
    "Run `python -m pygpukit info` to see why no GPU was selected."
)


def _host_buffer(nbytes: int) -> np.ndarray:
    """Allocate the flat ``uint8`` buffer behind one array (every CPU array comes from here).

    The bytes come from the Rust host pool, so ``gp.memory`` limits, stats and
    ``OutOfMemoryError`` behave as they do on a GPU.
    """
    return _memory.host_buffer(nbytes)


# Buffers created evictable, by id (ndarrays are not hashable); entries go with their buffer. The
# CPU backend's memory is host memory already, so the flag is kept for the API only.
_EVICTABLE: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _new(shape: tuple[int, ...], dtype: Any, evictable: bool = False) -> np.ndarray:
    dt = np.dtype(dtype)
    n = dt.itemsize
    for d in shape:
        n *= d
    buffer = _host_buffer(n)
    if evictable:
        _EVICTABLE[id(buffer)] = buffer
    return np.ndarray(shape, dt, buffer=buffer)


def _buffer(impl: np.ndarray) -> np.ndarray:
    base = impl.base
    return base if isinstance(base, np.ndarray) else impl


# --- devices ---------------------------------------------------------------------------


def device_count() -> int:
    """Return 1: the host is the CPU backend's only device."""
    return 1


def device_info(device: int) -> dict[str, Any]:
    """Describe the host with the keys of ``_native.device_info`` (GPU-only ones are None)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    return {
        "name": f"CPU simulation ({platform.processor() or platform.machine()})",
        "sm": None,
        "sm_count": os.cpu_count(),
        "total_memory": total,
        "l2_cache_bytes": None,
        "shared_mem_per_block": None,
        "shared_mem_per_block_optin": None,
        "shared_mem_per_sm": None,
        "clock_khz": None,
        "memory_clock_khz": None,
        "memory_bus_width": None,
        "driver_version": None,
        "pci_bus_id": None,
    }


def get_device() -> int:
    """Return 0, the host."""
    return 0


def set_device(device: int) -> None:
    """Accept device 0 (the only one); callers validate the ordinal first."""


def synchronize(device: int) -> None:
    """Return at once: CPU work is synchronous."""


def arch(device: int) -> str:
    """Return ``"cpu"``."""
    return "cpu"


# --- streams, events, graphs -----------------------------------------------------------


class HostStream:
    """A stream on the host: work runs synchronously, so it is always idle."""

    __slots__ = ("__weakref__", "device", "handle", "priority")

    def __init__(self, device: int, priority: int) -> None:
        self.device = device
        self.priority = priority
        self.handle = 0

    def synchronize(self) -> None:
        """Return at once (nothing is ever pending)."""

    def query(self) -> bool:
        """Return True: nothing is ever pending."""
        return True

    def wait_event(self, event: Any) -> None:
        """Return at once: the event's work has already run."""


class HostEvent:
    """An event on the host: ``record`` takes a timestamp."""

    __slots__ = ("_time", "device", "handle", "timing")

    def __init__(self, device: int, timing: bool) -> None:
        self.device = device
        self.timing = timing
        self.handle = 0
        self._time: float | None = None

    def record(self, stream: Any) -> None:
        """Take the timestamp."""
        self._time = time.perf_counter()

    def query(self) -> bool:
        """Return True: recorded work has always completed."""
        return True

    def synchronize(self) -> None:
        """Return at once."""

    def elapsed_time(self, end: HostEvent) -> float:
        """Milliseconds from this event's timestamp to ``end``'s."""
        if self._time is None or end._time is None:
            raise RuntimeError("both events must be recorded before elapsed_time()")
        return (end._time - self._time) * 1000.0


def Stream(device: int, priority: int) -> HostStream:
    """Create a host stream."""
    return HostStream(device, priority)


def Event(device: int, timing: bool) -> HostEvent:
    """Create a host event."""
    return HostEvent(device, timing)


_DEFAULT_STREAM = HostStream(0, 0)
_local = threading.local()


def current_stream() -> HostStream:
    """Return the thread's current host stream."""
    stream: HostStream | None = getattr(_local, "stream", None)
    return stream if stream is not None else _DEFAULT_STREAM


def default_stream(device: int) -> HostStream:
    """The default host stream (one for every device: host work never overlaps)."""
    return _DEFAULT_STREAM


def set_current_stream(stream: HostStream | None) -> None:
    """Make ``stream`` the thread's current stream (None: the default stream)."""
    _local.stream = stream


def priority_range(device: int) -> tuple[int, int]:
    """Return ``(0, -5)``, the range every SM 80+ GPU reports, so code runs unchanged here.

    Host streams are always idle, so the priority is only recorded.
    """
    return (0, -5)


def set_launches_keep_gil(keep: bool) -> bool:
    """Record whether this thread's launches keep the interpreter lock; the old setting.

    Host "launches" run the work at once under the lock either way, so it is only recorded.
    """
    was = bool(getattr(_local, "launches_keep_gil", False))
    _local.launches_keep_gil = bool(keep)
    return was


def begin_capture(stream: Any) -> None:
    """Raise: CUDA graphs need a GPU."""
    raise DeviceNotSupportedError(_NEEDS_GPU.format(what="CUDA graphs (gp.graph_capture)"))


def end_capture(stream: Any) -> Any:
    """Raise: CUDA graphs need a GPU."""
    raise DeviceNotSupportedError(_NEEDS_GPU.format(what="CUDA graphs (gp.graph_capture)"))


# --- creation and transfer ------------------------------------------------------------


def empty(
    shape: tuple[int, ...], dtype: str, device: int | None, stream: Any, evictable: bool = False
) -> np.ndarray:
    """Allocate an uninitialised C-contiguous array (``evictable`` is only recorded)."""
    return _new(shape, dtype, evictable)


def full(shape: tuple[int, ...], dtype: str, value: Any, device: int, stream: Any) -> np.ndarray:
    """Allocate an array filled with ``value``."""
    out = _new(shape, dtype)
    out.fill(value)
    return out


def arange(start: Any, step: Any, n: int, dtype: str, device: int, stream: Any) -> np.ndarray:
    """Fill ``start + i * step`` (float64 math for floating dtypes, int64 for integers)."""
    out = _new((n,), dtype)
    work = np.float64 if out.dtype.kind not in "iub" else np.int64
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(out, start + np.arange(n, dtype=work) * step, casting="unsafe")
    return out


def from_numpy(
    array: np.ndarray, device: int, stream: Any, blocking: bool, evictable: bool = False
) -> np.ndarray:
    """Copy ``array`` into a new C-contiguous buffer."""
    out = _new(array.shape, array.dtype, evictable)
    np.copyto(out, array)
    return out


def to_numpy(impl: np.ndarray, stream: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Return a new C-contiguous NumPy copy, or copy into ``out`` and return it."""
    if out is None:
        return np.array(impl, copy=True, order="C")
    np.copyto(out, impl)
    return out


def to_numpy_async(
    impl: np.ndarray, stream: Any, out: np.ndarray | None = None
) -> Future[np.ndarray]:
    """Return a completed future holding a NumPy copy (host memory needs no transfer)."""
    done: Future[np.ndarray] = Future()
    done.set_result(to_numpy(impl, stream, out))
    return done


def evictable(impl: np.ndarray) -> bool:
    """Whether the array was created evictable (host memory is never spilled)."""
    buffer = _buffer(impl)
    return _EVICTABLE.get(id(buffer)) is buffer


# --- metadata --------------------------------------------------------------------------


def dtype(impl: np.ndarray) -> np.dtype[Any]:
    """Return the impl's NumPy dtype."""
    return impl.dtype


def offset(impl: np.ndarray) -> int:
    """Return the byte offset of element 0 from the start of the buffer."""
    buf = _buffer(impl)
    if buf is impl:
        return 0
    return int(impl.__array_interface__["data"][0] - buf.__array_interface__["data"][0])


def buffer_nbytes(impl: np.ndarray) -> int:
    """Return the size of the buffer the impl views."""
    return int(_buffer(impl).nbytes)


def device_of(impl: np.ndarray) -> int:
    """Return 0: every CPU array lives on the host."""
    return 0


def data_ptr(impl: np.ndarray) -> int:
    """Return the host address of element 0."""
    return int(impl.__array_interface__["data"][0])


def is_c_contiguous(impl: np.ndarray) -> bool:
    """Return whether the impl is C-contiguous."""
    return bool(impl.flags.c_contiguous)


# --- views and copies ------------------------------------------------------------------


def view(impl: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any:
    """Build another view of the impl's buffer (NumPy checks the bounds)."""
    return np.ndarray(shape, impl.dtype, buffer=_buffer(impl), offset=offset, strides=strides)


def view_dtype(impl: np.ndarray, dtype: str) -> np.ndarray:
    """Reinterpret the bytes as ``dtype`` of the same itemsize."""
    return impl.view(np.dtype(dtype))


def copy(impl: np.ndarray) -> np.ndarray:
    """Copy into a new C-contiguous array."""
    out = _new(impl.shape, impl.dtype)
    np.copyto(out, impl)
    return out


def astype(impl: np.ndarray, dtype: str) -> np.ndarray:
    """Convert into a new C-contiguous array (unsafe casting, like NumPy's astype)."""
    out = _new(impl.shape, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(out, impl, casting="unsafe")
    return out


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src`` into ``dst`` elementwise, casting as ``astype`` does."""
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(dst, src, casting="unsafe")


def fill(impl: np.ndarray, value: Any) -> None:
    """Set every element of the (possibly strided) impl to ``value``."""
    impl.fill(value)


# --- interop ---------------------------------------------------------------------------


def dlpack(impl: np.ndarray, stream: int | None) -> Any:
    """Export through NumPy's DLPack (``BufferError`` for bfloat16, which DLPack lacks here)."""
    if stream is not None:
        raise BufferError("stream must be None for an array on the CPU backend (DLPack protocol)")
    return impl.__dlpack__()


def dlpack_device(impl: np.ndarray) -> tuple[int, int]:
    """Return ``(1, 0)``: kDLCPU."""
    return (1, 0)


def from_dlpack(obj: Any) -> np.ndarray:
    """Import a host DLPack producer: zero-copy when C-contiguous, else a copy."""
    array = np.from_dlpack(obj)
    if array.flags.c_contiguous:
        return array
    return from_numpy(array, 0, None, True)


def cuda_array_interface(impl: np.ndarray) -> dict[str, Any]:
    """Raise ``AttributeError``: host memory has no CUDA array interface."""
    raise AttributeError("__cuda_array_interface__ exists only for arrays on the CUDA backend")


# --- JIT -------------------------------------------------------------------------------


def compile(
    source: str, name: str, options: Sequence[str], name_expressions: Sequence[str]
) -> tuple[bytes, str, dict[str, str]]:
    """Raise: custom kernels need a GPU."""
    raise DeviceNotSupportedError(_NEEDS_GPU.format(what="Custom CUDA kernels (gp.jit)"))


def load_module(cubin: bytes, device: int) -> Any:
    """Raise: custom kernels need a GPU."""
    raise DeviceNotSupportedError(_NEEDS_GPU.format(what="Custom CUDA kernels (gp.jit)"))


def tensor_map(impl: Any, box: Sequence[int], swizzle: int) -> Any:
    """Raise: tensor maps describe device memory for GPU kernels."""
    raise DeviceNotSupportedError(_NEEDS_GPU.format(what="Tensor maps (gp.TensorMap)"))


# The array ops live in one module per family; imported last because they use the helpers above.
from .cpu_elementwise import binary, clip, unary, where  # noqa: E402, F401
from .cpu_linalg import matmul, matmul_new, matmul_nt, matmul_nt_new  # noqa: E402, F401
from .cpu_reduce import cumsum, reduce, softmax, take, tri  # noqa: E402, F401

"""PyGPUkit's exception types.

Caller mistakes (bad shapes, dtypes, indices, argument counts) are plain
``ValueError`` / ``TypeError`` / ``IndexError`` raised before anything is
enqueued. The types here report runtime failures; every message says what went
wrong and what to do about it. ``_native`` raises these (registered with
``_native._set_error_types(pygpukit.errors)`` when the CUDA backend starts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

__all__ = [
    "AdmissionError",
    "BackendFallbackWarning",
    "CompileError",
    "CudaError",
    "DeviceNotSupportedError",
    "EnvironmentVariableError",
    "EnvironmentVariableWarning",
    "LibraryNotFoundError",
    "OutOfMemoryError",
    "PyGPUkitError",
    "ReadOnlyArrayError",
    "SafeTensorsError",
    "SchedulerDeadlockError",
]


def _size(nbytes: int) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (4096 -> "4.0 KiB")."""
    if nbytes < 1024:
        return f"{nbytes} B"
    value = nbytes / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


class PyGPUkitError(Exception):
    """Base class of every PyGPUkit runtime error."""


class CudaError(PyGPUkitError):
    """A CUDA driver call failed.

    ``code`` is the ``CUresult`` number, ``name`` its symbolic name
    (``"CUDA_ERROR_ILLEGAL_ADDRESS"``) and ``message`` the driver's description.
    """

    def __init__(self, code: int, name: str, message: str) -> None:
        self.code = code
        self.name = name
        self.message = message
        hint = ""
        if name in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED"):
            hint = (
                " The context is now unusable: a kernel read or wrote out of bounds;"
                " check its indexing and restart the process."
            )
        elif name.startswith("CUDA_ERROR_STREAM_CAPTURE") and "captur" not in message.lower():
            hint = " A synchronizing call is not allowed while a stream is being captured."
        super().__init__(f"{name} ({code}): {message}.{hint}")


class OutOfMemoryError(PyGPUkitError, MemoryError):
    """An allocation did not fit in the device, the memory limit or a partition's quota.

    ``in_use`` is what the refusing partition (or, outside partitions, the pool) holds, not
    counting the refused request; ``partition`` is None outside every partition.
    ``limit_exceeded`` says whether a limit (the partition's quota or the global limit)
    refused it, rather than the device or other partitions' reservations.
    """

    def __init__(
        self,
        requested: int,
        in_use: int,
        limit: int | None,
        partition: str | None = None,
        limit_exceeded: bool | None = None,
    ) -> None:
        self.requested = requested
        self.in_use = in_use
        self.limit = limit
        self.partition = partition
        if limit_exceeded is None:  # not told: guess from the figures (sizes are rounded up)
            limit_exceeded = limit is not None and in_use + requested > limit
        self.limit_exceeded = limit_exceeded
        where = f"partition {partition!r}" if partition else "the memory pool"
        cap = f" of a {_size(limit)} limit" if limit is not None else ""
        if partition and not limit_exceeded:
            # Not the partition's own quota: the scheduler's QoS refused it, because the rest of
            # the device is allocated or reserved by other partitions.
            super().__init__(
                f"out of memory: requested {_size(requested)} in {where} with"
                f" {_size(in_use)} already in use{cap}; the rest of the device is allocated to"
                " or reserved for other partitions. Free arrays in this partition, or lower"
                " the memory requests (reservations) of the others."
            )
            return
        # A partition's quota is its own; the global limit does not change it.
        remedy = (
            "or give the partition a larger memory limit"
            if partition
            else "or raise the limit (PYGPUKIT_MEMORY_LIMIT, gp.memory.set_limit)"
        )
        super().__init__(
            f"out of memory: requested {_size(requested)} with {_size(in_use)} already in use"
            f"{cap} in {where}. Free arrays you no longer need, call"
            f" gp.memory.empty_cache(), {remedy}."
        )


class ReadOnlyArrayError(PyGPUkitError, ValueError):
    """A write to a read-only GPUArray: ``x[...] = v``, an in-place operator, ``out=``, ``fill``.

    Arrays are read-only after ``x.setflags(write=False)`` (loaded model weights are), and
    so are their views and every ``broadcast_to`` view (its elements alias each other).
    A ``ValueError`` too, as NumPy's "assignment destination is read-only" is.
    """


class SafeTensorsError(PyGPUkitError, ValueError):
    """A ``.safetensors`` file cannot be read or its (untrusted) header is malformed.

    ``path`` is the file and ``tensor`` the tensor at fault, where one is.
    """

    def __init__(self, message: str, *, path: str | None = None, tensor: str | None = None):
        self.path = path
        self.tensor = tensor
        super().__init__(message)


class CompileError(PyGPUkitError):
    """NVRTC rejected a kernel source. ``log`` is NVRTC's full log."""

    def __init__(self, log: str, source: str | None = None, name: str | None = None) -> None:
        self.log = log
        self.source = source
        self.name = name
        first = first_error_line(log)
        what = f"kernel {name!r}" if name else "kernel source"
        detail = f"\n  {first}" if first else ""
        context = ""
        if source is not None and first:
            line_no = _line_number(first)
            lines = source.splitlines()
            if line_no is not None and 1 <= line_no <= len(lines):
                context = f"\n  line {line_no}: {lines[line_no - 1].strip()}"
        super().__init__(
            f"NVRTC could not compile the {what}:{detail}{context}\n"
            f"Fix the source; the full log is in the exception's .log attribute."
        )


def first_error_line(log: str) -> str:
    """The first line of an NVRTC log that reports an error (else its first line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else ""


def _line_number(diagnostic: str) -> int | None:
    # NVRTC diagnostics read "<name>(12): error: ...".
    start = diagnostic.find("(")
    end = diagnostic.find(")", start + 1)
    if start < 0 or end < 0:
        return None
    text = diagnostic[start + 1 : end]
    return int(text) if text.isdigit() else None


class AdmissionError(PyGPUkitError):
    """The scheduler refused a partition or task: what it requests does not fit.

    ``resource`` is ``"memory"`` or ``"compute"``; ``requested`` and ``available``
    are in bytes (memory) or millionths of the device (compute); ``partition``
    names the partition refused, when there is one. The Rust scheduler sets them.
    """

    resource: str | None = None
    requested: int | None = None
    available: int | None = None
    partition: str | None = None


class SchedulerDeadlockError(PyGPUkitError, RuntimeError):
    """A scheduler task waited for another task that can never start.

    Raised by ``Task.result()`` / ``Task.exception()`` (without a timeout) inside a
    task when every worker of the scheduler would then be blocked waiting on its
    own tasks, so none is left to run the one awaited.
    """


class DeviceNotSupportedError(PyGPUkitError):
    """The device (or the CPU backend) cannot do what was asked.

    Raised for GPUs below SM 80 and for GPU-only features (custom kernels, CUDA
    graphs) on the CPU simulation backend.
    """


class LibraryNotFoundError(PyGPUkitError):
    """A shared library could not be loaded; ``tried`` lists every candidate and why."""

    _INSTALL: ClassVar[dict[str, str]] = {
        "cuda": "install the NVIDIA GPU driver (libcuda.so.1 comes with it)",
        "nvrtc": "pip install pygpukit-runtime[jit] (or set CUDA_PATH to a CUDA Toolkit)",
        "cublasLt": "pip install pygpukit-runtime[cublas] (or set CUDA_PATH to a CUDA Toolkit)",
    }

    def __init__(self, name: str, tried: Sequence[tuple[str, str]]) -> None:
        self.library = name
        self.tried = [tuple(t) for t in tried]
        lines = "".join(f"\n  {path}: {why}" for path, why in self.tried) or "\n  (no candidates)"
        todo = self._INSTALL.get(name, f"install {name}")
        super().__init__(
            f"{name} library not found; tried:{lines}\nTo fix: {todo}."
            " Set PYGPUKIT_DEBUG_LIBRARY_LOAD=1 to trace the search."
        )


class BackendFallbackWarning(RuntimeWarning):
    """Issued once when no usable GPU is found and the CPU simulation backend is used."""


class EnvironmentVariableError(PyGPUkitError, ValueError):
    """A ``PYGPUKIT_*`` environment variable holds a value that would do the wrong thing.

    ``variable`` is its name, ``value`` the text found and ``allowed`` what it accepts.
    Raised at the variable's first use (see :mod:`pygpukit.env`).
    """

    def __init__(self, variable: str, value: str, allowed: str) -> None:
        self.variable = variable
        self.value = value
        self.allowed = allowed
        super().__init__(
            f"{variable}={value!r} is not valid; allowed: {allowed}. Fix or unset {variable}."
        )


class EnvironmentVariableWarning(RuntimeWarning):
    """A ``PYGPUKIT_*`` environment variable was ignored: its value is not one it accepts."""

"""The backend protocol: what ``array.py`` and the device/stream/JIT wrappers call.

A backend is a *module* (``backend/cuda.py`` over ``pygpukit._native``,
``backend/cpu.py`` over NumPy) exposing the functions and classes of
:class:`Backend`. ``array.py`` never branches on which backend it holds: every
``GPUArray`` keeps ``_impl`` (the backend's array object) and ``_backend`` (the
module) and calls ``self._backend.<function>(self._impl, ...)``.

Conventions shared by every function:

- ``shape`` is a tuple of ints; ``strides`` and ``offset`` are in **bytes**
  (NumPy's convention); ``offset`` counts from the start of the impl's buffer.
- ``dtype`` arguments are canonical NumPy names (``"float32"``, ``"bfloat16"``,
  ...) already validated by :mod:`pygpukit.dtypes`; backends do not re-validate.
- ``device`` is an ordinal; ``stream`` is a :class:`StreamImpl` of the same
  backend or ``None`` for the thread's current stream.
- Caller mistakes (bad shapes, dtypes, indices) are caught in Python *before* a
  backend function runs; backends raise :mod:`pygpukit.errors` types for
  runtime failures (``CudaError``, ``OutOfMemoryError``, ``CompileError``).

Array impls expose the plain attributes ``shape``, ``strides``, ``ndim``,
``size``, ``nbytes`` and ``itemsize`` (a ``numpy.ndarray`` and a
``_native.Array`` both do); everything else goes through a function, because
the two impl types spell it differently.

The core ops are more functions of the same shape:
``binary(op, a, b, out) -> impl`` (``b`` an impl or a Python scalar, NumPy
broadcasting and promotion decided before the call), ``unary(op, a, out)``,
``reduce(op, a, axes, ddof)`` (keepdims and ``out=`` applied in Python),
``softmax``, ``cumsum``, ``take``, ``tri``, ``matmul(a, b, out, allow_tf32)``,
``where``, ``clip``; the other shape ops are views plus ``copy_into``. Two matmul
shortcuts keep small products cheap on the host: ``matmul_new(a, b, allow_tf32) ->
impl`` (two 2-D, or two 3-D impls of one batch size, one dtype), ``matmul_nt(x, w,
out, allow_tf32)`` (``out = x @ w.T``, ``x`` and ``out`` C-contiguous) and
``matmul_nt_new(x, w, allow_tf32) -> impl`` (the same into a new ``[..., N]`` impl).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ArrayImpl",
    "Backend",
    "EventImpl",
    "FunctionImpl",
    "GraphImpl",
    "ModuleImpl",
    "StreamImpl",
]

Shape = tuple[int, ...]


class ArrayImpl(Protocol):
    """The attributes every backend's array object has (``ndarray``, ``_native.Array``)."""

    @property
    def shape(self) -> Shape:
        """Size of each dimension."""

    @property
    def strides(self) -> Shape:
        """Byte step along each dimension."""

    @property
    def ndim(self) -> int:
        """Number of dimensions."""

    @property
    def size(self) -> int:
        """Number of elements."""

    @property
    def nbytes(self) -> int:
        """``size * itemsize``."""

    @property
    def itemsize(self) -> int:
        """Bytes per element."""


class StreamImpl(Protocol):
    """A stream: ``_native.Stream`` on CUDA, an always-idle host stream on CPU."""

    @property
    def handle(self) -> int:
        """The ``CUstream`` as an int (0 on CPU)."""

    @property
    def device(self) -> int:
        """The device ordinal."""

    @property
    def priority(self) -> int:
        """The priority it was created with."""

    def synchronize(self) -> None:
        """Wait (GIL released) until the queued work finished."""

    def query(self) -> bool:
        """Whether the queued work finished; never waits."""

    def wait_event(self, event: EventImpl) -> None:
        """Make later work on this stream wait for ``event``."""


class EventImpl(Protocol):
    """An event: ``_native.Event`` on CUDA, a host timestamp on CPU."""

    @property
    def handle(self) -> int:
        """The ``CUevent`` as an int (0 on CPU)."""

    def record(self, stream: StreamImpl) -> None:
        """Record on ``stream``."""

    def query(self) -> bool:
        """Whether the recorded work finished; never waits."""

    def synchronize(self) -> None:
        """Wait (GIL released) until the recorded work finished."""

    def elapsed_time(self, end: EventImpl) -> float:
        """Milliseconds from this event to ``end``."""


class GraphImpl(Protocol):
    """A captured CUDA graph; keeps the buffers allocated during capture alive."""

    def replay(self, stream: StreamImpl) -> None:
        """Enqueue the captured work on ``stream``."""


class FunctionImpl(Protocol):
    """One kernel of a loaded module; arguments packed in C++ by its signature codes."""

    def attributes(self) -> dict[str, int]:
        """``num_regs``, ``max_threads_per_block``, ``shared_size_bytes``, ..."""

    def set_signature(self, codes: list[str]) -> None:
        """Set the parameter type codes used to pack launch arguments."""

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: StreamImpl,
        args: tuple[Any, ...],
    ) -> None:
        """Pack ``args`` by the signature (``TypeError`` naming the index) and launch."""


class ModuleImpl(Protocol):
    """A loaded cubin."""

    def function(self, name: str) -> FunctionImpl:
        """The kernel named ``name`` (a lowered name for templates)."""


class Backend(Protocol):
    """The module interface of ``backend/cpu.py`` and ``backend/cuda.py``.

    Every member is a module-level function (or class, for the ``Stream``/``Event``
    constructors). Blocking calls release the GIL on CUDA.
    """

    #: ``"cuda"`` or ``"cpu"``; what ``gp.backend_name()`` reports.
    name: str

    # --- devices ---------------------------------------------------------------
    def device_count(self) -> int:
        """Number of usable devices (1 on CPU)."""
        ...

    def device_info(self, device: int) -> dict[str, Any]:
        """The ``_native.device_info`` dict (CPU: a host description with the same keys)."""
        ...

    def get_device(self) -> int:
        """The calling thread's current device."""
        ...

    def set_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread."""
        ...

    def synchronize(self, device: int) -> None:
        """Wait for all work on ``device``."""
        ...

    def arch(self, device: int) -> str:
        """The compile target of ``device`` (``"sm_90a"``, ``"sm_86"``; ``"cpu"`` on CPU)."""
        ...

    # --- streams, events, graphs ----------------------------------------------------
    def Stream(self, device: int, priority: int) -> StreamImpl:
        """A new non-blocking stream on ``device``."""
        ...

    def Event(self, device: int, timing: bool) -> EventImpl:
        """A new event on ``device``."""
        ...

    def current_stream(self) -> StreamImpl:
        """The calling thread's current stream on its current device."""
        ...

    def default_stream(self, device: int) -> StreamImpl:
        """``device``'s default stream (current until a thread sets another; never destroyed)."""
        ...

    def set_current_stream(self, stream: StreamImpl | None) -> None:
        """Make ``stream`` current (``None``: the device's default stream)."""
        ...

    def priority_range(self, device: int) -> tuple[int, int]:
        """``(least, greatest)`` stream priority; lower numbers are higher priority."""
        ...

    def set_launches_keep_gil(self, keep: bool) -> bool:
        """Whether the calling thread's launches keep the interpreter lock; the old setting.

        Off by default: a launch releases the lock while the dispatch controller may hold it.
        For a thread whose launches are never held and whose host work must not wait for the
        lock to come back after each one (a protected engine's, ``pygpukit.llm.engine``).
        """
        ...

    def begin_capture(self, stream: StreamImpl) -> None:
        """Start capturing the work enqueued on ``stream`` into a graph."""
        ...

    def end_capture(self, stream: StreamImpl) -> GraphImpl:
        """Stop capturing and instantiate the graph."""
        ...

    # --- array creation and transfer -------------------------------------------------
    def empty(
        self,
        shape: Shape,
        dtype: str,
        device: int | None,
        stream: StreamImpl | None,
        evictable: bool = False,
    ) -> Any:
        """An uninitialised C-contiguous array; ``evictable``: the pool may spill it to host.

        ``device=None`` is the current device (the CUDA backend reads it in C++).
        """
        ...

    def full(
        self, shape: Shape, dtype: str, value: Any, device: int, stream: StreamImpl | None
    ) -> Any:
        """A C-contiguous array filled with ``value`` (already representable in ``dtype``)."""
        ...

    def arange(
        self, start: Any, step: Any, n: int, dtype: str, device: int, stream: StreamImpl | None
    ) -> Any:
        """``start + i * step`` for ``i < n``, computed in ``dtype`` (float64 math for floats)."""
        ...

    def from_numpy(
        self,
        array: np.ndarray,
        device: int,
        stream: StreamImpl | None,
        blocking: bool,
        evictable: bool = False,
    ) -> Any:
        """A new C-contiguous copy of ``array`` (C-contiguous, native byte order, supported)."""
        ...

    def to_numpy(
        self, impl: Any, stream: StreamImpl | None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """A host ``ndarray`` with the impl's data and shape (a sync point).

        ``out`` (checked by the caller: same shape and dtype, C-contiguous, writeable) or a new one.
        """
        ...

    def to_numpy_async(
        self, impl: Any, stream: StreamImpl | None, out: np.ndarray | None = None
    ) -> Future[np.ndarray]:
        """Start copying the impl to a host ``ndarray``, ordered after ``stream``'s work.

        The host array is ``out`` (checked by the caller) or a new one.
        """
        ...

    def evictable(self, impl: Any) -> bool:
        """Whether the impl's buffer may be spilled to host memory under pressure."""
        ...

    # --- metadata --------------------------------------------------------------------
    def dtype(self, impl: Any) -> np.dtype[Any]:
        """The impl's element type as a NumPy dtype."""
        ...

    def offset(self, impl: Any) -> int:
        """Byte offset of element 0 from the start of the impl's buffer."""
        ...

    def buffer_nbytes(self, impl: Any) -> int:
        """Size in bytes of the buffer the impl views (bounds for :meth:`view`)."""
        ...

    def device_of(self, impl: Any) -> int:
        """The ordinal of the device holding the impl's buffer."""
        ...

    def data_ptr(self, impl: Any) -> int:
        """Address of element 0 (offset included)."""
        ...

    def is_c_contiguous(self, impl: Any) -> bool:
        """True when the impl is C-contiguous."""
        ...

    # --- views and copies ------------------------------------------------------------
    def view(self, impl: Any, shape: Shape, strides: Shape, offset: int) -> Any:
        """Another view of the impl's buffer; ``offset`` from the buffer start, bytes."""
        ...

    def view_dtype(self, impl: Any, dtype: str) -> Any:
        """The same bytes reinterpreted as ``dtype`` of the same itemsize."""
        ...

    def copy(self, impl: Any) -> Any:
        """A new C-contiguous array with the impl's values."""
        ...

    def astype(self, impl: Any, dtype: str) -> Any:
        """A new C-contiguous array converted to ``dtype`` (NumPy's unsafe casting)."""
        ...

    def copy_into(self, dst: Any, src: Any) -> None:
        """Copy ``src`` into ``dst`` elementwise (same shape, any strides, casting as astype)."""
        ...

    def fill(self, impl: Any, value: Any) -> None:
        """Set every element of the (possibly strided) impl to ``value``."""
        ...

    # --- elementwise (cpu_elementwise.py, _native.binary/unary/where) ---------------------
    def binary(self, op: str, a: Any, b: Any, out: Any = None) -> Any:
        """``a <op> b`` (``op`` a name in ``_native.BINARY_OPS``, e.g. ``"add"``).

        ``a``/``b`` are impls or scalars (Python scalars weak, NumPy scalars strong; at least
        one impl). Promotion, broadcasting and dtype checks happen here (``TypeError`` /
        ``ValueError`` before any work); returns a new impl, or ``out`` written in place with
        NumPy's ``same_kind`` casting.
        """
        ...

    def unary(self, op: str, a: Any, out: Any = None) -> Any:
        """``<op>(a)`` (``op`` a name in ``_native.UNARY_OPS``, e.g. ``"exp"``).

        Integer inputs of math functions promote as NumPy's do (int8 -> float16,
        int16 -> float32, int32/int64 -> float64).
        """
        ...

    def where(self, cond: Any, x: Any, y: Any, out: Any) -> Any:
        """``x`` where ``cond`` (an impl, nonzero is true) else ``y``, broadcast together."""
        ...

    def clip(self, a: Any, lo: Any, hi: Any, out: Any) -> Any:
        """``minimum(maximum(a, lo), hi)``; ``lo`` or ``hi`` may be ``None`` (not both)."""
        ...

    # --- reductions, scans, gathers (cpu_reduce.py / cuda_reduce.py) -----------------------
    def reduce(self, op: str, a: Any, axes: Shape, ddof: int) -> Any:
        """Reduce the non-empty ``a`` over ``axes`` with ``op``.

        ``op`` is one of sum prod mean var std max min argmax argmin all any;
        ``axes`` are sorted and distinct (exactly one for argmax/argmin).
        Returns a new impl without the reduced axes, in the dtype of
        :func:`pygpukit.reductions.result_dtype`; ``keepdims``, ``out=``, empty inputs
        and argument checks are handled in Python before the call.
        """
        ...

    def softmax(self, a: Any, axis: int, log: bool) -> Any:
        """Softmax (log-softmax when ``log``) of the non-empty floating ``a`` along ``axis``."""
        ...

    def cumsum(self, a: Any, axis: int, out_dtype: str) -> Any:
        """Inclusive prefix sum of ``a`` along ``axis`` into a new ``out_dtype`` impl."""
        ...

    def take(self, a: Any, indices: Any, axis: int, mode: str) -> Any:
        """``a`` gathered along ``axis`` at the 1-D int64 impl ``indices``.

        ``mode``: ``"raise"`` (range already checked; negatives from the end),
        ``"wrap"``, ``"clip"``.
        """
        ...

    def tri(self, a: Any, k: int, upper: bool) -> Any:
        """``triu`` (``upper``) or ``tril`` of the last two axes of ``a`` (ndim >= 2)."""
        ...

    # --- interop -----------------------------------------------------------------------
    def dlpack(self, impl: Any, stream: int | None) -> Any:
        """A DLPack capsule over the impl (zero-copy); ``stream`` per the DLPack protocol."""
        ...

    def dlpack_device(self, impl: Any) -> tuple[int, int]:
        """``(device_type, device_id)``: ``(2, i)`` for CUDA, ``(1, 0)`` for CPU."""
        ...

    def from_dlpack(self, obj: Any) -> Any:
        """An impl sharing memory with a DLPack producer (``__dlpack__`` object)."""
        ...

    def cuda_array_interface(self, impl: Any) -> dict[str, Any]:
        """``__cuda_array_interface__`` v3 (CUDA only; CPU raises ``AttributeError``)."""
        ...

    # --- JIT (NVRTC itself is located and loaded once by ``pygpukit.jit``) -----------------
    def compile(
        self, source: str, name: str, options: Sequence[str], name_expressions: Sequence[str]
    ) -> tuple[bytes, str, dict[str, str]]:
        """NVRTC compile to ``(cubin, log, lowered names)``; ``CompileError`` on failure."""
        ...

    def load_module(self, cubin: bytes, device: int) -> ModuleImpl:
        """Load a cubin on ``device``."""
        ...

    def tensor_map(self, impl: Any, box: Sequence[int], swizzle: int) -> Any:
        """A TMA descriptor of ``impl`` (``gp.TensorMap``); CUDA only."""
        ...

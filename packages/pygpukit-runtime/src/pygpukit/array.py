"""``GPUArray``: an n-dimensional array on the selected backend.

A ``GPUArray`` holds two slots: ``_impl`` (a ``_native.Array`` on CUDA, a
``numpy.ndarray`` on the CPU backend) and ``_backend`` (the backend module).
Metadata reads come straight from the impl; views are computed by
``_indexing`` and made with one ``backend.view`` call; nothing here branches on
which backend runs. Arrays made on internal paths skip validation
(:func:`_wrap`), because per-op host time matters.

Sync points (explicit, per docs/internals.md): ``to_numpy``, ``__array__``,
``item``/``float``/``int``/``bool``, ``repr``.
"""

from __future__ import annotations

import operator
from concurrent.futures import Future
from typing import Any, Literal, overload

import numpy as np

from . import _indexing
from .dtypes import NAMES, normalize
from .errors import ReadOnlyArrayError

__all__ = [
    "ArrayFlags",
    "GPUArray",
    "broadcast_to",
    "expand_dims",
    "reshape",
    "squeeze",
    "transpose",
]

#: repr fetches the values of arrays up to this size; larger ones show metadata only.
REPR_MAX_BYTES = 64 * 1024 * 1024

_object_new = object.__new__


def _wrap(impl: Any, backend: Any, readonly: bool = False) -> GPUArray:
    """Make a ``GPUArray`` around an impl without validation (internal fast path)."""
    out = _object_new(GPUArray)
    out._impl = impl
    out._backend = backend
    out._readonly = readonly
    return out


def _is_readonly(a: GPUArray) -> bool:
    """Whether ``a`` refuses writes (an array made without the flag set counts as writeable)."""
    try:
        return a._readonly
    except AttributeError:
        return False


def check_writeable(a: GPUArray, what: str = "out") -> None:
    """Raise :class:`~pygpukit.errors.ReadOnlyArrayError` when ``a`` is read-only.

    Every runtime and ops-package path that writes into a caller's array calls this before
    any work is enqueued; ``what`` names the argument (``"out"``, ``"x[...] ="``, ...).
    """
    if _is_readonly(a):
        raise ReadOnlyArrayError(
            f"{what}: cannot write into a read-only array (shape {tuple(a._impl.shape)},"
            f" {a.dtype.name}): it was made read-only with setflags(write=False), is a view"
            " of such an array, or is a broadcast_to view. Write into a copy (a.copy())"
        )


def _operand(x: Any, backend: Any, impl: Any) -> Any:
    """Convert a non-GPUArray operand of an operator.

    Scalars pass through, NumPy arrays and lists are uploaded (a blocking copy),
    anything else is ``NotImplemented``.
    """
    if isinstance(x, (bool, int, float, np.generic)):
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        host = np.asarray(x)
        if host.ndim == 0:
            return host[()]  # a NumPy scalar: a strong operand, as NumPy treats 0-d arrays
        if host.dtype.name not in NAMES.values():
            normalize(host.dtype)  # TypeError naming the supported dtypes
        device = backend.device_of(impl)
        return backend.from_numpy(np.ascontiguousarray(host), device, None, True)
    return NotImplemented


def _operators(name: str) -> tuple[Any, Any, Any]:
    """``__op__``, ``__rop__`` and ``__iop__`` for binary op ``name`` (one backend call each)."""

    def op(self: GPUArray, other: Any) -> Any:
        backend = self._backend
        o = other._impl if other.__class__ is GPUArray else _operand(other, backend, self._impl)
        if o is NotImplemented:
            return NotImplemented
        out = _object_new(GPUArray)  # _wrap inlined: this is the hottest path of the runtime
        out._impl = backend.binary(name, self._impl, o)
        out._backend = backend
        out._readonly = False
        return out

    def rop(self: GPUArray, other: Any) -> Any:
        backend = self._backend
        o = other._impl if other.__class__ is GPUArray else _operand(other, backend, self._impl)
        if o is NotImplemented:
            return NotImplemented
        return _wrap(backend.binary(name, o, self._impl), backend)

    def iop(self: GPUArray, other: Any) -> Any:
        if _is_readonly(self):
            check_writeable(self, "in-place operator")
        backend = self._backend
        o = other._impl if other.__class__ is GPUArray else _operand(other, backend, self._impl)
        if o is NotImplemented:
            return NotImplemented
        backend.binary(name, self._impl, o, self._impl)
        return self

    return op, rop, iop


class GPUArray:
    """An n-dimensional array in device memory with NumPy's indexing and view semantics.

    Create arrays with ``gp.empty``, ``gp.zeros``, ``gp.from_numpy``, ``gp.asarray``
    and friends; the constructor is not public.
    """

    __slots__ = ("__weakref__", "_backend", "_impl", "_readonly")

    _impl: Any
    _backend: Any
    _readonly: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "GPUArray is not constructed directly; use gp.empty / gp.zeros / gp.from_numpy / "
            "gp.asarray"
        )

    # --- metadata --------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Size of each dimension."""
        return self._impl.shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Step in bytes along each dimension (NumPy's convention)."""
        return self._impl.strides

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._impl.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._impl.size

    @property
    def nbytes(self) -> int:
        """Bytes the elements span if packed (``size * itemsize``)."""
        return int(self._impl.nbytes)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self._impl.itemsize)

    @property
    def dtype(self) -> np.dtype[Any]:
        """Element type as a NumPy dtype (``gp.float32`` etc.)."""
        return self._backend.dtype(self._impl)

    @property
    def device(self) -> str:
        """Where the data lives: ``"cuda:0"`` on the CUDA backend, ``"cpu"`` on the CPU one."""
        if self._backend.name == "cpu":
            return "cpu"
        return f"cuda:{self._backend.device_of(self._impl)}"

    @property
    def data_ptr(self) -> int:
        """Address of the first element (device address on CUDA)."""
        return int(self._backend.data_ptr(self._impl))

    @property
    def T(self) -> GPUArray:
        """The array with its axes reversed (a view)."""
        return self.transpose()

    @property
    def flags(self) -> ArrayFlags:
        """NumPy-style flags: ``writeable`` (settable to False) and ``c_contiguous``."""
        return ArrayFlags(self)

    def setflags(self, write: bool | None = None) -> None:
        """Make the array read-only with ``write=False`` (NumPy's spelling).

        A read-only array refuses ``x[...] = v``, ``fill``, in-place operators and
        being the ``out=`` of any runtime or ``pygpukit.ops`` op, with a
        :class:`~pygpukit.errors.ReadOnlyArrayError`; views taken from it afterwards are
        read-only too. The flag is one-way: ``write=True`` on a read-only array raises
        ``ValueError`` (take ``a.copy()`` for a writeable array). Views taken before the
        call, and kernels launched with ``gp.jit`` (which cannot tell the pointers they
        read from those they write), are not covered.
        """
        if write is None:
            return
        if not isinstance(write, (bool, np.bool_)):
            raise TypeError(f"setflags: write must be a bool, got {type(write).__name__}")
        if not write:
            self._readonly = True
        elif _is_readonly(self):
            raise ValueError(
                "setflags: a read-only GPUArray cannot be made writeable again; "
                "take a writeable copy with a.copy()"
            )

    def is_contiguous(self) -> bool:
        """Return whether the elements are C-contiguous."""
        return bool(self._backend.is_c_contiguous(self._impl))

    def __len__(self) -> int:
        shape = self._impl.shape
        if not shape:
            raise TypeError("len() of a 0-d GPUArray")
        return int(shape[0])

    # --- views -----------------------------------------------------------------------
    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> GPUArray:
        backend = self._backend
        return _wrap(backend.view(self._impl, shape, strides, offset), backend, _is_readonly(self))

    def __getitem__(self, key: Any) -> GPUArray:
        """Index with integers, slices (any step), ``...`` and ``None``; always a view.

        Indexing every axis with an integer gives a 0-d array (no sync); use
        ``.item()`` for a Python scalar.
        """
        impl = self._impl
        shape, strides, offset, _ = _indexing.basic_index(
            tuple(impl.shape), tuple(impl.strides), self._backend.offset(impl), key
        )
        return self._view(shape, strides, offset)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Assign a scalar, a GPUArray or a NumPy array (broadcast) to a basic-index view."""
        target = self[key]
        target._assign(value)

    def _assign(self, value: Any) -> None:
        check_writeable(self, "x[...] = value")
        backend = self._backend
        if isinstance(value, GPUArray):
            src = value
        elif isinstance(value, (np.ndarray, list, tuple)):
            from .creation import from_numpy

            host = np.asarray(value)
            if host.ndim == 0:
                self.fill(host.item())
                return
            src = from_numpy(host)
        else:
            self.fill(value)
            return
        shape = tuple(self._impl.shape)
        if tuple(src._impl.shape) != shape:
            src = src.broadcast_to(shape)
        backend.copy_into(self._impl, src._impl)

    def fill(self, value: Any) -> None:
        """Set every element to ``value`` (converted to the array's dtype as NumPy would)."""
        check_writeable(self, "fill")
        dtype = self.dtype
        try:
            scalar = np.array(value, dtype=dtype)
        except (TypeError, ValueError) as exc:
            shown = repr(value) if np.ndim(value) == 0 else f"a sequence of shape {np.shape(value)}"
            raise TypeError(f"cannot fill a {dtype.name} array with {shown[:60]}: {exc}") from None
        except OverflowError:
            raise ValueError(f"fill value {value!r} is out of range for {dtype.name}") from None
        if scalar.ndim != 0:
            raise ValueError(f"fill value must be a scalar, got shape {scalar.shape}")
        self._backend.fill(self._impl, scalar.item())

    def reshape(self, *shape: Any) -> GPUArray:
        """Return the same elements in ``shape`` (one ``-1`` allowed).

        A view when the strides allow it, else a contiguous copy (as NumPy does).
        """
        target: Any = shape[0] if len(shape) == 1 else shape
        impl = self._impl
        new_shape, new_strides = _indexing.reshape(
            tuple(impl.shape), tuple(impl.strides), impl.itemsize, target
        )
        if new_strides is None:
            src = self.copy()
            new_strides = _indexing.c_strides(new_shape, impl.itemsize)
            return src._view(new_shape, new_strides, src._backend.offset(src._impl))
        return self._view(new_shape, new_strides, self._backend.offset(impl))

    def ravel(self) -> GPUArray:
        """Return a 1-D view when possible, else a 1-D copy."""
        return self.reshape(-1)

    def flatten(self) -> GPUArray:
        """Return a 1-D copy."""
        return self.copy().reshape(-1)

    def transpose(self, *axes: Any) -> GPUArray:
        """Permute the axes (reverse them when none are given); a view."""
        perm: Any = None
        if axes:
            perm = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        impl = self._impl
        shape, strides = _indexing.transpose(tuple(impl.shape), tuple(impl.strides), perm)
        return self._view(shape, strides, self._backend.offset(impl))

    def permute(self, *axes: Any) -> GPUArray:
        """Permute the axes to ``axes`` (PyTorch's name for ``transpose(axes)``)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes and self.ndim:
            raise TypeError("permute() needs the new order of the axes")
        return self.transpose(*axes) if axes else self

    def swapaxes(self, axis1: int, axis2: int) -> GPUArray:
        """Exchange two axes; a view."""
        perm = list(range(self.ndim))
        a = _indexing.normalize_axis(axis1, self.ndim)
        b = _indexing.normalize_axis(axis2, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(perm)

    def squeeze(self, axis: Any = None) -> GPUArray:
        """Remove size-1 axes (all, or those in ``axis``); a view."""
        impl = self._impl
        shape, strides = _indexing.squeeze(tuple(impl.shape), tuple(impl.strides), axis)
        return self._view(shape, strides, self._backend.offset(impl))

    def expand_dims(self, axis: Any) -> GPUArray:
        """Insert size-1 axes at ``axis`` (an int or a tuple); a view."""
        impl = self._impl
        shape, strides = _indexing.expand_dims(tuple(impl.shape), tuple(impl.strides), axis)
        return self._view(shape, strides, self._backend.offset(impl))

    def broadcast_to(self, shape: Any) -> GPUArray:
        """Broadcast to ``shape`` with zero strides on repeated axes; a read-only view.

        Read-only as NumPy marks it: repeated elements share memory, so a write
        would land several times.
        """
        impl = self._impl
        new_shape, strides = _indexing.broadcast_to(tuple(impl.shape), tuple(impl.strides), shape)
        out = self._view(new_shape, strides, self._backend.offset(impl))
        out._readonly = True
        return out

    def view(self, dtype: Any) -> GPUArray:
        """Reinterpret the bytes as ``dtype`` of the same itemsize; a view."""
        dt = normalize(dtype)
        if dt.itemsize != self.itemsize:
            raise ValueError(
                f"view() changes the dtype only between types of one itemsize "
                f"({self.dtype.name} is {self.itemsize} bytes, {dt.name} is {dt.itemsize})"
            )
        return _wrap(
            self._backend.view_dtype(self._impl, NAMES[dt]), self._backend, _is_readonly(self)
        )

    # --- reductions and gathers (pygpukit.reductions / pygpukit.shape_ops) -------------
    def sum(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
    ) -> GPUArray:
        """Sum over ``axis``; see :func:`pygpukit.sum`."""
        return _reductions().sum(self, axis, dtype, out, keepdims)

    def prod(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
    ) -> GPUArray:
        """Product over ``axis``; see :func:`pygpukit.prod`."""
        return _reductions().prod(self, axis, dtype, out, keepdims)

    def mean(
        self, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
    ) -> GPUArray:
        """Mean over ``axis``; see :func:`pygpukit.mean`."""
        return _reductions().mean(self, axis, dtype, out, keepdims)

    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
    ) -> GPUArray:
        """Variance over ``axis``; see :func:`pygpukit.var`."""
        return _reductions().var(self, axis, dtype, out, ddof, keepdims)

    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
    ) -> GPUArray:
        """Standard deviation over ``axis``; see :func:`pygpukit.std`."""
        return _reductions().std(self, axis, dtype, out, ddof, keepdims)

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Maximum over ``axis``; see :func:`pygpukit.max`."""
        return _reductions().max(self, axis, out, keepdims)

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Minimum over ``axis``; see :func:`pygpukit.min`."""
        return _reductions().min(self, axis, out, keepdims)

    def argmax(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Index of the maximum; see :func:`pygpukit.argmax`."""
        return _reductions().argmax(self, axis, out, keepdims)

    def argmin(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Index of the minimum; see :func:`pygpukit.argmin`."""
        return _reductions().argmin(self, axis, out, keepdims)

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Whether every element is nonzero; see :func:`pygpukit.all`."""
        return _reductions().all(self, axis, out, keepdims)

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> GPUArray:
        """Whether some element is nonzero; see :func:`pygpukit.any`."""
        return _reductions().any(self, axis, out, keepdims)

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> GPUArray:
        """Inclusive prefix sum; see :func:`pygpukit.cumsum`."""
        return _reductions().cumsum(self, axis, dtype, out)

    def take(
        self, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise"
    ) -> GPUArray:
        """Gather along ``axis``; see :func:`pygpukit.take`."""
        from .shape_ops import take

        return take(self, indices, axis, out, mode)

    def repeat(self, repeats: Any, axis: Any = None) -> GPUArray:
        """Repeat elements along ``axis``; see :func:`pygpukit.repeat`."""
        from .shape_ops import repeat

        return repeat(self, repeats, axis)

    # --- elementwise operators (pygpukit.elementwise): one backend call each -----------
    __array_ufunc__ = None  # NumPy operands defer to the reflected operators below
    __add__, __radd__, __iadd__ = _operators("add")
    __sub__, __rsub__, __isub__ = _operators("subtract")
    __mul__, __rmul__, __imul__ = _operators("multiply")
    __truediv__, __rtruediv__, __itruediv__ = _operators("divide")
    __floordiv__, __rfloordiv__, __ifloordiv__ = _operators("floor_divide")
    __mod__, __rmod__, __imod__ = _operators("mod")
    __pow__, __rpow__, __ipow__ = _operators("power")
    __and__, __rand__, __iand__ = _operators("bitwise_and")
    __or__, __ror__, __ior__ = _operators("bitwise_or")
    __xor__, __rxor__, __ixor__ = _operators("bitwise_xor")
    __lshift__, __rlshift__, __ilshift__ = _operators("left_shift")
    __rshift__, __rrshift__, __irshift__ = _operators("right_shift")
    __eq__ = _operators("equal")[0]
    __ne__ = _operators("not_equal")[0]
    __lt__ = _operators("less")[0]
    __le__ = _operators("less_equal")[0]
    __gt__ = _operators("greater")[0]
    __ge__ = _operators("greater_equal")[0]
    __hash__ = None  # type: ignore[assignment]  # == is elementwise, as in NumPy

    def __neg__(self) -> GPUArray:
        return _wrap(self._backend.unary("negative", self._impl, None), self._backend)

    def __pos__(self) -> GPUArray:
        return _wrap(self._backend.unary("positive", self._impl, None), self._backend)

    def __abs__(self) -> GPUArray:
        return _wrap(self._backend.unary("abs", self._impl, None), self._backend)

    def __invert__(self) -> GPUArray:
        return _wrap(self._backend.unary("invert", self._impl, None), self._backend)

    # --- matrix product (pygpukit.linalg) ----------------------------------------------
    def __matmul__(self, other: Any) -> GPUArray:
        from .linalg import matmul

        if not isinstance(other, GPUArray):
            return NotImplemented
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> GPUArray:
        from .linalg import matmul

        if not isinstance(other, GPUArray):
            return NotImplemented
        return matmul(other, self)

    def __imatmul__(self, other: Any) -> GPUArray:
        from .linalg import matmul

        if not isinstance(other, GPUArray):
            return NotImplemented
        return matmul(self, other, out=self)

    # --- copies and conversions ---------------------------------------------------------
    def copy(self) -> GPUArray:
        """Return a C-contiguous copy."""
        return _wrap(self._backend.copy(self._impl), self._backend)

    def contiguous(self) -> GPUArray:
        """Return this array when C-contiguous, else a C-contiguous copy."""
        if self._backend.is_c_contiguous(self._impl):
            return self
        return self.copy()

    def astype(self, dtype: Any, copy: bool = True) -> GPUArray:
        """Convert to ``dtype`` (NumPy's unsafe casting); ``copy=False`` returns self if equal."""
        dt = normalize(dtype)
        if copy is not True and copy is not False:
            from .validation import boolean

            copy = boolean(copy, "copy", "astype")
        if not copy and dt == self.dtype:
            return self
        return _wrap(self._backend.astype(self._impl, NAMES[dt]), self._backend)

    @overload
    def to_numpy(
        self,
        stream: Any = None,
        blocking: Literal[True] = True,
        *,
        out: np.ndarray | None = None,
    ) -> np.ndarray: ...

    @overload
    def to_numpy(
        self, stream: Any = None, *, blocking: Literal[False], out: np.ndarray | None = None
    ) -> Future[np.ndarray]: ...

    def to_numpy(
        self, stream: Any = None, blocking: bool = True, *, out: np.ndarray | None = None
    ) -> Any:
        """Copy to a new NumPy array (waits for the data; a sync point).

        ``out``: copy into this NumPy array instead (same shape and dtype,
        C-contiguous, writeable) and return it. A page-locked one, such as
        ``gp.memory.pinned_empty(a.shape, a.dtype)``, is written by the copy
        engine directly at full bus speed; pageable memory of 1 MiB and more goes
        through the transfer engine's pinned pipeline.

        ``blocking=False`` returns a :class:`concurrent.futures.Future` at once
        instead: the copy starts after the work enqueued on ``stream`` (default:
        the current stream) so far, runs through the transfer engine's pinned
        staging on a copy stream, and ``.result()`` returns the array when it
        has landed. The future keeps this array's data alive until then.
        """
        from .validation import boolean
        from .validation import stream as stream_arg

        stream_impl = stream_arg(stream, "stream", "to_numpy")
        blocking = boolean(blocking, "blocking", "to_numpy")
        if out is not None:
            self._check_out(out)
        if blocking:
            from .stream import count_host_wait

            count_host_wait()
            return self._backend.to_numpy(self._impl, stream_impl, out)
        return self._backend.to_numpy_async(self._impl, stream_impl, out)

    def _check_out(self, out: Any) -> None:
        """``out`` of ``to_numpy``: a writeable C-contiguous ndarray of this shape and dtype."""
        if not isinstance(out, np.ndarray):
            raise TypeError(f"to_numpy: out must be a numpy.ndarray, got {type(out).__name__}")
        if out.dtype != self.dtype:
            raise TypeError(f"to_numpy: out has dtype {out.dtype}, the array {self.dtype}")
        if out.shape != self.shape:
            raise ValueError(f"to_numpy: out has shape {out.shape}, the array {self.shape}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("to_numpy: out must be C-contiguous and writeable")

    @property
    def evictable(self) -> bool:
        """Whether the pool may spill this array's memory to host under pressure."""
        return bool(self._backend.evictable(self._impl))

    def get(self) -> np.ndarray:
        """Copy to a new NumPy array (CuPy's name for ``to_numpy``)."""
        return self.to_numpy()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a GPUArray cannot be viewed as a NumPy array without a copy")
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def to_device(self, device: int) -> GPUArray:
        """Copy to another device (returns self when already there)."""
        from .device import _check_ordinal

        backend = self._backend
        target = _check_ordinal(device)
        if backend.device_of(self._impl) == target:
            return self
        out = backend.empty(tuple(self._impl.shape), NAMES[self.dtype], target, None)
        backend.copy_into(out, self._impl)
        return _wrap(out, backend)

    def item(self) -> Any:
        """Return the only element as a Python scalar (a sync point)."""
        if self.size != 1:
            raise ValueError(
                f"item() needs an array of exactly one element, this one has {self.size}"
            )
        return self.to_numpy().reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iub" or self.size != 1:
            raise TypeError("only integer GPUArrays of one element can be used as an index")
        return operator.index(self.item())

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"the truth value of a GPUArray with {self.size} elements is ambiguous; "
                "use gp.any() or gp.all()"
            )
        return bool(self.item())

    def __iter__(self) -> Any:
        if not self._impl.shape:
            raise TypeError("iteration over a 0-d GPUArray")
        return (self[i] for i in range(self._impl.shape[0]))

    # --- interop ---------------------------------------------------------------------
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export as a DLPack capsule (zero-copy), making the data ready on ``stream``."""
        if copy:
            raise BufferError("GPUArray.__dlpack__ exports without copying; copy=True is refused")
        if _is_readonly(self):
            # As NumPy: the DLPack capsule has no read-only mark, so the consumer could write.
            raise BufferError(
                "cannot export a read-only GPUArray through DLPack (it cannot mark the data"
                " read-only); export a copy (a.copy())"
            )
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"cannot export to DLPack device {dl_device}; the array is on "
                f"{self.__dlpack_device__()}"
            )
        return self._backend.dlpack(self._impl, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        """Return ``(device_type, device_id)`` per DLPack (2 = CUDA, 1 = CPU)."""
        return tuple(self._backend.dlpack_device(self._impl))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Numba/CuPy's CUDA array interface, version 3 (CUDA backend only).

        ``data[1]`` (the read-only flag) is true for read-only arrays.
        """
        interface = self._backend.cuda_array_interface(self._impl)
        if _is_readonly(self):
            interface = {**interface, "data": (interface["data"][0], True)}
        return interface

    # --- printing --------------------------------------------------------------------
    def __repr__(self) -> str:
        dtype = self.dtype
        device = self.device
        suffix = f"dtype={dtype.name}, device={device!r})"
        if self.nbytes > REPR_MAX_BYTES:
            return (
                f"GPUArray(shape={self.shape}, {suffix[:-1]}, values not fetched: "
                f"{self.nbytes / 2**20:.0f} MiB; use .to_numpy())"
            )
        prefix = "GPUArray("
        body = np.array2string(self.to_numpy(), separator=", ", prefix=prefix)
        return f"{prefix}{body}, {suffix}"

    def __str__(self) -> str:
        if self.nbytes > REPR_MAX_BYTES:
            return repr(self)
        return str(self.to_numpy())

    # --- Python protocols NumPy and CuPy users reach for ------------------------------
    def tolist(self) -> Any:
        """The values as nested Python lists of Python scalars (a scalar for a 0-d array).

        Copies to the host first (a sync point), as ``numpy.ndarray.tolist`` does.
        """
        return self.to_numpy().tolist()

    def __round__(self, ndigits: int | None = None) -> GPUArray:
        """``round(a)`` / ``round(a, n)``: elementwise, half to even, in ``a``'s dtype.

        As :func:`gp.round <pygpukit.round>` (and ``torch.Tensor``), not Python's
        rounding of one number: the result is an array of the same shape and dtype.
        Integer arrays stay integers (a negative ``ndigits`` rounds to tens, hundreds...).
        """
        from .elementwise import round as round_

        if ndigits is None:
            ndigits = 0
        if isinstance(ndigits, bool) or not isinstance(ndigits, (int, np.integer)):
            raise TypeError(f"round(): ndigits must be an int, got {type(ndigits).__name__}")
        if self.dtype.kind in "iub":
            if ndigits >= 0:
                return self.copy()
            rounded = round_(self.astype(np.float64), int(ndigits))
            return rounded.astype(self.dtype)
        return round_(self, int(ndigits))

    def __contains__(self, value: Any) -> bool:
        """``value in a``: whether any element equals ``value`` (``(a == value).any()``).

        As NumPy: ``value`` broadcasts against the array (a shape that does not is a
        ``ValueError``), NaN is in nothing, and the answer needs the device (a sync point).
        """
        equal = self == value
        if not isinstance(equal, GPUArray):  # no elementwise comparison: Python's answer
            return bool(equal)
        return bool(_reductions().any(equal))

    def __copy__(self) -> GPUArray:
        """``copy.copy(a)``: a new C-contiguous array with its own memory, as NumPy's."""
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> GPUArray:
        """``copy.deepcopy(a)``: a device-side copy (no host round trip), as CuPy's."""
        duplicate = self.copy()
        memo[id(self)] = duplicate
        return duplicate

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle through the host, as CuPy does: the values, shape and dtype.

        Unpickling uploads them to the current device of the process that loads
        them (any backend; a pickle made on the GPU loads on the CPU backend).
        Views pickle only the elements they see.
        """
        from .creation import from_numpy

        return from_numpy, (self.to_numpy(),)  # a fresh C-contiguous host copy


class ArrayFlags:
    """``GPUArray.flags``: the array's ``writeable`` and ``c_contiguous`` flags.

    ``a.flags.writeable = False`` is ``a.setflags(write=False)``.
    """

    __slots__ = ("_array",)

    def __init__(self, array: GPUArray) -> None:
        self._array = array

    @property
    def writeable(self) -> bool:
        """False for a read-only array (see :meth:`GPUArray.setflags`)."""
        return not _is_readonly(self._array)

    @writeable.setter
    def writeable(self, value: bool) -> None:
        self._array.setflags(write=value)

    @property
    def c_contiguous(self) -> bool:
        """Whether the elements are C-contiguous."""
        return self._array.is_contiguous()

    def __getitem__(self, key: str) -> bool:
        names = {"WRITEABLE": "writeable", "W": "writeable", "C_CONTIGUOUS": "c_contiguous"}
        name = names.get(key.upper() if isinstance(key, str) else key)
        if name is None:
            raise KeyError(f"unknown flag {key!r}; GPUArray flags are WRITEABLE and C_CONTIGUOUS")
        return bool(getattr(self, name))

    def __repr__(self) -> str:
        return f"  C_CONTIGUOUS : {self.c_contiguous}\n  WRITEABLE : {self.writeable}"


def _reductions() -> Any:
    """The reductions module (imported on first use: it imports this one)."""
    from . import reductions

    return reductions


def _as_gpuarray(a: Any, name: str) -> GPUArray:
    if not isinstance(a, GPUArray):
        raise TypeError(f"{name}() expects a GPUArray, got {type(a).__name__}")
    return a


def reshape(a: GPUArray, shape: Any) -> GPUArray:
    """Return ``a`` in ``shape`` (a view when possible, else a copy)."""
    return _as_gpuarray(a, "reshape").reshape(shape)


def transpose(a: GPUArray, axes: Any = None) -> GPUArray:
    """Return ``a`` with its axes permuted (reversed by default); a view."""
    return _as_gpuarray(a, "transpose").transpose(*(() if axes is None else (axes,)))


def squeeze(a: GPUArray, axis: Any = None) -> GPUArray:
    """Return ``a`` without size-1 axes; a view."""
    return _as_gpuarray(a, "squeeze").squeeze(axis)


def expand_dims(a: GPUArray, axis: Any) -> GPUArray:
    """Return ``a`` with size-1 axes inserted at ``axis``; a view."""
    return _as_gpuarray(a, "expand_dims").expand_dims(axis)


def broadcast_to(a: GPUArray, shape: Any) -> GPUArray:
    """Return ``a`` broadcast to ``shape`` (zero strides); a view."""
    return _as_gpuarray(a, "broadcast_to").broadcast_to(shape)

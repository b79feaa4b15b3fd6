"""Launchable kernels: :class:`Kernel`, :class:`Module`, and :class:`TensorMap` arguments."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..backend.select import backend as _backend
from .args import bind, check_arguments, dim3
from .compile import require_gpu
from .signature import Param

__all__ = ["DEFAULT_BLOCK", "SIZE_PARAM_NAMES", "Kernel", "Module", "TensorMap"]

DEFAULT_BLOCK = 256
SIZE_PARAM_NAMES = ("n", "size", "numel")


class TensorMap:
    """A TMA descriptor (``CUtensorMap``) of a device array, for Hopper and later kernels.

    Pass it to a kernel parameter declared ``const __grid_constant__ CUtensorMap name``;
    the kernel moves ``box``-shaped tiles between the array and shared memory with
    ``cp.async.bulk.tensor`` (one instruction per tile, completion on an mbarrier).

    ``box`` is the tile in elements per dimension, outermost first like ``array.shape``
    (at most 256 each); reads of a box that hangs over the array's edge are zero-filled.
    ``swizzle`` (0, 32, 64 or 128 bytes) lays rows out in shared memory in the pattern
    wgmma's swizzled operand modes read; the box's innermost extent must fit in it.
    The array's innermost dimension must be contiguous and its other strides multiples
    of 16 bytes; views (``reshape``, slices) describe other layouts of the same memory.
    The map holds the array's address, so the array cannot be evictable. Raises
    ``ValueError`` for a layout TMA cannot describe (before any driver call),
    ``DeviceNotSupportedError`` on the CPU backend.

    The map keeps the array alive, and a launch with it orders the array's memory
    after the kernel like a pointer argument does. Encoding is a host-side driver call:
    build maps once per array where a loop launches many times.

    NVRTC sources have no ``cuda.h``: declare the type yourself as
    ``struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };``. TMA needs a
    128-byte aligned shared-memory destination; for a swizzled box to land in the
    layout wgmma's swizzled modes read, align it to the pattern's repeat (1024 bytes
    for the 128-byte swizzle).
    """

    __slots__ = ("_impl", "array", "box", "swizzle")

    def __init__(self, array: Any, box: Sequence[int], swizzle: int = 0) -> None:
        from ..array import GPUArray

        if not isinstance(array, GPUArray):
            raise TypeError(f"TensorMap needs a GPUArray, got {type(array).__name__}")
        b = _backend()
        require_gpu(b)
        self.box = tuple(int(x) for x in box)
        self.swizzle = int(swizzle)
        self._impl = b.tensor_map(array._impl, self.box, self.swizzle)
        self.array = array

    def to_bytes(self) -> bytes:
        """The 128 encoded bytes, as the kernel receives them."""
        return bytes(self._impl.to_bytes())

    def __repr__(self) -> str:
        return (
            f"TensorMap(shape={tuple(self.array.shape)}, dtype={self.array.dtype}, "
            f"box={self.box}, swizzle={self.swizzle})"
        )


class Kernel:
    """A compiled kernel; call it with the kernel's arguments (positional or by name).

    Keyword-only launch options: ``grid``, ``block`` (an int or up to 3 ints),
    ``shared_mem`` (dynamic shared memory bytes), ``stream`` (a ``gp.Stream``).
    """

    __slots__ = ("_default_block", "_function", "_index", "_sizes", "name", "params")

    def __init__(self, function: Any, name: str, params: Sequence[Param]) -> None:
        self._function = function
        self.name = name
        self.params = tuple(params)
        self._index = {p.name: i for i, p in enumerate(self.params)}
        self._sizes = [i for i, p in enumerate(self.params) if p.name in SIZE_PARAM_NAMES]
        function.set_signature([p.code for p in self.params])
        max_threads = int(self.attributes().get("max_threads_per_block", DEFAULT_BLOCK))
        self._default_block = max(1, min(DEFAULT_BLOCK, max_threads))

    def attributes(self) -> dict[str, int]:
        """Function attributes: ``num_regs``, ``max_threads_per_block``, ``shared_size_bytes``..."""
        return dict(self._function.attributes())

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory.

        Launches above 48 KiB of dynamic shared memory fail until this is set (the
        driver's opt-in, ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``); the
        limit per block is the device's ``shared_memory_per_block_optin``.
        """
        if int(nbytes) < 0:
            raise ValueError(f"{self.name}: dynamic shared memory must be >= 0, got {nbytes}")
        self._function.set_max_dynamic_shared_memory(int(nbytes))

    @property
    def num_regs(self) -> int:
        """Registers per thread."""
        return int(self.attributes()["num_regs"])

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can be launched with."""
        return int(self.attributes()["max_threads_per_block"])

    @property
    def shared_size_bytes(self) -> int:
        """Static shared memory per block."""
        return int(self.attributes()["shared_size_bytes"])

    def signature(self) -> str:
        """Return the parsed signature, e.g. ``scale(float* x, float factor, int n)``."""
        return f"{self.name}(" + ", ".join(f"{p.ctype} {p.name}" for p in self.params) + ")"

    def check_arguments(self, values: Sequence[Any]) -> None:
        """Raise ``TypeError`` naming the first argument that does not fit its parameter."""
        check_arguments(self.name, self.params, values)

    def launch_config(
        self, values: Sequence[Any], grid: Any, block: Any
    ) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
        """Return ``(grid, block)`` for a launch, or None when the default grid is empty."""
        block3 = (self._default_block, 1, 1) if block is None else dim3(block, "block")
        if grid is not None:
            return dim3(grid, "grid"), block3
        n = None
        for i in self._sizes:
            n = int(values[i])
            break
        if n is None:
            from ..array import GPUArray

            sizes = [v.size for v in values if isinstance(v, GPUArray)]
            if not sizes:
                raise TypeError(
                    f"{self.name}: cannot choose a default launch (no parameter named "
                    f"{'/'.join(SIZE_PARAM_NAMES)} and no array argument); pass grid= and block="
                )
            n = max(sizes)
        if n <= 0:
            return None
        return (math.ceil(n / block3[0]), 1, 1), block3

    def __call__(
        self,
        *args: Any,
        grid: Any = None,
        block: Any = None,
        shared_mem: int = 0,
        stream: Any = None,
        **kwargs: Any,
    ) -> None:
        """Launch on ``stream`` (the current stream by default); does not wait."""
        values = bind(self.signature, self.params, self._index, args, kwargs)
        config = self.launch_config(values, grid, block)
        if config is None:
            return
        stream_impl = _backend().current_stream() if stream is None else stream._impl
        try:
            self._function.launch(config[0], config[1], int(shared_mem), stream_impl, values)
        except TypeError:
            self.check_arguments(values)  # a clearer message naming the parameter
            raise

    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Any = None,
        dependent: bool = False,
    ) -> None:
        """Launch with an explicit grid and block and the arguments in declaration order.

        The lean form of calling the kernel, for library code launching the same kernel
        many times: no binding by name, no default grid. Arguments are still type-checked
        as they are packed; a mismatch raises ``TypeError`` naming the parameter, before
        anything is enqueued.

        ``dependent=True`` asks for a programmatic dependent launch (SM 9.0 and newer; a plain
        launch elsewhere): the kernel may start while the previous kernel on the stream still
        runs, so it must execute ``griddepcontrol.wait`` before it reads that kernel's results
        or writes memory that kernel reads. A kernel that also executes
        ``griddepcontrol.launch_dependents`` lets the next dependent launch start early in turn.
        Works inside CUDA graph capture.
        """
        stream_impl = _backend().current_stream() if stream is None else stream._impl
        try:
            self._function.launch(grid, block, shared_mem, stream_impl, args, dependent)
        except TypeError:
            check_arguments(self.name, self.params, args)  # a message naming the parameter
            raise

    def __repr__(self) -> str:
        return f"Kernel({self.signature()})"


class Module:
    """Several kernels compiled from one source; ``module["name"]`` or ``module.name``."""

    __slots__ = ("_kernels",)

    def __init__(self, kernels: dict[str, Kernel]) -> None:
        self._kernels = kernels

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(
                f"no kernel {name!r} in this module; it has {', '.join(self._kernels)}"
            ) from None

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._kernels[name]
        except KeyError:
            raise AttributeError(f"no kernel {name!r} in this module") from None

    def names(self) -> list[str]:
        """Return the kernel names (and name expressions) this module holds."""
        return list(self._kernels)

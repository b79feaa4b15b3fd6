"""``gp.memory``: the caching memory pool's statistics, limits and caches.

Every array's memory comes from a pool in ``pygpukit._rust``: one per GPU, and
a host pool (device ``-1``) that the CPU backend allocates from, so limits and
statistics behave the same without a GPU.

Limits cap the bytes a pool holds (cached or in use). They are bytes, a
fraction of the device's memory (a float in ``(0, 1]``), a size string such as
``"8GiB"``, or ``None`` for no limit. ``PYGPUKIT_MEMORY_LIMIT`` sets one for
every pool when ``pygpukit._rust`` loads (same forms: ``1073741824``, ``0.5``,
``8GiB``, ``512MiB``, ``2GB``); an unreadable value is ignored with a warning.

An allocation that does not fit raises
:class:`~pygpukit.errors.OutOfMemoryError` with the bytes requested, in use,
the limit and the partition; the pool stays usable and the next allocation
that fits succeeds.

Evictable arrays (``gp.empty(..., evictable=True)``,
``gp.from_numpy(..., evictable=True)``; ``arr.evictable`` tells) let the pool
make room past a limit or a full device: it copies the least recently used
idle ones to pinned host memory (``evictions``, ``spilled_bytes``) and copies
them back before the next operation that uses them (``restores``), possibly at
another address, so ``arr.data_ptr`` and DLPack exports of an evictable array
are valid only until the pool next needs room. The arrays one operation uses
must fit in device memory together, and evictable arrays cannot be captured
into a CUDA graph (``ValueError``). An operation that does not handle evictable
arrays yet raises ``RuntimeError`` rather than read memory the pool moved.
Other arrays are never moved.

Sizes (``MemoryPool(quota=...)``, ``pool.allocate(nbytes)``,
:func:`host_buffer`, and in :mod:`pygpukit.scheduler` ``Scheduler(total_memory=...)``,
``PartitionLimits().memory(...)``, ``submit(memory=...)``, ...) are bytes or the same
size strings ``set_limit`` takes (``"8GiB"``, ``"512MiB"``, ``"2GB"``); a negative or
unreadable size raises ``ValueError`` naming the argument.

Host views (``numpy.asarray(block)`` of a host pool block, :func:`host_buffer`,
:func:`pinned_empty`) keep their memory alive: a view holds its block, which
goes back to the pool with the last view, and ``block.free()`` raises
``BufferError`` while views of it exist (docs/memory.md).

Pinned host memory, for the transfer engine's staging (``from_numpy(...,
stream=)``, ``to_numpy(blocking=False)``), spills and :func:`pinned_empty`
arrays, comes from the Rust pinned pools too: ``pinned_reserved_bytes`` and
``transfer_staging_bytes`` in :func:`stats`.

Importing this module is cheap: ``pygpukit._rust`` loads on first use.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._rust_loader import rust_module

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "HOST_DEVICE",
    "MemoryPool",
    "empty_cache",
    "get_limit",
    "host_buffer",
    "parse_size",
    "pinned_empty",
    "set_limit",
    "snapshot",
    "stats",
]

HOST_DEVICE = -1
"""Device number of the host pool (the CPU backend's memory)."""


def _rust() -> ModuleType:
    # Loaded on first use, not at import: `import pygpukit` stays cheap.
    return rust_module()


def _pool_device(device: int | None) -> int:
    """The pool a call without ``device`` reads: the current device's.

    The backend is chosen first, so a fresh GPU process reports its GPU pool
    (registered when the CUDA backend starts), not the host pool.
    """
    if device is not None:
        return device
    from .backend.select import backend

    b = backend()
    return HOST_DEVICE if b.name == "cpu" else int(b.get_device())


def stats(device: int | None = None) -> dict[str, int]:
    """Return the pool's counters as a flat dict.

    Keys: ``allocated_bytes`` (live blocks), ``requested_bytes``, ``reserved_bytes``
    (held from the device, live or cached), ``cached_bytes``, ``peak_allocated_bytes``,
    ``peak_reserved_bytes``, ``active_blocks``, ``alloc_count``, ``free_count``,
    ``segment_alloc_count``, ``segment_free_count``, ``evictions``, ``restores``,
    ``spilled_bytes``, ``oom_count``, ``pinned_reserved_bytes`` (spills and
    :func:`pinned_empty`), ``transfer_staging_bytes`` (the transfer engine's
    pinned staging and upload ring), ``upload_kernel_uploads`` (pageable uploads
    the upload kernel copied out of the ring; the others went through the copy
    engine), ``limit_bytes``
    (only when a limit is set) and ``partition.<id>.allocated_bytes`` /
    ``.peak_allocated_bytes`` / ``.limit_bytes`` per partition.

    ``device`` defaults to the current device, or the host pool on the CPU backend.
    """
    return dict(_rust().pool_stats(_pool_device(device)))


def snapshot(device: int | None = None) -> list[dict[str, Any]]:
    """Return every live block and cached free range of the pool, for debugging.

    Each entry has ``id`` (0 for free ranges), ``device``, ``address``, ``size``,
    ``requested``, ``stream``, ``state`` (``"allocated"``, ``"evicted"`` or
    ``"free"``), ``partition``, ``evictable``, ``graph_pool`` and ``age_s``.
    """
    return list(_rust().pool_snapshot(_pool_device(device)))


def parse_size(text: str) -> int | float:
    """A size string read as :func:`set_limit` and ``PYGPUKIT_MEMORY_LIMIT`` read it.

    Bytes (``"1048576"``) or a size with a unit (``"8GiB"``, ``"512 MiB"``, ``"2GB"``,
    ``"100k"``) give an ``int``; a fraction of a device's memory (``"0.5"``) a ``float`` in
    ``(0, 1]``. Anything else raises ``ValueError`` listing the accepted forms.
    """
    value: int | float = _rust().parse_limit(text)
    return value


def set_limit(limit: int | float | str | None, device: int | None = None) -> None:
    """Cap the bytes a pool may hold; cached memory above the cap is released.

    ``limit`` is bytes (``int``), a fraction of the device's memory (``float`` in
    ``(0, 1]``), a size string (``"8GiB"``, ``"512MiB"``, ``"2GB"``), or ``None``
    to remove the limit. With ``device=None`` the limit applies to every pool,
    including those of GPUs initialised later.
    """
    if isinstance(limit, str):
        limit = parse_size(limit)
    _rust().set_limit(limit, device)


def get_limit(device: int | None = None) -> int | None:
    """Return the pool's limit in bytes, or ``None`` when it has none."""
    limit: int | None = _rust().get_limit(device)
    return limit


def empty_cache(device: int | None = None) -> int:
    """Return cached, unused memory to the device (every pool with ``device=None``).

    Returns the bytes released. Blocks in use are not affected.
    """
    released: int = _rust().empty_cache(device)
    return released


def host_buffer(nbytes: int | str) -> np.ndarray:
    """Allocate a writable flat ``uint8`` NumPy array of ``nbytes`` from the host pool.

    The memory is accounted, limited and reported like device memory. The
    array's ``base`` holds the pool block, which returns to the pool when the
    last array viewing it is garbage-collected.
    """
    import numpy as np  # only the CPU path needs NumPy here

    return np.asarray(_rust().host_block(nbytes))


def pinned_empty(shape: Any, dtype: Any = None, device: int | None = None) -> np.ndarray:
    """Return an uninitialised NumPy array in page-locked (pinned) host memory.

    The memory comes from the device pool's pinned cache, the one spills use,
    so it is counted in ``stats()["pinned_reserved_bytes"]``; it goes back to
    that cache when the array (and every view of it) is garbage-collected.
    Copies between pinned memory and the GPU run at full bus bandwidth and
    need no staging: ``gp.from_numpy(pinned)`` and ``arr.to_numpy()`` into
    it are the fastest host transfers. Keep the array alive while an
    asynchronous copy (``from_numpy(..., stream=)``) may still read it.
    ``dtype`` defaults to float32; on the CPU backend the memory is plain
    host memory from the host pool.
    """
    import numpy as np

    from . import _indexing
    from .backend import select
    from .dtypes import float32, normalize

    backend = select.backend()
    if backend.name == "cuda":
        backend.connect_pool()  # the device pools exist only once the CUDA backend is registered

    dims = _indexing.normalize_shape(shape)
    dt = np.dtype(float32 if dtype is None else normalize(dtype))
    nbytes = dt.itemsize * int(np.prod(dims, dtype=np.int64))
    flat = np.asarray(_rust().pinned_block(nbytes, device))
    return flat[:nbytes].view(dt).reshape(dims)


class MemoryPool:
    """A pool with its own quota, sharing the device's cache.

    ``MemoryPool(quota=100 * 1024 * 1024, enable_eviction=True)`` creates a
    partition of the device pool: its blocks come from the common cache, but
    its bytes are counted and limited separately, and an allocation past
    ``quota`` raises :class:`~pygpukit.errors.OutOfMemoryError` naming the
    pool. With ``enable_eviction`` its blocks may be spilled to pinned host
    memory under pressure and are restored by ``block.touch()`` (which may
    move them): take ``block.address`` or ``numpy.asarray(block)`` right
    before each use, and do not keep them across later allocations.
    """

    def __init__(
        self,
        quota: int | str | None = None,
        enable_eviction: bool = False,
        name: str | None = None,
        device: int | None = None,
    ) -> None:
        """Create the pool; ``device`` defaults to GPU 0, or the host pool on the CPU backend.

        ``quota`` is bytes or a size string (``"256MiB"``), or None for no quota.
        """
        from .backend.select import backend

        backend()  # the runtime's first use: pick the backend (and say so if it is the CPU)
        self._pool = _rust().MemoryPool(quota, enable_eviction, name, device)

    @property
    def quota(self) -> int | None:
        """The pool's quota in bytes, or ``None``."""
        quota: int | None = self._pool.quota
        return quota

    @property
    def enable_eviction(self) -> bool:
        """Whether blocks of this pool may be spilled to host memory."""
        return bool(self._pool.enable_eviction)

    @property
    def device(self) -> int:
        """The device the pool allocates on (``-1``: the host pool)."""
        return int(self._pool.device)

    @property
    def name(self) -> str:
        """The pool's name, as error messages show it."""
        return str(self._pool.name)

    @property
    def partition(self) -> int:
        """The partition id the pool's bytes are charged to."""
        return int(self._pool.partition)

    def allocate(self, nbytes: int | str, stream: Any = 0) -> Any:
        """Return a block of at least ``nbytes`` (bytes or a size string) usable on ``stream``.

        ``stream`` is a :class:`gp.Stream <pygpukit.Stream>` or a raw stream
        handle (an int; 0 is the legacy default stream). The block has ``id``,
        ``size``, ``nbytes``, ``address``, ``views``, ``free()`` and ``touch()``;
        it returns to the pool when freed or garbage-collected. Host blocks
        convert to NumPy with ``numpy.asarray(block)``: the view holds the block
        (kept in place, never spilled) and ``free()`` raises ``BufferError``
        while any view exists.
        """
        handle = getattr(stream, "handle", stream)
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"stream must be a gp.Stream or an int handle, got {stream!r}")
        return self._pool.allocate(nbytes, handle)

    def stats(self) -> dict[str, int]:
        """Return ``allocated_bytes``, ``peak_allocated_bytes`` and ``quota_bytes`` (if any)."""
        return dict(self._pool.stats())

    def __repr__(self) -> str:
        """Show the pool's name, quota, eviction setting and device."""
        return repr(self._pool)

"""Launch planning of the row-wise kernels (norms, softmax): vector width, register bucket, groups.

A row of ``width`` elements is read as ``width / vec`` packs (``vec * itemsize`` = 16 bytes when
the width and every pointer allow it, else ``vec`` = 1). Each row gets a *group* of threads, each
thread holding ``nv`` packs in registers (``nv`` in 1, 2, 4: the kernel's compile-time bucket), so
the row is read from memory once. Narrow rows share a block (groups of 1 to 32 lanes, reduced with
warp shuffles); wide rows get a block each. Rows wider than the largest bucket holds fall back to a
streaming kernel (``nv`` = 0) that re-reads the row from global memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pygpukit.array import GPUArray

#: Register buckets and the largest block each is compiled for (its __launch_bounds__).
BUCKETS = ((1, 1024), (2, 1024), (4, 512))
#: Lanes per row the planner aims for: a row gets at most this many threads while a larger bucket
#: (more packs per thread) can hold it. Tuned on an H200: 4 packs a thread won for widths 1024 to
#: 16384 bf16 (8192: 256 threads x 4 packs, 16384: 512 x 4; 1024: 64 x 2).
TARGET_LANES = 64
#: Threads per block when several narrow rows share a block.
SMALL_BLOCK = 128
#: Threads per block of the streaming fallback.
STREAM_BLOCK = 1024


def vector_width(width: int, itemsize: int, *arrays: GPUArray | None) -> int:
    """Elements per 16-byte pack when ``width`` and every array's address allow it, else 1."""
    vec = 16 // itemsize
    if width % vec:
        return 1
    for a in arrays:
        if a is not None and a.data_ptr % 16:
            return 1
    return vec


@dataclass(frozen=True)
class RowPlan:
    """How a row kernel is launched: entry-point suffix, grid, block and group size."""

    suffix: str
    grid: int
    block: int
    group: int


def plan_rows(rows: int, width: int, vec: int) -> RowPlan:
    """The launch for ``rows`` rows of ``width`` elements read ``vec`` at a time."""
    return _plan(rows, width, vec, TARGET_LANES)


@functools.lru_cache(maxsize=1024)
def _plan(rows: int, width: int, vec: int, target: int) -> RowPlan:
    packs = width // vec
    # The smallest bucket that keeps the group within the target; else the largest bucket
    # whose group fits its block; else the streaming kernel.
    fits = [(nv, -(-packs // nv)) for nv, top in BUCKETS if -(-packs // nv) <= top]
    within = [(nv, lanes) for nv, lanes in fits if lanes <= max(target, 32)]
    if not fits:
        return RowPlan(f"v{vec}_s", rows, STREAM_BLOCK, STREAM_BLOCK)
    nv, lanes = within[0] if within else fits[-1]
    if lanes <= 32:
        group = 1 << max(0, (lanes - 1).bit_length())
        rows_per_block = SMALL_BLOCK // group
        return RowPlan(f"v{vec}_n{nv}", -(-rows // rows_per_block), SMALL_BLOCK, group)
    group = -(-lanes // 32) * 32
    return RowPlan(f"v{vec}_n{nv}", rows, group, group)

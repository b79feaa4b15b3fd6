"""Refuse ``--sizes`` that cannot fit before anything runs.

What one ``--sizes`` value means is the suite's business (bytes for ``memory``,
elements for ``elementwise``, the matrix side for ``gemm``), so each suite that
reads ``--sizes`` may give a ``footprint(ctx, size)``: the device and host bytes
its largest case at that size holds at once. :func:`check_sizes_fit` compares
them with the GPU's memory (and the pool's limit) and the host's RAM, and raises
``ValueError`` naming the suite, the size and both amounts, instead of letting the
run fail with an out-of-memory error (or swap) halfway through.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .units import format_count

if TYPE_CHECKING:
    from .registry import Suite, SuiteContext

__all__ = ["Footprint", "check_sizes_fit", "host_memory_bytes"]


@dataclass(frozen=True)
class Footprint:
    """Bytes one case holds at once: on the device and in host memory."""

    device: int
    host: int = 0


def host_memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _device_memory_bytes(ctx: SuiteContext) -> int | None:
    total = ctx.device_info.get("total_memory")
    limit: int | None = None
    try:
        from .. import memory

        limit = memory.get_limit()
    except Exception:  # the limit is a refinement; without it the device size is the bound
        limit = None
    bounds = [int(b) for b in (total, limit) if isinstance(b, int) and b > 0]
    return min(bounds) if bounds else None


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_sizes_fit(ctx: SuiteContext, suites: Sequence[Suite]) -> None:
    """Raise ``ValueError`` when a ``--sizes`` value needs more memory than there is."""
    if not ctx.sizes:
        return
    device_total = _device_memory_bytes(ctx) if ctx.on_gpu else None
    host_total = host_memory_bytes()
    problems = []
    for suite in suites:
        if suite.footprint is None:
            continue
        for size in ctx.sizes:
            need = suite.footprint(ctx, size)
            # On the CPU backend "device" arrays live in host memory too.
            host_need = need.host + (0 if ctx.on_gpu else need.device)
            where = []
            if device_total is not None and need.device > device_total:
                where.append(f"{_gib(need.device)} of GPU memory (it has {_gib(device_total)})")
            if host_total is not None and host_need > host_total:
                where.append(f"{_gib(host_need)} of host memory (it has {_gib(host_total)})")
            if where:
                problems.append(
                    f"--sizes {format_count(size)} is too large for the {suite.name} suite: "
                    f"it needs {' and '.join(where)}"
                )
    if problems:
        raise ValueError("\n".join([*problems, "Use smaller --sizes (nothing was run)."]))

"""memory: allocation, host-device transfers (pageable, pinned, async) and device copies.

Rows (sizes in bytes; ``--sizes`` replaces the defaults):

- ``alloc_free``: host time of allocating and freeing one buffer through the
  library's caching pool (``gp.empty`` / ``torch.empty`` / ``cupy.empty``);
- ``h2d_pageable`` / ``d2h_pageable``: ``from_numpy`` / ``to_numpy`` of an
  ordinary NumPy array, synchronized (GB/s, % of the pinned-copy ceiling);
- ``h2d_pinned`` / ``d2h_pinned``: copies from and to page-locked host memory;
- ``h2d_async``: a pageable array uploaded on a side stream and waited for
  (PyGPUkit stages it through its pinned pool and transfer engine);
- ``copy_d2d``: a device-to-device copy (bytes read plus written, % of ``copy_bw``).

Every transfer's result is compared byte for byte with its source.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..case import Case, CorrectnessError, Setup, Skip, Timed
from ..ceilings import CeilingSpec, register_ceiling
from ..checks import check_equal
from ..footprint import Footprint
from ..peers import Library
from ..registry import Suite, SuiteContext
from ..units import format_bytes

NAME = "memory"
MiB = 1 << 20
GiB = 1 << 30

RunFn = Callable[[int], Any]


def _param(nbytes: int) -> dict[str, int | float | str]:
    return {"bytes": format_bytes(nbytes)}


# --- alloc_free ----------------------------------------------------------------------------

_ALLOC: dict[str, Callable[[Any, int], Any]] = {
    "pygpukit": lambda m, n: m.empty((n,), dtype="uint8"),
    "torch": lambda m, n: m.empty(n, dtype=m.uint8, device="cuda"),
    "cupy": lambda m, n: m.empty(n, dtype=m.uint8),
}


def alloc_free_case(nbytes: int) -> Case:
    """Allocate and free ``nbytes`` (host time; the buffer is dropped right away)."""

    def setup(lib: Library, copies: int) -> Timed:
        make, module = _ALLOC[lib.name], lib.module

        def check(out: Any) -> None:
            if tuple(out.shape) != (nbytes,):
                raise CorrectnessError(f"allocation has shape {tuple(out.shape)}, not ({nbytes},)")

        return Timed(run=lambda i: make(module, nbytes), check=check)

    return Case(
        NAME,
        "alloc_free",
        _param(nbytes),
        dict.fromkeys(_ALLOC, setup),
        timing="host",
        requires=("empty",),
    )


# --- transfers -----------------------------------------------------------------------------


def _uploaded(lib: Library, host: np.ndarray) -> Any:
    return lib.upload(host, "uint8")


def _pinned_h2d(lib: Library, host: np.ndarray) -> RunFn:
    if lib.name == "torch":
        torch = lib.module
        src = torch.from_numpy(host).pin_memory()
        dst = torch.empty(host.size, dtype=torch.uint8, device="cuda")
        return lambda i: dst.copy_(src, non_blocking=True)
    if lib.name == "cupy":
        import cupyx

        staged = cupyx.empty_pinned(host.shape, dtype=host.dtype)
        staged[...] = host
        dev = lib.module.empty(host.shape, dtype=host.dtype)

        def run(i: int) -> Any:
            dev.set(staged)
            return dev

        return run
    if lib.name == "pygpukit":
        pinned = lib.module.memory.pinned_empty(host.shape, host.dtype)
        pinned[...] = host
        return lambda i: lib.module.from_numpy(pinned)
    raise Skip(f"no pinned host buffers in {lib.name}")


def _pinned_d2h(lib: Library, host: np.ndarray) -> RunFn:
    if lib.name == "torch":
        torch = lib.module
        src = _uploaded(lib, host)
        dst = torch.empty(host.size, dtype=torch.uint8).pin_memory()

        def run_torch(i: int) -> Any:
            dst.copy_(src, non_blocking=True)
            return dst.numpy()

        return run_torch
    if lib.name == "cupy":
        import cupyx

        src = _uploaded(lib, host)
        staged = cupyx.empty_pinned(host.shape, dtype=host.dtype)
        return lambda i: src.get(out=staged)
    if lib.name == "pygpukit":
        if "out" not in inspect.signature(lib.module.GPUArray.to_numpy).parameters:
            raise Skip("GPUArray.to_numpy has no out= for a pinned array yet")
        src = _uploaded(lib, host)
        pinned = lib.module.memory.pinned_empty(host.shape, host.dtype)
        return lambda i: src.to_numpy(out=pinned)
    raise Skip(f"no pinned host buffers in {lib.name}")


def _async_h2d(lib: Library, host: np.ndarray) -> RunFn:
    m = lib.module
    if lib.name == "pygpukit":
        if "stream" not in inspect.signature(m.from_numpy).parameters:
            raise Skip("gp.from_numpy has no stream= argument yet")
        stream = lib.require("Stream")()
        return lambda i: m.from_numpy(host, stream=stream)
    if lib.name == "torch":
        side = m.cuda.Stream()

        def run_torch(i: int) -> Any:
            with m.cuda.stream(side):
                return m.from_numpy(host).to("cuda", non_blocking=True)

        return run_torch
    side = m.cuda.Stream(non_blocking=True)
    dev = m.empty(host.shape, dtype=host.dtype)

    def run_cupy(i: int) -> Any:
        dev.set(host, stream=side)
        return dev

    return run_cupy


def _transfer_case(op: str, nbytes: int, host: np.ndarray, ceiling: str) -> Case:
    """One transfer row; the result is downloaded (if on the device) and compared with ``host``."""

    def setup(lib: Library, copies: int) -> Timed:
        if op == "h2d_pageable":
            run: RunFn = lambda i: _uploaded(lib, host)  # noqa: E731
        elif op == "d2h_pageable":
            dev = _uploaded(lib, host)
            run = lambda i: lib.download(dev)  # noqa: E731
        elif op == "h2d_pinned":
            run = _pinned_h2d(lib, host)
        elif op == "d2h_pinned":
            run = _pinned_d2h(lib, host)
        else:
            run = _async_h2d(lib, host)
        on_host = op.startswith("d2h")

        def check(out: Any) -> float:
            got = np.asarray(out) if on_host else lib.download(out)
            return check_equal(got.reshape(-1), host, op)

        return Timed(run=run, check=check)

    setups: dict[str, Setup] = {"pygpukit": setup, "torch": setup, "cupy": setup}
    requires = ("from_numpy",) if op.startswith("h2d") else ("from_numpy", "GPUArray.to_numpy")
    return Case(
        NAME,
        op,
        _param(nbytes),
        setups,
        timing="wall",
        bytes_moved=nbytes,
        ceiling=ceiling,
        requires=requires,
    )


def transfer_case(ctx: SuiteContext, op: str, nbytes: int) -> Case:
    """The ``op`` transfer row (``h2d_pageable``, ``d2h_pinned``, ...) of ``nbytes`` bytes."""
    ceiling = "h2d_pinned" if op.startswith("h2d") else "d2h_pinned"
    return _transfer_case(op, nbytes, ctx.data.get((nbytes,), "uint8"), ceiling)


# --- device-to-device copy --------------------------------------------------------------------

_COPY: dict[str, Callable[[Any], Any]] = {
    "pygpukit": lambda x: x.copy(),
    "torch": lambda x: x.clone(),
    "cupy": lambda x: x.copy(),
}


def copy_case(ctx: SuiteContext, nbytes: int) -> Case:
    """Device-to-device copy of ``nbytes``; inputs rotated when they fit in L2."""

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [ctx.data.get((nbytes,), "uint8", k) for k in range(copies)]
        srcs = [_uploaded(lib, h) for h in hosts]
        copy = _COPY[lib.name]
        return Timed(
            run=lambda i: copy(srcs[i % copies]),
            check=lambda out: check_equal(lib.download(out), hosts[0], "device copy"),
        )

    return Case(
        NAME,
        "copy_d2d",
        _param(nbytes),
        dict.fromkeys(_COPY, setup),
        bytes_moved=2 * nbytes,
        working_set=2 * nbytes,
        ceiling="copy_bw",
        requires=("from_numpy", "GPUArray.copy"),
    )


# --- the suite -------------------------------------------------------------------------------

TRANSFERS = ("h2d_pageable", "h2d_pinned", "h2d_async", "d2h_pageable", "d2h_pinned")


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """The memory suite's rows for this context."""
    for nbytes in ctx.pick_sizes(gpu=[MiB, 64 * MiB], gpu_quick=[MiB], cpu=[MiB], cpu_quick=[MiB]):
        yield alloc_free_case(nbytes)
    sizes = ctx.pick_sizes(
        gpu=[MiB, 64 * MiB, GiB], gpu_quick=[64 * MiB], cpu=[MiB, 16 * MiB], cpu_quick=[MiB]
    )
    for op in TRANSFERS:
        for nbytes in sizes:
            yield transfer_case(ctx, op, nbytes)
    for nbytes in sizes:
        yield copy_case(ctx, nbytes)


def _ceiling_size(ctx: SuiteContext) -> int:
    if ctx.on_gpu:
        return 256 * MiB if ctx.quick else GiB
    return 8 * MiB if ctx.quick else 64 * MiB


def _copy_at(ctx: SuiteContext, row: Case) -> Case | None:
    """A copy moving as many bytes as ``row`` (read + written), so it sees the same caches."""
    return copy_case(ctx, max(row.bytes_moved // 2, 1)) if row.bytes_moved else None


def _transfer_at(op: str) -> Callable[[SuiteContext, Case], Case | None]:
    def build(ctx: SuiteContext, row: Case) -> Case | None:
        return transfer_case(ctx, op, row.bytes_moved) if row.bytes_moved else None

    return build


register_ceiling(
    "copy_bw",
    CeilingSpec(
        "GB/s",
        "device-to-device copy, bytes read + written",
        lambda ctx: copy_case(ctx, _ceiling_size(ctx)),
        _copy_at,
    ),
)
register_ceiling(
    "h2d_pinned",
    CeilingSpec(
        "GB/s",
        "host-to-device copy from pinned memory",
        lambda ctx: transfer_case(ctx, "h2d_pinned", _ceiling_size(ctx)),
        _transfer_at("h2d_pinned"),
    ),
)
register_ceiling(
    "d2h_pinned",
    CeilingSpec(
        "GB/s",
        "device-to-host copy into pinned memory",
        lambda ctx: transfer_case(ctx, "d2h_pinned", _ceiling_size(ctx)),
        _transfer_at("d2h_pinned"),
    ),
)


def footprint(ctx: SuiteContext, nbytes: int) -> Footprint:
    """A device copy holds source and destination; a transfer the host data, pinned and result."""
    return Footprint(device=2 * nbytes, host=3 * nbytes)


SUITE = Suite(NAME, "allocation, host-device transfers, device copies", cases, footprint)

"""Suites: named generators of cases, registered by this package and by others.

A :class:`Suite` turns a :class:`SuiteContext` (backend, ``--quick``,
``--sizes``, ``--dtypes``, ``--seq-lens``, random data) into cases. The
built-in suites register when the registry is first read; other distributions
add theirs either by calling :func:`register_suite` from code that runs at
import, or through the entry-point group ``pygpukit.benchmark_suites``, whose
entries name a :class:`Suite`, or a callable returning one or a list of them::

    [project.entry-points."pygpukit.benchmark_suites"]
    gemv = "pygpukit.ops.benchmarks:gemv_suite"

A package used from a source tree (``PYTHONPATH``, no installed metadata) is
named in ``PYGPUKIT_BENCHMARK_PLUGINS`` instead, with the same value syntax.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import numpy as np

from .. import env
from .case import Case
from .data import DataCache
from .footprint import Footprint

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGINS_ENV",
    "Suite",
    "SuiteContext",
    "load_errors",
    "register_suite",
    "registered_suites",
]

ENTRY_POINT_GROUP = "pygpukit.benchmark_suites"
#: Comma-separated ``module:attribute`` plug-ins, for packages used from a source tree.
PLUGINS_ENV = "PYGPUKIT_BENCHMARK_PLUGINS"

#: Built-in suites, in report order (modules under ``pygpukit.benchmark.suites``).
BUILTIN = ("memory", "launch", "elementwise", "reduction", "gemm", "jit", "isolation")


@dataclass
class SuiteContext:
    """What a suite may read to decide its cases."""

    backend: str
    quick: bool
    data: DataCache
    rng: np.random.Generator
    sizes: list[int] | None = None
    dtypes: list[str] | None = None
    seq_lens: list[int] | None = None
    device_info: dict[str, Any] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        """True on the CUDA backend."""
        return self.backend == "cuda"

    def pick_sizes(
        self,
        *,
        gpu: Sequence[int],
        gpu_quick: Sequence[int],
        cpu: Sequence[int],
        cpu_quick: Sequence[int],
    ) -> list[int]:
        """``--sizes`` when given, else the suite's default for this backend and mode."""
        if self.sizes:
            return list(self.sizes)
        if self.on_gpu:
            return list(gpu_quick if self.quick else gpu)
        return list(cpu_quick if self.quick else cpu)

    def pick_dtypes(self, *, gpu: Sequence[str], cpu: Sequence[str]) -> list[str]:
        """``--dtypes`` when given, else the suite's default for this backend."""
        if self.dtypes:
            return list(self.dtypes)
        return list(gpu if self.on_gpu else cpu)


@dataclass(frozen=True)
class Suite:
    """A named group of cases: ``cases(ctx)`` yields them lazily, one at a time.

    Yielding lazily matters: a case's inputs are made when it is reached and
    freed after it, so a run never holds every suite's data at once.

    A suite that reads ``--sizes`` gives ``footprint(ctx, size)``: the device and host
    bytes (a :class:`~pygpukit.benchmark.footprint.Footprint`) its largest case holds at
    that size, so sizes that cannot fit are refused before the run.
    """

    name: str
    description: str
    cases: Callable[[SuiteContext], Iterable[Case]]
    footprint: Callable[[SuiteContext, int], Footprint] | None = None


_SUITES: dict[str, Suite] = {}
_LOAD_ERRORS: dict[str, str] = {}
_LOADED = False


def register_suite(suite: Suite, *, replace: bool = False) -> Suite:
    """Add ``suite`` to the registry; ``ValueError`` if its name is taken (unless ``replace``)."""
    if suite.name in _SUITES and not replace and _SUITES[suite.name] is not suite:
        raise ValueError(f"benchmark suite {suite.name!r} is already registered")
    _SUITES[suite.name] = suite
    return suite


def _register_loaded(obj: Any, origin: str) -> None:
    if callable(obj) and not isinstance(obj, Suite):
        obj = obj()
    items = [obj] if isinstance(obj, Suite) else list(obj or [])
    for item in items:
        if not isinstance(item, Suite):
            raise TypeError(f"{origin} gave {type(item).__name__}, not a Suite")
        register_suite(item)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for name in BUILTIN:
        module = importlib.import_module(f"{__package__}.suites.{name}")
        register_suite(module.SUITE)
    plugins = list(entry_points(group=ENTRY_POINT_GROUP))
    # Source checkouts on PYTHONPATH have no entry points: PLUGINS_ENV names them instead,
    # in the same ``module:attribute`` syntax, loaded the same way.
    installed = {ep.value for ep in plugins}
    for value in env.items(PLUGINS_ENV):
        if value not in installed:
            plugins.append(EntryPoint(value, value, ENTRY_POINT_GROUP))
    for ep in plugins:
        try:
            _register_loaded(ep.load(), f"plug-in {ep.name} ({ep.value})")
        except Exception as exc:  # a broken plug-in is reported, never fatal
            _LOAD_ERRORS[ep.name] = f"{type(exc).__name__}: {exc}"


def registered_suites() -> dict[str, Suite]:
    """Every registered suite by name: built-ins first, then plug-ins."""
    _load()
    return dict(_SUITES)


def load_errors() -> dict[str, str]:
    """Entry points that failed to load, with the error each raised."""
    _load()
    return dict(_LOAD_ERRORS)

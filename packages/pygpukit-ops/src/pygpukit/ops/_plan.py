"""Launch plans: the kernel, grid, block, shared memory and split choice of a call, made once.

An op plans a launch from its shape bucket (the sizes, dtypes and flags that change the launch)
the first time it sees it, keeps the plan in a :class:`PlanCache` and afterwards only looks it
up; a layer (:mod:`.layers`) takes the plan at construction or first use and holds it. Planning
is where the configuration (:mod:`.config`), the device's properties and the kernel constants
are read; a call that finds its plan reads none of them.

The backend is chosen once too: :func:`per_backend` picks the CUDA planner or the NumPy one
(whose "plans" run :mod:`.reference`) the first time it is called, so op bodies never branch on
the backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pygpukit as gp

from . import config

__all__ = ["Launch", "PlanCache", "on_gpu", "per_backend", "plan_caches"]

P = TypeVar("P")

_on_gpu: bool | None = None


def on_gpu() -> bool:
    """True when this process runs the CUDA backend (decided once; the backend never changes)."""
    global _on_gpu
    if _on_gpu is None:
        _on_gpu = gp.backend_name() == "cuda"
    return _on_gpu


def per_backend(cpu: Callable[..., P], cuda: Callable[..., P]) -> Callable[..., P]:
    """A function that calls ``cuda`` on the CUDA backend and ``cpu`` on the CPU backend.

    The choice is made at the first call and kept: later calls go straight to the chosen one.
    """
    chosen: list[Callable[..., P]] = []

    def call(*args: Any) -> P:
        if not chosen:
            chosen.append(cuda if on_gpu() else cpu)
        return chosen[0](*args)

    call.__doc__ = cuda.__doc__
    return call


@dataclass(frozen=True, slots=True)
class Launch:
    """One kernel launch with its geometry fixed: ``launch(*args)`` enqueues it."""

    kernel: Any  # a pygpukit.jit.Kernel
    grid: int | tuple[int, ...]
    block: int | tuple[int, ...]
    shared_mem: int = 0

    def __call__(self, *args: Any) -> None:
        self.kernel.launch(self.grid, self.block, args, shared_mem=self.shared_mem)


_caches: list[PlanCache[Any]] = []


class PlanCache(Generic[P]):
    """Plans of one op by key, built by ``build(*key)`` on a miss and kept (up to ``maxsize``).

    ``hits`` and ``misses`` count lookups, so a test can show that a call made no plan. The
    cache is dropped when the configuration changes (:func:`config.reload`, ``override``).
    """

    def __init__(self, name: str, build: Callable[..., P], maxsize: int = 512) -> None:
        self.name = name
        self._build = build
        self._maxsize = maxsize
        self._plans: dict[Hashable, P] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _caches.append(self)

    def get(self, *key: Hashable) -> P:
        """The plan for ``key``: a dict lookup after the first call with it."""
        plan = self._plans.get(key)
        if plan is not None:
            self.hits += 1
            return plan
        return self._miss(key)

    def _miss(self, key: tuple[Hashable, ...]) -> P:
        plan = self._build(*key)
        with self._lock:
            self.misses += 1
            if len(self._plans) >= self._maxsize:
                self._plans.pop(next(iter(self._plans)))  # the oldest key
            self._plans[key] = plan
        return plan

    def clear(self) -> None:
        """Forget every plan (the counters stay)."""
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)

    def __repr__(self) -> str:
        return (
            f"PlanCache({self.name!r}, {len(self)} plans, {self.hits} hits, {self.misses} misses)"
        )


def plan_caches() -> dict[str, PlanCache[Any]]:
    """Every op's plan cache by name (for stats and tests)."""
    return {cache.name: cache for cache in _caches}


def _clear_all() -> None:
    for cache in _caches:
        cache.clear()


config.on_change(_clear_all)

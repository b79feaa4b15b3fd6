"""Benchmark suites of pygpukit-ops, registered with ``python -m pygpukit.benchmark``.

Installed, the package registers :func:`suites` through the entry point group
``pygpukit.benchmark_suites``; from a source tree, set
``PYGPUKIT_BENCHMARK_PLUGINS=pygpukit.ops.benchmarks:suites``. Each module here
holds one suite (``SUITE``) measured against PyTorch in the same run.
"""

from __future__ import annotations

import importlib

from pygpukit.benchmark.registry import Suite

#: One module per suite, in report order.
MODULES = ("normalization", "linear", "attention", "sampling", "launch", "audio", "signal")


def suites() -> list[Suite]:
    """Every ops suite (the entry point's target)."""
    return [importlib.import_module(f"{__name__}.{m}").SUITE for m in MODULES]

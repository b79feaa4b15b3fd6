"""``python -m pygpukit.benchmark``: every hot path against PyTorch and CuPy on the same GPU.

Run ``python -m pygpukit.benchmark --help`` for the options and
``docs/benchmarks.md`` for what the columns mean. Other packages add suites by
registering a :class:`Suite` (here or through the ``pygpukit.benchmark_suites``
entry-point group) whose cases use the same harness, checks and peers::

    from pygpukit.benchmark import Case, Suite, Timed, register_suite
"""

from __future__ import annotations

from .case import Case, CorrectnessError, Skip, Timed, unavailable
from .ceilings import CeilingSpec, register_ceiling
from .checks import check_close, check_equal, sample_indices
from .cli import main
from .compare import Comparison, compare_runs
from .peers import Library
from .registry import ENTRY_POINT_GROUP, Suite, SuiteContext, register_suite, registered_suites
from .results import RunResult

__all__ = [
    "ENTRY_POINT_GROUP",
    "Case",
    "CeilingSpec",
    "Comparison",
    "CorrectnessError",
    "Library",
    "RunResult",
    "Skip",
    "Suite",
    "SuiteContext",
    "Timed",
    "check_close",
    "check_equal",
    "compare_runs",
    "main",
    "register_ceiling",
    "register_suite",
    "registered_suites",
    "sample_indices",
    "unavailable",
]

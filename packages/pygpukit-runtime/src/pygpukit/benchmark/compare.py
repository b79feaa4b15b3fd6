"""The regression gate: per-row change of PyGPUkit's median time against a baseline run.

Pure functions over two result documents (the JSON that ``--save`` writes), so
the logic is tested on synthetic numbers. A row regressed when its median time
grew by more than ``threshold_pct`` percent; rows are matched by key, and rows
that did not succeed in both runs are listed, never compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Change", "Comparison", "compare_runs", "median_times"]


@dataclass(frozen=True)
class Change:
    """One row present and measured in both runs."""

    key: str
    baseline_ms: float
    current_ms: float
    threshold_pct: float

    @property
    def change_pct(self) -> float:
        """Percent change of the median time: positive is slower."""
        return (self.current_ms - self.baseline_ms) / self.baseline_ms * 100.0

    @property
    def regressed(self) -> bool:
        """Slower by more than the threshold."""
        return self.change_pct > self.threshold_pct


@dataclass
class Comparison:
    """The outcome of comparing a run against a baseline."""

    threshold_pct: float
    changes: list[Change] = field(default_factory=list)
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Change]:
        """The rows slower than the threshold allows, worst first."""
        return sorted((c for c in self.changes if c.regressed), key=lambda c: -c.change_pct)

    def by_key(self) -> dict[str, Change]:
        """Changes indexed by row key."""
        return {c.key: c for c in self.changes}


def median_times(document: Mapping[str, Any], library: str = "pygpukit") -> dict[str, float]:
    """``key -> median ms`` of ``library``'s successful measurements in a result document."""
    times: dict[str, float] = {}
    for row in document.get("results", []):
        result = row.get("libs", {}).get(library)
        if not result or result.get("status") != "ok":
            continue
        median = result.get("median_ms")
        if isinstance(median, (int, float)) and median > 0:
            times[row["key"]] = float(median)
    return times


def compare_runs(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    threshold_pct: float,
    library: str = "pygpukit",
) -> Comparison:
    """Compare ``library``'s median times of ``current`` against ``baseline``."""
    if threshold_pct < 0:
        raise ValueError(f"regression threshold must be >= 0, got {threshold_pct}")
    base = median_times(baseline, library)
    cur = median_times(current, library)
    comparison = Comparison(threshold_pct)
    for key, current_ms in cur.items():
        if key in base:
            comparison.changes.append(Change(key, base[key], current_ms, threshold_pct))
        else:
            comparison.only_in_current.append(key)
    comparison.only_in_baseline = [key for key in base if key not in cur]
    return comparison

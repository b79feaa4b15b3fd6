"""Speed of light: what this card can do, measured once per run.

Each result is reported as a percentage of a ceiling measured on the same card
in the same run, not of a datasheet number:

- ``copy_bw``: device-to-device copy bandwidth of a large buffer, bytes read
  plus bytes written (elementwise ops and reductions are a share of it);
- ``h2d_pinned`` / ``d2h_pinned``: host-device copy bandwidth from and to
  pinned host memory (every transfer row is a share of it);
- ``gemm_<dtype>``: the best library matrix-product rate at a large square size.

A ceiling is measured with PyTorch when it is present, else with PyGPUkit,
through the same harness as every row (warm-up, median, correctness check).
The suites register how each ceiling is measured with
:func:`register_ceiling`; other packages can add their own.

A ceiling measured on a large buffer is DRAM's speed; a small row that stays in
L2 can beat it. So the speed-of-light column never reads above 100%: a row faster
than its ceiling gets the ceiling measured again at the row's own size, where its
spec can build that (``at_size``, named like ``copy_bw@bytes=1MiB``), and a row still faster
than that reads 100% (it *is* the fastest way this card was seen doing the work).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .case import Case
from .harness import HarnessConfig, measure
from .peers import Library
from .registry import SuiteContext
from .results import Ceiling, Row

__all__ = ["CeilingSpec", "Ceilings", "register_ceiling"]


@dataclass(frozen=True)
class CeilingSpec:
    """How to measure one ceiling: a case builder, its unit and a one-line description.

    ``at_size(ctx, row_case)``, when given, builds the ceiling's case at the size of a row
    (the same bytes moved), or returns None when it cannot.
    """

    unit: str
    how: str
    build: Callable[[SuiteContext], Case]
    at_size: Callable[[SuiteContext, Case], Case | None] | None = None


_SPECS: dict[str, CeilingSpec] = {}

#: Libraries to measure a ceiling with, in order of preference.
PREFERENCE = ("torch", "pygpukit")


def register_ceiling(name: str, spec: CeilingSpec) -> None:
    """Declare how the ceiling ``name`` is measured (later registrations replace earlier)."""
    _SPECS[name] = spec


class Ceilings:
    """The ceilings of one run, each measured the first time a row needs it."""

    def __init__(
        self,
        ctx: SuiteContext,
        libraries: Sequence[Library],
        cfg: HarnessConfig,
        announce: Callable[[Ceiling], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.libraries = {lib.name: lib for lib in libraries}
        self.cfg = cfg
        self.announce = announce
        self.values: dict[str, Ceiling] = {}

    def ensure(self, name: str | None) -> None:
        """Measure the ceiling ``name`` unless this run already did."""
        if name is None or name in self.values:
            return
        ceiling = self._measure(name)
        self.values[name] = ceiling
        if self.announce is not None:
            self.announce(ceiling)

    def fit(self, case: Case, row: Row) -> None:
        """Point ``row`` at a ceiling measured at its own size when it beats the large one."""
        pct = row.pct_of_ceiling("pygpukit", self.values, cap=False)
        spec = _SPECS.get(row.ceiling or "")
        if pct is None or pct <= 100.0 or spec is None or spec.at_size is None:
            return
        sized = spec.at_size(self.ctx, case)
        if sized is None:
            return
        name = f"{row.ceiling}@{','.join(f'{k}={v}' for k, v in sized.params.items())}"
        if name not in self.values:
            ceiling = self._measure_case(name, spec, sized)
            self.values[name] = ceiling
            if self.announce is not None:
                self.announce(ceiling)
        if self.values[name].value is not None:
            row.ceiling = name

    def _measure(self, name: str) -> Ceiling:
        spec = _SPECS.get(name)
        if spec is None:
            return Ceiling(name, None, "", reason="no registered way to measure it")
        return self._measure_case(name, spec, spec.build(self.ctx))

    def _measure_case(self, name: str, spec: CeilingSpec, case: Case) -> Ceiling:
        reasons = []
        for lib_name in PREFERENCE:
            lib = self.libraries.get(lib_name)
            if lib is None:
                continue
            result = measure(case, lib, self.cfg)
            row = Row(
                case.key,
                case.suite,
                case.op,
                case.params,
                case.timing,
                case.bytes_moved,
                case.flops,
                case.ceiling,
                {lib_name: result},
            )
            rate = row.rate(lib_name)
            if result.status == "ok" and rate is not None:
                return Ceiling(
                    name, rate, spec.unit, measured_with=lib_name, how=f"{spec.how}: {case.key}"
                )
            why = result.reason.splitlines()[0] if result.reason else result.status
            reasons.append(f"{lib_name}: {why}")
        reason = "; ".join(reasons) or "no library to measure it with"
        return Ceiling(name, None, spec.unit, how=spec.how, reason=reason)

"""Result records and the JSON result file.

A run is a :class:`RunResult`: the environment it ran in (GPU, SM, driver,
library versions, git commit), the speed-of-light :class:`Ceiling` values, and
one :class:`Row` per case with a :class:`LibResult` per library. ``--save``
writes it as JSON (``schema`` 1); ``--compare`` and ``--load`` read it back.
Derived numbers (GB/s, TFLOP/s, percent of ceiling, speed-up against each
peer) are written into the file too, for readers other than this package.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .case import ParamValue, TimingMode

__all__ = ["SCHEMA", "Ceiling", "LibResult", "Row", "RunResult", "Status", "load_json"]

#: Version of the result file layout.
SCHEMA = 1

Status = Literal["ok", "skipped", "failed"]


@dataclass
class LibResult:
    """One library's measurement of one case.

    ``times_ms`` holds one value per repetition (milliseconds per call, each
    the mean over ``inner`` back-to-back calls); ``check_error`` is the
    relative error the correctness check measured (0.0 for exact checks).
    """

    status: Status
    reason: str = ""
    times_ms: list[float] = field(default_factory=list)
    inner: int = 0
    copies: int = 1
    check_error: float | None = None
    #: Extra numbers of the case (``Timed.metrics``), reported under the table.
    metrics: dict[str, float | str] = field(default_factory=dict)

    @property
    def median_ms(self) -> float | None:
        """Median of ``times_ms``; ``None`` unless the measurement succeeded."""
        return statistics.median(self.times_ms) if self.status == "ok" and self.times_ms else None

    @property
    def min_ms(self) -> float | None:
        """Fastest repetition; ``None`` unless the measurement succeeded."""
        return min(self.times_ms) if self.status == "ok" and self.times_ms else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with ``median_ms`` and ``min_ms`` spelled out."""
        out = asdict(self)
        out["median_ms"] = self.median_ms
        out["min_ms"] = self.min_ms
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LibResult:
        """Inverse of :meth:`to_dict` (derived keys ignored)."""
        return cls(
            status=data["status"],
            reason=data.get("reason", ""),
            times_ms=[float(t) for t in data.get("times_ms", [])],
            inner=int(data.get("inner", 0)),
            copies=int(data.get("copies", 1)),
            check_error=data.get("check_error"),
            metrics=dict(data.get("metrics", {})),
        )


@dataclass
class Ceiling:
    """A speed-of-light number of this card, measured once per run.

    ``value`` is in ``unit`` (``"GB/s"`` or ``"TFLOP/s"``); ``None`` with a
    ``reason`` when it could not be measured.
    """

    name: str
    value: float | None
    unit: str
    measured_with: str = ""
    how: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceiling:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=data["name"],
            value=data.get("value"),
            unit=data.get("unit", ""),
            measured_with=data.get("measured_with", ""),
            how=data.get("how", ""),
            reason=data.get("reason", ""),
        )


@dataclass
class Row:
    """The measurements of one case on every library that ran it."""

    key: str
    suite: str
    op: str
    params: dict[str, ParamValue]
    timing: TimingMode
    bytes_moved: int = 0
    flops: int = 0
    ceiling: str | None = None
    libs: dict[str, LibResult] = field(default_factory=dict)

    @property
    def unit(self) -> str | None:
        """``"TFLOP/s"``, ``"GB/s"`` or ``None`` for rows that report time only."""
        if self.flops:
            return "TFLOP/s"
        if self.bytes_moved:
            return "GB/s"
        return None

    def rate(self, lib: str) -> float | None:
        """Derived throughput of ``lib`` in :attr:`unit`, from its median time."""
        result = self.libs.get(lib)
        ms = result.median_ms if result else None
        if not ms or ms <= 0:
            return None
        if self.flops:
            return self.flops / (ms * 1e-3) / 1e12
        if self.bytes_moved:
            return self.bytes_moved / (ms * 1e-3) / 1e9
        return None

    def speedup(self, lib: str, peer: str) -> float | None:
        """``peer`` time over ``lib`` time: above 1.0, ``lib`` is faster."""
        mine = self.libs.get(lib)
        theirs = self.libs.get(peer)
        a = mine.median_ms if mine else None
        b = theirs.median_ms if theirs else None
        return b / a if a and b else None

    def pct_of_ceiling(
        self, lib: str, ceilings: dict[str, Ceiling], *, cap: bool = True
    ) -> float | None:
        """``lib``'s rate as a percentage of the row's ceiling, when both are known.

        At most 100 (unless ``cap`` is false): a rate above the ceiling means the ceiling
        was measured where this row is not (see :attr:`exceeds_ceiling`).
        """
        ceiling = ceilings.get(self.ceiling) if self.ceiling else None
        rate = self.rate(lib)
        if ceiling is None or not ceiling.value or rate is None or ceiling.unit != self.unit:
            return None
        pct = 100.0 * rate / ceiling.value
        return min(pct, 100.0) if cap else pct

    def exceeds_ceiling(self, lib: str, ceilings: dict[str, Ceiling]) -> bool:
        """Whether ``lib`` ran faster than the row's ceiling (its SoL then reads 100%)."""
        pct = self.pct_of_ceiling(lib, ceilings, cap=False)
        return pct is not None and pct > 100.0

    @property
    def failed(self) -> list[str]:
        """Libraries whose measurement failed (wrong result or an error)."""
        return [name for name, r in self.libs.items() if r.status == "failed"]

    def to_dict(self, ceilings: dict[str, Ceiling]) -> dict[str, Any]:
        """JSON form, derived numbers included."""
        peers = [name for name in self.libs if name != "pygpukit"]
        return {
            "key": self.key,
            "suite": self.suite,
            "op": self.op,
            "params": self.params,
            "timing": self.timing,
            "bytes_moved": self.bytes_moved,
            "flops": self.flops,
            "ceiling": self.ceiling,
            "unit": self.unit,
            "libs": {n: r.to_dict() | {"rate": self.rate(n)} for n, r in self.libs.items()},
            "pct_of_ceiling": self.pct_of_ceiling("pygpukit", ceilings),
            "exceeds_ceiling": self.exceeds_ceiling("pygpukit", ceilings),
            "speedup": {peer: self.speedup("pygpukit", peer) for peer in peers},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """Inverse of :meth:`to_dict` (derived keys ignored)."""
        return cls(
            key=data["key"],
            suite=data["suite"],
            op=data["op"],
            params=dict(data.get("params", {})),
            timing=data.get("timing", "device"),
            bytes_moved=int(data.get("bytes_moved", 0)),
            flops=int(data.get("flops", 0)),
            ceiling=data.get("ceiling"),
            libs={k: LibResult.from_dict(v) for k, v in data.get("libs", {}).items()},
        )


@dataclass
class RunResult:
    """Everything one run produced; what ``--save`` writes."""

    environment: dict[str, Any]
    ceilings: dict[str, Ceiling] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[tuple[Row, str]]:
        """``(row, library)`` for every failed measurement."""
        return [(row, lib) for row in self.rows for lib in row.failed]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "schema": SCHEMA,
            "environment": self.environment,
            "options": self.options,
            "ceilings": {name: c.to_dict() for name, c in self.ceilings.items()},
            "results": [row.to_dict(self.ceilings) for row in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """A run read back from its JSON document; ``ValueError`` for another schema."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"result file schema {data.get('schema')!r}, expected {SCHEMA}")
        return cls(
            environment=dict(data.get("environment", {})),
            ceilings={k: Ceiling.from_dict(v) for k, v in data.get("ceilings", {}).items()},
            rows=[Row.from_dict(r) for r in data.get("results", [])],
            options=dict(data.get("options", {})),
        )

    def save(self, path: str | Path) -> None:
        """Write the JSON document to ``path`` (written whole, then renamed into place)."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        tmp.replace(target)

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        """Read a result file written by :meth:`save`."""
        return cls.from_dict(load_json(path))


def load_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``ValueError`` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a benchmark result file")
    return data

"""What a suite hands the harness: cases, and per library what to time and check.

A :class:`Case` is one row of the report: one operation at one shape and dtype.
For every library that can run it (``"pygpukit"``, ``"torch"``, ``"cupy"``) it
holds a setup function. The harness calls ``setup(library, copies)``; the setup
uploads inputs (``copies`` sets of them when the problem fits in L2, so
repeated calls do not just measure the cache) and returns a :class:`Timed`:
``run(i)`` performs call number ``i`` (input set ``i % copies``) and returns
its output, and ``check(output)`` verifies the output of ``run(0)`` against a
reference, raising :class:`CorrectnessError` when it is wrong.

A setup raises :class:`Skip` when its library cannot run the case (an API that
does not exist yet, a dtype the library lacks); the reason is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .peers import Library

__all__ = [
    "Case",
    "CorrectnessError",
    "ParamValue",
    "Setup",
    "Skip",
    "Timed",
    "TimingMode",
    "case_key",
    "unavailable",
]

#: ``device``: GPU time between two events around the calls (CPU backend: host
#: clock). ``host``: host time per call, no synchronization inside the timed
#: loop (launch overhead). ``wall``: host clock from a synchronized start to a
#: synchronized end (transfers, compiles: everything the caller waits for).
TimingMode = Literal["device", "host", "wall"]

ParamValue = int | float | str


class Skip(Exception):
    """Raised by a setup whose library cannot run the case; the message says why."""


class CorrectnessError(Exception):
    """A measured operation returned a wrong result; fails the run."""


@dataclass
class Timed:
    """What the harness times and checks for one library in one case.

    ``run(i)`` performs call number ``i`` and returns its output; ``check``
    verifies the output of ``run(0)`` and returns the relative error it saw
    (``None`` when the check is not numeric). ``measure``, when given, is for
    work that must be timed elsewhere (in a fresh process): it performs call
    number ``i``, times it itself and returns milliseconds. ``metrics``, when
    given, is called after timing for numbers the time column cannot carry
    (latency percentiles, throughput ratios); the report lists them under the
    suite's table.
    """

    run: Callable[[int], Any]
    check: Callable[[Any], float | None]
    measure: Callable[[int], float] | None = None
    metrics: Callable[[], dict[str, float | str]] | None = None


Setup = Callable[["Library", int], Timed]


def unavailable(reason: str) -> Setup:
    """A setup for a library that has no equivalent of the case: always skipped with ``reason``."""

    def setup(lib: Library, copies: int) -> Timed:
        raise Skip(reason)

    return setup


def case_key(suite: str, op: str, params: Mapping[str, ParamValue]) -> str:
    """Stable identifier of a row, used to match rows between runs (``--compare``)."""
    inner = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{suite}/{op}[{inner}]" if inner else f"{suite}/{op}"


@dataclass
class Case:
    """One benchmark row: an operation at fixed parameters, run on several libraries.

    ``bytes_moved`` (bytes read plus bytes written per call) or ``flops`` give the
    derived GB/s or TFLOP/s; ``ceiling`` names the speed-of-light entry the
    result is a percentage of. ``working_set`` is the number of device bytes one
    call touches: below twice the L2 size the harness rotates input sets.
    ``requires`` lists PyGPUkit attributes (``"sum"``, ``"GPUArray.__add__"``)
    without which the PyGPUkit column is skipped. Cases with the same
    ``peer_key`` share their peers' measurements (GEMM run twice for PyGPUkit's
    two backends measures PyTorch once). ``interleave`` times the libraries in
    alternating repetitions instead of one after the other (each row measures its
    peers afresh then): rows whose time is the host's launch cost, which a busy
    neighbour on the machine changes from one second to the next, compare the
    libraries under the same conditions.
    """

    suite: str
    op: str
    params: dict[str, ParamValue]
    setups: Mapping[str, Setup]
    timing: TimingMode = "device"
    bytes_moved: int = 0
    flops: int = 0
    working_set: int = 0
    ceiling: str | None = None
    requires: tuple[str, ...] = ()
    peer_key: str | None = None
    skip: str | None = None
    interleave: bool = False

    @property
    def key(self) -> str:
        """The row's identifier (see :func:`case_key`)."""
        return case_key(self.suite, self.op, self.params)

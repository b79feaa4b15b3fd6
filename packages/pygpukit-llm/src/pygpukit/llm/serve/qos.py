"""Host-side QoS of a server running several models: who gets the interpreter, and when.

On the device a model's partition gives it its SMs (a green context) and a stream of its
class's priority (:mod:`pygpukit.scheduler`). On the host, every model's engine thread and the
HTTP event loop run Python in one process and take turns on the interpreter lock. A thread
that gives the lock up (every launch, copy and wait of the runtime releases it) and wants it
back while another thread runs Python waits until that thread is made to drop it, which
CPython does after its *switch interval*: 5 ms by default. A Guaranteed model's step of
2-3 ms gives the lock up several times; beside a saturated BestEffort model (its engine thread
and 64 server-sent-event streams keep the interpreter busy) each of those costs up to the
whole interval, so a 2.5 ms inter-token latency can grow several times.

A server whose Guaranteed or Burstable model shares the process with another model therefore
runs with a short switch interval (:data:`SHARED_SWITCH_INTERVAL_S`): the lock changes hands
more often (a little more overhead for the BestEffort model's throughput), and the model with
the latency promise waits at most that long each time it wants the lock back. Any other
server runs with :data:`SERVER_SWITCH_INTERVAL_S`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SERVER_SWITCH_INTERVAL_S",
    "SHARED_SWITCH_INTERVAL_S",
    "apply_switch_interval",
    "host_switch_interval",
    "share_host_turns",
]

log = logging.getLogger("pygpukit.llm.serve")

#: The interpreter switch interval of a server where a model with a latency promise shares
#: the process with another model: 0.2 ms, a tenth of a small model's decode step, and still
#: long enough that the forced hand-overs (a few microseconds each) cost a few percent.
SHARED_SWITCH_INTERVAL_S = 2e-4

#: The switch interval of any other server: the engine thread whose step's tokens arrived must
#: not wait Python's 5 ms for the event-loop thread (busy writing a step's events to many
#: clients) to let go, or the next step starts that much later.
SERVER_SWITCH_INTERVAL_S = 1e-3

#: Classes that promise something to the model's clients (the scheduler's names).
_PROTECTED = ("guaranteed", "burstable")


def host_switch_interval(models: int, classes: Sequence[str], asked: float | None = None) -> float:
    """The switch interval (seconds) a server of ``models`` models should run with.

    ``classes``: the QoS classes of the models given partitions (``"guaranteed"``,
    ``"burstable"``, ``"besteffort"``); ``asked``: the ``--switch-interval`` the user gave
    (wins when given). :data:`SHARED_SWITCH_INTERVAL_S` when a model with a promise shares
    the process with another model, else :data:`SERVER_SWITCH_INTERVAL_S`.
    Raises ``ValueError`` for an ``asked`` that is not a positive number of seconds.
    """
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int | float) or not asked > 0:
            raise ValueError(
                f"--switch-interval must be a positive number of seconds, got {asked!r}"
            )
        return float(asked)
    if models > 1 and any(c in _PROTECTED for c in classes):
        return SHARED_SWITCH_INTERVAL_S
    return SERVER_SWITCH_INTERVAL_S


def apply_switch_interval(seconds: float | None) -> float:
    """Set the interpreter's switch interval (None: leave it); returns the one now in force."""
    if seconds is not None and seconds != sys.getswitchinterval():
        log.info("interpreter switch interval %.2g ms (was %.2g ms)", seconds * 1e3,
                 sys.getswitchinterval() * 1e3)  # fmt: skip
        sys.setswitchinterval(seconds)
    return sys.getswitchinterval()


def _never_paced(engine: Any) -> bool:
    """Whether no launch of ``engine`` can be held by the scheduler's pacing.

    True for a partition at the whole rate that does not yield to higher classes (a
    Guaranteed partition's default).
    """
    part = getattr(engine, "partition", None)
    if part is None:
        return False
    rate, _, yields = part.pacing
    return rate >= 1 and not yields


def share_host_turns(engines: Mapping[str, Any], classes: Mapping[str, str]) -> Any:
    """Make the engines of a server take host turns; the shared ``HostPriority`` or None.

    ``classes``: the QoS class of each model that has a partition (others have none). Turns
    are taken when a model with a promise (Guaranteed, Burstable) shares the server with
    another model: the promised models' engines are protected, the others yield to them.
    """
    from ..engine.host_priority import HostPriority

    protected = {name for name, c in classes.items() if c in _PROTECTED and name in engines}
    if len(engines) < 2 or not protected:
        return None
    # Keeping the lock through a launch is safe only where no launch can be held by pacing
    # (a held launch would then stall every thread of the server).
    priority = HostPriority(
        launches_keep_gil=all(_never_paced(engines[name]) for name in protected)
    )
    for name, engine in engines.items():
        engine.share_host(priority, protected=name in protected)
    log.info("host turns: %s go first", ", ".join(sorted(protected)))
    return priority

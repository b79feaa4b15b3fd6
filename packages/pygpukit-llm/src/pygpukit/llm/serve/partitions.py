"""``--partition NAME=memory,compute,class``: one scheduler partition per served model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PartitionSpec", "create_partitions", "parse_partition", "parse_size"]

_CLASSES = ("guaranteed", "burstable", "besteffort")


@dataclass(frozen=True)
class PartitionSpec:
    """A model's partition.

    ``memory``: bytes, or a size string; ``compute``: a device share in [0, 1], 0 for none;
    ``qos``: guaranteed, burstable or besteffort.
    """

    name: str
    memory: str
    compute: float
    qos: str

    def limits(self) -> Any:
        """The :class:`pygpukit.scheduler.PartitionLimits` that give this class.

        Guaranteed reserves the memory and caps it there, with its compute share; Burstable
        reserves the memory (and the share, if any) and may grow; BestEffort reserves
        nothing and is capped at the memory.
        """
        from pygpukit.scheduler import PartitionLimits

        base = PartitionLimits()
        if self.qos == "guaranteed":
            return base.memory(self.memory).compute(self.compute)
        if self.qos == "burstable":
            base = base.memory_request(self.memory)
            return base.compute(self.compute) if self.compute else base
        return base.memory_limit(self.memory)


def parse_size(text: str) -> int:
    """Bytes of a partition's memory (``"8GiB"``, ``"512MiB"``, ``"1000000"``).

    ``ValueError`` for a fraction (a partition's memory is a size) or text that is no size.
    """
    import pygpukit as gp

    size = gp.memory.parse_size(text)
    if isinstance(size, float):
        raise ValueError(f"partition memory {text!r} is a fraction; give a size such as 8GiB")
    return size


def parse_partition(text: str) -> PartitionSpec:
    """Parse ``NAME=memory,compute,class`` (``chat=8GiB,0.5,guaranteed``).

    Raises ``ValueError`` saying what is wrong.
    """
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    if not sep or not name or len(parts) != 3:
        raise ValueError(
            f"--partition {text!r}: expected NAME=memory,compute,class, e.g. "
            "chat=8GiB,0.5,guaranteed"
        )
    memory, compute_s, qos = (p.strip() for p in parts)
    try:
        compute = float(compute_s)
    except ValueError:
        raise ValueError(f"--partition {text!r}: compute {compute_s!r} is not a number") from None
    if not 0 <= compute <= 1:
        raise ValueError(f"--partition {text!r}: compute must be a share in [0, 1]")
    qos = qos.lower().replace("_", "").replace("-", "")
    if qos not in _CLASSES:
        raise ValueError(f"--partition {text!r}: class must be one of {', '.join(_CLASSES)}")
    if qos == "guaranteed" and compute == 0:
        raise ValueError(f"--partition {text!r}: a guaranteed partition needs a compute share")
    if qos == "besteffort" and compute:
        raise ValueError(f"--partition {text!r}: a besteffort partition reserves no compute")
    return PartitionSpec(name, memory, compute, qos)


def create_partitions(specs: list[PartitionSpec], device_memory: int) -> tuple[Any, dict[str, Any]]:
    """A scheduler holding one partition per spec; ``(scheduler, {name: partition})``.

    The scheduler shares ``device_memory`` (on the CPU backend, which reports none, the sum
    of the partitions' memory). Raises :class:`pygpukit.AdmissionError` when they do not fit.
    """
    from pygpukit.scheduler import Scheduler

    total = device_memory or sum(parse_size(s.memory) for s in specs)
    scheduler = Scheduler(total, workers=1)
    parts = {s.name: scheduler.create_partition(s.name, s.name, s.limits()) for s in specs}
    for s in specs:
        got = parts[s.name].qos_class.value.replace("_", "")
        if got != s.qos:
            raise ValueError(f"--partition {s.name}: asked for {s.qos}, the scheduler made {got}")
    return scheduler, parts

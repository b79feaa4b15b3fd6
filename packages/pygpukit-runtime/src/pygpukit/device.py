"""Devices: availability, enumeration, the current device and synchronisation.

On the CPU simulation backend there is one device (ordinal 0, the host).
"""

from __future__ import annotations

import operator
from typing import Any

from .backend.select import backend as _backend

__all__ = [
    "Device",
    "backend_name",
    "device_count",
    "get_device",
    "get_device_info",
    "is_cuda_available",
    "set_device",
    "synchronize",
]


def is_cuda_available() -> bool:
    """Return whether the CUDA backend runs this process (driver, a GPU with SM >= 80)."""
    return bool(_backend().name == "cuda")


def backend_name() -> str:
    """Return ``"cuda"`` or ``"cpu"``: the backend this process runs on."""
    return str(_backend().name)


def device_count() -> int:
    """Return the number of devices of the backend (1 on the CPU backend)."""
    return int(_backend().device_count())


def _check_ordinal(device: Any) -> int:
    """Validate a device ordinal; ``TypeError`` or ``ValueError`` naming what exists."""
    if isinstance(device, Device):
        return device.index
    if isinstance(device, bool):
        raise TypeError(f"device must be an int ordinal, got {device!r}")
    try:
        ordinal = operator.index(device)
    except TypeError:
        raise TypeError(f"device must be an int ordinal, got {device!r}") from None
    count = device_count()
    if not 0 <= ordinal < count:
        raise ValueError(
            f"device {ordinal} does not exist; this process sees {count} device(s) "
            f"(0..{count - 1}) on the {backend_name()} backend"
        )
    return ordinal


def get_device() -> int:
    """Return the calling thread's current device ordinal."""
    return int(_backend().get_device())


def set_device(device: int) -> None:
    """Make ``device`` current for the calling thread."""
    _backend().set_device(_check_ordinal(device))


def get_device_info(device: int | None = None) -> dict[str, Any]:
    """Describe a device (the current one by default).

    Keys: ``name, sm (major, minor), sm_count, total_memory, l2_cache_bytes,
    shared_mem_per_block, shared_mem_per_block_optin, shared_mem_per_sm,
    clock_khz, memory_clock_khz, memory_bus_width, driver_version, pci_bus_id``
    plus ``backend`` and ``index``. GPU-only values are None on the CPU backend.
    """
    ordinal = get_device() if device is None else _check_ordinal(device)
    info = dict(_backend().device_info(ordinal))
    info["backend"] = backend_name()
    info["index"] = ordinal
    return info


def synchronize(device: int | None = None) -> None:
    """Wait until all work on ``device`` (the current one by default) has finished."""
    from .stream import count_host_wait

    ordinal = get_device() if device is None else _check_ordinal(device)
    count_host_wait()
    _backend().synchronize(ordinal)


class Device:
    """A device ordinal; ``with gp.Device(1):`` makes it current for the block."""

    __slots__ = ("_previous", "index")

    def __init__(self, index: int = 0) -> None:
        self.index = _check_ordinal(index)
        self._previous: list[int] = []

    @property
    def name(self) -> str:
        """The device's name."""
        return str(get_device_info(self.index)["name"])

    def info(self) -> dict[str, Any]:
        """Return :func:`get_device_info` for this device."""
        return get_device_info(self.index)

    def synchronize(self) -> None:
        """Wait until all work on this device has finished."""
        synchronize(self.index)

    def __enter__(self) -> Device:
        b = _backend()
        self._previous.append(int(b.get_device()))
        b.set_device(self.index)
        return self

    def __exit__(self, *exc: object) -> None:
        _backend().set_device(self._previous.pop())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("Device", self.index))

    def __repr__(self) -> str:
        return f"Device({self.index}, backend={backend_name()!r})"

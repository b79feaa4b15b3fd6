"""What a result file records about where it ran: GPU, SM, driver, versions, git commit.

Device facts come from ``gp.get_device_info()``; while that is missing (or on
the CPU backend) from PyTorch, and the driver version from ``nvidia-smi`` when
it is on the path. Nothing here fails a run: an unknown fact is ``None``.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .peers import Library, PyGPUkitLibrary

__all__ = ["capture", "git_commit", "l2_bytes"]

_DEVICE_KEYS = (
    "name",
    "sm",
    "sm_count",
    "total_memory",
    "l2_cache_bytes",
    "clock_khz",
    "memory_clock_khz",
    "memory_bus_width",
    "driver_version",
    "pci_bus_id",
)


def _run(cmd: Sequence[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=10, cwd=cwd, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_commit() -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout this package runs from; ``None`` outside one."""
    if shutil.which("git") is None:
        return None
    here = Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if not commit:
        return None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here)
    return {"commit": commit, "dirty": bool(status)}


def _device_from_pygpukit(gp: Any) -> dict[str, Any] | None:
    info = getattr(gp, "get_device_info", None)
    if info is None:
        return None
    raw = dict(info())
    device = {k: raw.get(k) for k in _DEVICE_KEYS if k in raw}
    sm = device.get("sm")
    if isinstance(sm, (tuple, list)) and len(sm) == 2:
        device["sm"] = f"{sm[0]}.{sm[1]}"
    version = device.get("driver_version")
    if isinstance(version, int) and version > 0:  # cuDriverGetVersion: 12080 -> CUDA 12.8
        device["cuda_version"] = f"{version // 1000}.{version % 1000 // 10}"
    return device


def _device_from_torch(torch: Any) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "sm": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "total_memory": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
    }


def _nvidia_smi_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def _module_version(name: str) -> str | None:
    try:
        module = __import__(name)
    except ImportError:
        return None
    return str(getattr(module, "__version__", "unknown"))


def capture(
    gp: PyGPUkitLibrary, peers: Sequence[Library], missing: dict[str, str]
) -> dict[str, Any]:
    """The environment block of a result file."""
    device = _device_from_pygpukit(gp.module)
    if device is None:
        torch = next((p.module for p in peers if p.name == "torch"), None)
        device = _device_from_torch(torch) if torch is not None else {}
    versions: dict[str, str | None] = {
        "pygpukit": gp.version,
        "numpy": np.__version__,
        "ml_dtypes": _module_version("ml_dtypes"),
        "python": platform.python_version(),
    }
    versions.update({p.name: p.version for p in peers})
    nvrtc = getattr(gp.module, "get_nvrtc_version", None)
    if nvrtc is not None and gp.on_gpu:
        versions["nvrtc"] = ".".join(str(v) for v in nvrtc())
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "backend": gp.backend,
        "device": device,
        "driver": _nvidia_smi_driver() if gp.on_gpu or peers else None,
        "versions": versions,
        "peers_missing": dict(missing),
        "git": git_commit(),
        "host": {
            "platform": platform.platform(),
            "cpu": platform.processor() or None,
            "cpus": os.cpu_count(),
        },
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("PYGPUKIT_")},
    }


def l2_bytes(environment: dict[str, Any]) -> int:
    """The device's L2 size from an environment block (0 when unknown or on the CPU)."""
    if environment.get("backend") != "cuda":
        return 0
    value = environment.get("device", {}).get("l2_cache_bytes")
    # Unknown on a GPU: assume a large L2 so small problems are still rotated.
    return int(value) if value else 128 << 20

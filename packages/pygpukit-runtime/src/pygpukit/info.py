"""``python -m pygpukit info``: which backend runs, on what device, with which libraries."""

from __future__ import annotations

import contextlib
import sys
from argparse import Namespace
from typing import Any, TextIO

__all__ = ["collect", "command", "main"]


def _probe_library(name: str) -> dict[str, Any]:
    """Try each candidate of ``name`` with ctypes; where it loaded, or why each failed."""
    import ctypes

    from ._environment import library_candidates

    tried = []
    for c in library_candidates(name):
        try:
            ctypes.CDLL(c.path)
        except OSError as exc:
            tried.append((c.path, str(exc)))
            continue
        return {"loaded": True, "path": c.path, "source": c.source, "tried": tried}
    return {"loaded": False, "path": None, "source": None, "tried": tried}


def collect() -> dict[str, Any]:
    """Gather the report as a dict (backend, reason, devices, libraries)."""
    from . import __version__, env
    from ._environment import library_candidates
    from .backend.select import native_error, status
    from .errors import EnvironmentVariableError
    from .jit import get_jit_cache_dir, nvrtc_status

    with contextlib.suppress(ImportError):  # the ops package registers its own variables
        import pygpukit.ops  # noqa: F401
    try:
        state = status()
    except EnvironmentVariableError as exc:  # reported below with the other variables
        state = {"backend": "none", "reason": f"not chosen: {exc}", "details": {}}
    report: dict[str, Any] = {
        "version": __version__,
        "python": sys.version.split()[0],
        "backend": state["backend"],
        "reason": state["reason"],
        "native_error": native_error(),
        "devices": list(state["details"].get("devices", [])),
        "driver": state["details"].get("driver"),
        "nvrtc": nvrtc_status(),
        "cublasLt": _probe_library("cublasLt"),
        "cuda_candidates": [(c.path, c.source) for c in library_candidates("cuda")],
        "kernel_cache": get_jit_cache_dir(),
        "environment": env.describe_environment(),
    }
    return report


def _gib(nbytes: Any) -> str:
    return "?" if nbytes is None else f"{nbytes / 2**30:.1f} GiB"


def _driver_version(v: Any) -> str:
    if not v:
        return "?"
    return f"{v // 1000}.{(v % 1000) // 10}"


def _source_of(path: str, candidates: list[tuple[str, str]]) -> str:
    return next((src for p, src in candidates if p == path), "system")


def render(report: dict[str, Any], out: TextIO) -> None:
    """Write the report for people."""
    w = out.write
    w(f"PyGPUkit {report['version']} (Python {report['python']})\n")
    w(f"backend: {report['backend']}")
    w(f"  ({report['reason']})\n" if report["reason"] else "\n")
    if report["native_error"]:
        w(f"native module: not loaded: {report['native_error']}\n")
    for i, dev in enumerate(report["devices"]):
        major, minor = dev["sm"]
        w(
            f"device {i}: {dev['name']}, SM {major}{minor}, {dev['sm_count']} SMs, "
            f"{_gib(dev['total_memory'])}, driver {_driver_version(dev.get('driver_version'))}\n"
        )
    driver = report["driver"]
    w("libcuda: ")
    if driver and driver.get("loaded"):
        src = _source_of(driver["path"], report["cuda_candidates"])
        w(f"{driver['path']} ({src}), driver {_driver_version(driver.get('driver_version'))}\n")
    elif driver:
        w("not loaded; tried:\n")
        for path, why in driver.get("tried", []):
            w(f"    {path}: {why}\n")
    else:
        tried = ", ".join(p for p, _ in report["cuda_candidates"])
        w(f"not tried (no native module); candidates: {tried}\n")
    nvrtc = report["nvrtc"]
    w("NVRTC: ")
    if nvrtc["loaded"]:
        major, minor = nvrtc["version"]
        w(f"{nvrtc['path']} ({nvrtc['source']}), version {major}.{minor}\n")
    else:
        w("NVRTC JIT compiler not available (pip install pygpukit-runtime[jit]); tried:\n")
        for path, why in nvrtc["tried"]:
            w(f"    {path}: {why}\n")
        if nvrtc["error"]:
            w(f"    ({nvrtc['error']})\n")
    cache = report["kernel_cache"]
    w(f"kernel cache: {cache if cache else 'in memory only (PYGPUKIT_CACHE_DIR is empty)'}\n")
    cublas = report["cublasLt"]
    w("cuBLASLt: ")
    if cublas["loaded"]:
        w(f"{cublas['path']} ({cublas['source']})\n")
    else:
        w("not found (pip install pygpukit-runtime[cublas]); tried:\n")
        for path, why in cublas["tried"]:
            w(f"    {path}: {why}\n")
    variables = report["environment"]
    w("environment:" + ("\n" if variables else " no PYGPUKIT_* variables set\n"))
    for name, value, verdict in variables:
        w(f"    {name}={value!r}: {verdict}\n")


def command(args: Namespace) -> int:
    """``pygpukit info``: the report (the command takes no options)."""
    return main([])


def main(argv: list[str] | None = None) -> int:
    """Print the report; exit status 0."""
    import warnings

    from .errors import BackendFallbackWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BackendFallbackWarning)  # the report says why itself
        render(collect(), sys.stdout)
    return 0

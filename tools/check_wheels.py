"""Check the wheels `nox -s wheels` built: contents and size.

    python tools/check_wheels.py WHEELHOUSE --archs "80;90a"

Fails (exit 1) unless there is one wheel per package, the runtime wheel holds
_native, _rust and a cubin of every built-in kernel for every arch, and the
runtime wheel is under 15 MB.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import zipfile

PACKAGES = [
    "pygpukit_runtime",
    "pygpukit_ops",
    "pygpukit_llm",
    "pygpukit_asr",
    "pygpukit_tts",
    "pygpukit",
]
MAX_RUNTIME_BYTES = 15 * 1024 * 1024


def check(wheelhouse: pathlib.Path, archs: list[str]) -> list[str]:
    """Return the problems found (empty when the wheels are right)."""
    problems = []
    wheels = {}
    for name in PACKAGES:
        found = sorted(wheelhouse.glob(f"{name}-*.whl"))
        if len(found) != 1:
            problems.append(f"{name}: expected one wheel, found {[w.name for w in found]}")
        else:
            wheels[name] = found[0]
    for wheel in wheels.values():
        print(f"{wheel.stat().st_size / 1e6:8.2f} MB  {wheel.name}")
    runtime = wheels.get("pygpukit_runtime")
    if runtime is None:
        return problems
    if runtime.stat().st_size > MAX_RUNTIME_BYTES:
        problems.append(f"runtime wheel is {runtime.stat().st_size / 1e6:.1f} MB (limit 15 MB)")
    names = set(zipfile.ZipFile(runtime).namelist())
    if not any(n.startswith("pygpukit/_native.") and n.endswith(".so") for n in names):
        problems.append("runtime wheel has no pygpukit/_native*.so")
    if "pygpukit/_rust.abi3.so" not in names:
        problems.append("runtime wheel has no pygpukit/_rust.abi3.so")
    # The package kernel API: the build tool and the shared device headers packages compile with.
    for shipped in (
        "pygpukit/kernels/build.py",
        "pygpukit/include/pygpukit/kernel.cuh",
        "pygpukit/include/pygpukit/mma.cuh",
        "pygpukit/include/pygpukit/wgmma.cuh",
    ):
        if shipped not in names:
            problems.append(f"runtime wheel lacks {shipped}")
    manifest = json.loads(zipfile.ZipFile(runtime).read("pygpukit/_kernels/manifest.json"))
    for arch in archs:
        for kernel in manifest["kernels"]:
            if f"pygpukit/_kernels/sm_{arch}/{kernel}.cubin" not in names:
                problems.append(f"runtime wheel lacks sm_{arch}/{kernel}.cubin")
    return problems


def main() -> int:
    """Check the wheelhouse named on the command line; return an exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheelhouse", type=pathlib.Path)
    parser.add_argument("--archs", required=True)
    args = parser.parse_args()
    archs = [a for a in args.archs.replace(",", ";").split(";") if a]
    problems = check(args.wheelhouse, archs)
    for p in problems:
        print("error:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

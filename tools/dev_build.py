"""Developer build: compile _native, _rust and the cubins into the source tree.

    python tools/dev_build.py [--archs 90a] [--prebuilt-rust PATH] [--build-dir build/dev]

Installs pygpukit/_native*.so, pygpukit/_rust.abi3.so and pygpukit/_kernels/
into packages/pygpukit-runtime/src, and pygpukit/ops/_kernels/ into
packages/pygpukit-ops/src (all git-ignored), so that

    PYTHONPATH=packages/pygpukit-runtime/src:packages/pygpukit-ops/src python -c "import pygpukit"

uses them. Incremental: a second run rebuilds only what changed. Needs the
build requirements of pygpukit-runtime in the current Python (scikit-build-core
is not used here): pybind11, nvidia-cuda-runtime, nvidia-cuda-nvrtc.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "packages" / "pygpukit-runtime"
OPS = ROOT / "packages" / "pygpukit-ops"


def main() -> int:
    """Configure (once), build and install into the source tree; return an exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=os.environ.get("PYGPUKIT_CUDA_ARCHS", "80;90a"))
    parser.add_argument("--prebuilt-rust", default=os.environ.get("PYGPUKIT_PREBUILT_RUST", ""))
    parser.add_argument("--build-dir", default=str(ROOT / "build" / "dev"))
    parser.add_argument("--debug", action="store_true", help="CMake Debug build")
    args = parser.parse_args()

    import pybind11  # a build requirement: imported here so its absence gives a clear error

    build = pathlib.Path(args.build_dir)
    prebuilt = os.path.abspath(args.prebuilt_rust) if args.prebuilt_rust else ""
    configure = [
        "cmake",
        "-S",
        str(RUNTIME),
        "-B",
        str(build),
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DPYGPUKIT_CUDA_ARCHS={args.archs}",
        f"-DPYGPUKIT_PREBUILT_RUST={prebuilt}",
        f"-DCMAKE_BUILD_TYPE={'Debug' if args.debug else 'Release'}",
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"] if not (build / "CMakeCache.txt").exists() else []
    steps = [
        configure,
        ["cmake", "--build", str(build), "--parallel"],
        ["cmake", "--install", str(build), "--prefix", str(RUNTIME / "src")],
    ]
    # pygpukit-ops: cubins only, installed into its source tree the same way.
    ops_build = build.with_name(build.name + "-ops")
    ops_configure = [
        "cmake",
        "-S",
        str(OPS),
        "-B",
        str(ops_build),
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DPYGPUKIT_CUDA_ARCHS={args.archs}",
    ]
    if shutil.which("ninja") and not (ops_build / "CMakeCache.txt").exists():
        ops_configure += ["-G", "Ninja"]
    steps += [
        ops_configure,
        ["cmake", "--build", str(ops_build), "--parallel"],
        ["cmake", "--install", str(ops_build), "--prefix", str(OPS / "src")],
    ]
    env = dict(os.environ, PYGPUKIT_CUDA_ARCHS=args.archs)
    for cmd in steps:
        print("+", " ".join(cmd), flush=True)
        if subprocess.call(cmd, env=env) != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

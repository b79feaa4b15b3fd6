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


def cmake_steps(package: pathlib.Path, build: pathlib.Path, *defines: str) -> list[list[str]]:
    """The commands that configure, build and install ``package`` into its own ``src`` folder.

    Ninja is chosen on a first configure when it is installed (CMake keeps the generator).
    """
    configure = ["cmake", "-S", str(package), "-B", str(build), *defines]
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    return [
        configure,
        ["cmake", "--build", str(build), "--parallel"],
        ["cmake", "--install", str(build), "--prefix", str(package / "src")],
    ]


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
    steps = cmake_steps(
        RUNTIME,
        build,
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DPYGPUKIT_CUDA_ARCHS={args.archs}",
        f"-DPYGPUKIT_PREBUILT_RUST={prebuilt}",
        f"-DCMAKE_BUILD_TYPE={'Debug' if args.debug else 'Release'}",
    )
    # pygpukit-ops: cubins only, installed into its source tree the same way.
    steps += cmake_steps(
        OPS,
        build.with_name(build.name + "-ops"),
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DPYGPUKIT_CUDA_ARCHS={args.archs}",
    )
    env = dict(os.environ, PYGPUKIT_CUDA_ARCHS=args.archs)
    for cmd in steps:
        print("+", " ".join(cmd), flush=True)
        if subprocess.call(cmd, env=env) != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

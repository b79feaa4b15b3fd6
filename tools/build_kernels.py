"""Compile built-in CUDA kernels to per-SM cubins with NVRTC (no GPU needed).

    python tools/build_kernels.py --out DIR --archs "80;90a" [--include INC] a.cu b.cu ...

CMake calls this at wheel build for the runtime's and the ops package's kernels; it runs
``pygpukit.kernels.build`` (the tool any package uses) from the source tree, loaded by file
because ``pygpukit`` is not installed yet. See that module for the manifest it writes.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

_BUILD = (
    pathlib.Path(__file__).resolve().parent.parent
    / "packages/pygpukit-runtime/src/pygpukit/kernels/build.py"
)


def main() -> int:
    """Run the kernel build of the source tree's runtime; return its exit code."""
    spec = importlib.util.spec_from_file_location("_pygpukit_kernels_build", _BUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return int(module.main())


if __name__ == "__main__":
    sys.exit(main())

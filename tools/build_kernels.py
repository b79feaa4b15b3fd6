"""Compile built-in CUDA kernels to per-SM cubins with NVRTC (no GPU needed).

    python tools/build_kernels.py --out DIR --archs "80;90a" [--include INC] a.cu b.cu ...

CMake calls this at wheel build for the runtime's and the ops package's kernels; it runs
``pygpukit.kernels.build`` (the tool any package uses) from the source tree, loaded by file
because ``pygpukit`` is not installed yet. See that module for the manifest it writes.
"""

from __future__ import annotations

import sys

from _source_loader import load_runtime_module


def main() -> int:
    """Run the kernel build of the source tree's runtime; return its exit code."""
    return int(load_runtime_module("kernels/build.py", "_pygpukit_kernels_build").main())


if __name__ == "__main__":
    sys.exit(main())

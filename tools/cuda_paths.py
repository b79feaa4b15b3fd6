"""Print a CUDA path for the build: `python tools/cuda_paths.py include|nvrtc`.

Used by CMake to find cuda.h/nvrtc.h (from the nvidia-cuda-runtime/-nvrtc
wheels or CUDA_PATH). Exits 1 with the folders it searched when nothing is found.
"""

from __future__ import annotations

import sys

from _source_loader import load_environment


def main() -> int:
    """Print the first include folder or NVRTC library found, or explain what was searched."""
    env = load_environment()
    what = sys.argv[1] if len(sys.argv) > 1 else "include"
    if what == "include":
        found = [c.path for c in env.include_dirs()]
    elif what == "nvrtc":
        found = [c.path for c in env.library_candidates("nvrtc") if c.source != "system"]
    else:
        print(f"unknown query {what!r}; use 'include' or 'nvrtc'", file=sys.stderr)
        return 2
    if not found:
        print(
            f"no CUDA {what} found in pip nvidia wheels {env.nvidia_wheel_roots()} "
            "or CUDA_PATH/CUDA_HOME",
            file=sys.stderr,
        )
        return 1
    print(found[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Child process of the jit suite: time one compile of the ``scale`` kernel from a fresh process.

    python -m pygpukit.benchmark.suites.jit_child LIBRARY SALT

LIBRARY is ``pygpukit`` or ``cupy``. Outside the timing, the device is
initialized, the inputs uploaded, and a warm-up variant of the kernel is
compiled and launched (so loading NVRTC and first-launch costs are not
counted). The timed region then compiles the kernel source with SALT appended
as a comment (a new salt misses every cache, a repeated one hits the disk
cache the caller points the library at), launches it once and waits. The
result is checked. One JSON line goes to stdout: ``{"ms": ...}``,
``{"skip": reason}`` or ``{"error": message}``.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from ..case import CorrectnessError, Skip
from ..checks import check_close
from ..peers import CupyLibrary, Library, PyGPUkitLibrary
from .kernels import SCALE_SOURCE, compile_scale, launch_scale

N = 1 << 20


def timed_compile(lib: Library, salt: str) -> float:
    """Milliseconds from ``jit`` of the salted source to the first launch's completion."""
    x_host = np.random.default_rng().standard_normal(N, dtype=np.float32)
    x, y = lib.upload(x_host, "float32"), lib.upload(x_host, "float32")
    launch_scale(lib, compile_scale(lib, f"{SCALE_SOURCE}// warm-up\n"), x, y, 1.0, N)
    lib.synchronize()
    t0 = time.perf_counter()
    kernel = compile_scale(lib, f"{SCALE_SOURCE}// {salt}\n")
    launch_scale(lib, kernel, x, y, 2.0, N)
    lib.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    check_close(lib.download(y), 2.0 * x_host.astype(np.float64), "float32", "scale kernel")
    return ms


def main(argv: list[str]) -> int:
    """Run one timed compile and print its JSON line; exit status 0 unless it crashed."""
    name, salt = argv
    try:
        lib: Library = PyGPUkitLibrary() if name == "pygpukit" else CupyLibrary()
        print(json.dumps({"ms": timed_compile(lib, salt)}))
    except Skip as exc:
        print(json.dumps({"skip": str(exc)}))
    except CorrectnessError as exc:
        print(json.dumps({"error": str(exc)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

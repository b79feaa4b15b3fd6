"""Compile built-in CUDA kernels to per-SM cubins with NVRTC (no GPU needed).

    python tools/build_kernels.py --out DIR --archs "80;90a" [--include INC] a.cu b.cu ...

Writes ``DIR/sm_<arch>/<name>.cubin`` for every source and arch, copies each
source and the ``*.cuh`` headers beside it to ``DIR/src/`` (so the runtime can
JIT a missing SM with the same options), and writes ``DIR/manifest.json``
(archs, NVRTC version, options, a SHA-256 of each source). Any compile error
fails the run with NVRTC's log.

CMake calls this at wheel build; CI runs it through that build, so a kernel that
does not compile fails CI. NVRTC comes from the nvidia-cuda-nvrtc wheel (or
CUDA_PATH); headers from nvidia-cuda-runtime.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from _env_loader import load_environment

# Options every built-in kernel is compiled with, here and by the runtime's JIT fallback.
# No -lineinfo: it tripled the cubins (82 MB for six archs), and the runtime wheel must stay
# under 15 MB. Add it locally (PYGPUKIT_KERNEL_LINEINFO=1) when profiling with source lines.
BUILTIN_OPTIONS = ["-std=c++17", "--device-as-default-execution-space"]


class Nvrtc:
    """The few NVRTC calls this tool needs, through ctypes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def version(self) -> tuple[int, int]:
        """NVRTC's (major, minor)."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "version")
        return major.value, minor.value

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"NVRTC {what}: {self.lib.nvrtcGetErrorString(code).decode()}")

    def compile(self, source: bytes, name: str, options: list[str]) -> bytes:
        """Compile ``source`` to a cubin; raise with the compile log on failure."""
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None),
            "create",
        )
        try:
            opts = [o.encode() for o in options]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            rc = self.lib.nvrtcCompileProgram(prog, len(opts), arr)
            size = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            self.lib.nvrtcGetProgramLog(prog, log)
            if rc != 0:
                raise RuntimeError(
                    f"{name} ({' '.join(options)}) failed to compile:\n{log.value.decode()}"
                )
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, cubin), "cubin")
            return cubin.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def find_nvrtc(env) -> Nvrtc:
    """Load the first NVRTC candidate that opens, or exit listing what was tried."""
    tried = []
    for cand in env.library_candidates("nvrtc"):
        try:
            return Nvrtc(cand.path)
        except OSError as exc:
            tried.append(f"{cand.path} ({cand.source}): {exc}")
    sys.exit(
        "NVRTC not found; install the nvidia-cuda-nvrtc wheel. Tried:\n  " + "\n  ".join(tried)
    )


def main() -> int:
    """Compile every source for every arch; return a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--archs", required=True, help='";"- or ","-separated, e.g. "80;90a"')
    parser.add_argument("--include", action="append", default=[])
    parser.add_argument("sources", nargs="*", type=pathlib.Path)
    args = parser.parse_args()

    env = load_environment()
    nvrtc = find_nvrtc(env)
    archs = [a.strip() for a in args.archs.replace(",", ";").split(";") if a.strip()]
    includes = args.include or [c.path for c in env.include_dirs()[:1]]
    sources = sorted(args.sources)

    if args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "src").mkdir(parents=True)

    # Headers next to the sources travel too, so a JIT fallback compiles the same translation unit.
    for header in sorted({h for src in sources for h in src.parent.glob("*.cuh")}):
        shutil.copy2(header, args.out / "src" / header.name)
    jobs = []
    for src in sources:
        shutil.copy2(src, args.out / "src" / src.name)
        for arch in archs:
            opts = [f"--gpu-architecture=sm_{arch}", *BUILTIN_OPTIONS]
            if os.environ.get("PYGPUKIT_KERNEL_LINEINFO") == "1":
                opts.append("-lineinfo")
            opts += [f"-I{inc}" for inc in includes] + [f"-I{src.parent}"]
            jobs.append((src, arch, opts))

    start = time.perf_counter()

    def build(job: tuple[pathlib.Path, str, list[str]]) -> int:
        src, arch, opts = job
        cubin = nvrtc.compile(src.read_bytes(), src.name, opts)
        dest = args.out / f"sm_{arch}" / f"{src.stem}.cubin"
        dest.parent.mkdir(exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(cubin)
        os.replace(tmp, dest)
        return len(cubin)

    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            total = sum(pool.map(build, jobs))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    manifest = {
        "kernel_abi": env.KERNEL_ABI_VERSION,
        "nvrtc_version": list(nvrtc.version()),
        "archs": archs,
        "options": BUILTIN_OPTIONS,
        "kernels": {src.stem: hashlib.sha256(src.read_bytes()).hexdigest() for src in sources},
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(
        f"NVRTC {'.'.join(map(str, nvrtc.version()))}: {len(sources)} kernel files x "
        f"{len(archs)} archs = {len(jobs)} cubins, {total / 1e6:.2f} MB, "
        f"{time.perf_counter() - start:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

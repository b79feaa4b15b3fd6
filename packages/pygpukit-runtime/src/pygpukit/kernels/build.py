"""Compile a package's CUDA kernels to per-SM cubins and a manifest, with NVRTC (no GPU needed).

    python -m pygpukit.kernels.build --out DIR --archs "80;90a" [--include INC] a.cu b.cu ...

Writes ``DIR/sm_<arch>/<file>.cubin`` for every source and arch, copies each source and
the ``*.cuh`` headers beside it to ``DIR/src/`` (so a GPU with no fitting cubin gets the
same translation unit compiled at run time), and ``DIR/manifest.json``:

.. code-block:: json

    {"format": 2, "kernel_abi": 1, "nvrtc_version": [13, 0], "archs": ["80", "90a"],
     "options": ["-std=c++17", "--device-as-default-execution-space"],
     "kernels": {"scale": {"sha256": "...",
                           "entries": {"scale_f32": ["ptr", "f32", "i32"]},
                           "constants": {"SCALE_BLOCK": 256}}}}

``entries`` and ``constants`` are read back from the first arch's cubins: ``PGK_KERNEL``
and ``PGK_CONSTANT`` of ``pygpukit/kernel.cuh`` leave them there (see :mod:`.cubin`), so the
signatures are the compiler's view of the parameter types, not a parse of the source. Every
arch must agree on them. Sources see ``pygpukit/kernel.cuh`` and the runtime's other shared
device headers through ``-I`` of this package's ``include`` folder. Any compile error fails
the run with NVRTC's log.

Standard library only: the repository's CMake build runs this file (through
``tools/build_kernels.py``) before ``pygpukit`` is installed.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

#: The layout of manifest.json this module writes (2: entries and constants per file).
MANIFEST_FORMAT = 2

#: Options every kernel is compiled with, here and by a loader's JIT fallback. No -lineinfo: it
#: tripled the cubins; add it locally (PYGPUKIT_KERNEL_LINEINFO=1) to profile with source lines.
BUILTIN_OPTIONS = ["-std=c++17", "--device-as-default-execution-space"]

_HERE = pathlib.Path(__file__).resolve().parent
#: The runtime's shared device headers: ``#include "pygpukit/kernel.cuh"``.
INCLUDE_DIR = _HERE.parent / "include"


def _load_by_path(name: str, path: pathlib.Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


if __package__:
    from .. import _environment
    from . import cubin
else:  # loaded by file (tools/build_kernels.py): pygpukit may not be importable yet
    _environment = _load_by_path("_pygpukit_environment", _HERE.parent / "_environment.py")
    cubin = _load_by_path("_pygpukit_cubin", _HERE / "cubin.py")

#: The calling convention of the kernels, written into every manifest; loaders refuse another.
#: Defined once, in :mod:`pygpukit._environment` (the JIT disk cache keys on it too).
KERNEL_ABI_VERSION: int = _environment.KERNEL_ABI_VERSION


class Nvrtc:
    """The few NVRTC calls the build needs, through ctypes."""

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
        """Compile ``source`` to a cubin; raise ``RuntimeError`` with the log on failure."""
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
            data = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, data), "cubin")
            return data.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def find_nvrtc() -> Nvrtc:
    """Load the first NVRTC candidate that opens; ``RuntimeError`` listing what was tried."""
    tried = []
    for cand in _environment.library_candidates("nvrtc"):
        try:
            return Nvrtc(cand.path)
        except OSError as exc:
            tried.append(f"{cand.path} ({cand.source}): {exc}")
    raise RuntimeError(
        "NVRTC not found; install the nvidia-cuda-nvrtc wheel. Tried:\n  " + "\n  ".join(tried)
    )


def compile_options(arch: str, includes: list[str], source_dir: pathlib.Path) -> list[str]:
    """The NVRTC options of one source for one arch (``"90a"``)."""
    opts = [f"--gpu-architecture=sm_{arch}", *BUILTIN_OPTIONS]
    if os.environ.get("PYGPUKIT_KERNEL_LINEINFO") == "1":
        opts.append("-lineinfo")
    return opts + [f"-I{inc}" for inc in includes] + [f"-I{INCLUDE_DIR}", f"-I{source_dir}"]


def build(
    sources: list[pathlib.Path],
    out: pathlib.Path,
    archs: list[str],
    includes: list[str] | None = None,
    nvrtc: Nvrtc | None = None,
) -> dict[str, Any]:
    """Compile every source for every arch into ``out``; return the manifest it wrote.

    ``includes`` are extra ``-I`` folders (default: the CUDA headers found by
    :mod:`pygpukit._environment`). ``RuntimeError`` with NVRTC's log when a source does not
    compile, or when the archs disagree on a file's entry points or constants.
    """
    nvrtc = nvrtc or find_nvrtc()
    if not archs:
        raise ValueError("build() needs at least one arch, e.g. ['80', '90a']")
    includes = (
        includes if includes is not None else [c.path for c in _environment.include_dirs()[:1]]
    )
    sources = sorted(pathlib.Path(s) for s in sources)
    if out.exists():
        shutil.rmtree(out)
    (out / "src").mkdir(parents=True)
    # Headers next to the sources travel too, so a JIT fallback compiles the same translation unit.
    for header in sorted({h for src in sources for h in src.parent.glob("*.cuh")}):
        shutil.copy2(header, out / "src" / header.name)
    jobs = []
    for src in sources:
        shutil.copy2(src, out / "src" / src.name)
        jobs += [(src, arch, compile_options(arch, includes, src.parent)) for arch in archs]

    def compile_one(job: tuple[pathlib.Path, str, list[str]]) -> cubin.Records:
        src, arch, opts = job
        data = nvrtc.compile(src.read_bytes(), src.name, opts)
        dest = out / f"sm_{arch}" / f"{src.stem}.cubin"
        dest.parent.mkdir(exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        return cubin.records(data)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, jobs))

    kernels: dict[str, Any] = {}
    for (src, arch, _), rec in zip(jobs, results, strict=True):
        first = kernels.setdefault(
            src.stem,
            {
                "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
                "entries": rec.entries,
                "constants": rec.constants,
            },
        )
        if (first["entries"], first["constants"]) != (rec.entries, rec.constants):
            raise RuntimeError(
                f"{src.name}: the entry points or constants for sm_{arch} differ from "
                f"sm_{archs[0]}'s; declare PGK_KERNEL and PGK_CONSTANT for every arch alike"
            )
    manifest = {
        "format": MANIFEST_FORMAT,
        "kernel_abi": KERNEL_ABI_VERSION,
        "nvrtc_version": list(nvrtc.version()),
        "archs": list(archs),
        "options": BUILTIN_OPTIONS,
        "kernels": kernels,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """The command line: compile every source for every arch; return an exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--archs", required=True, help='";"- or ","-separated, e.g. "80;90a"')
    parser.add_argument("--include", action="append", default=None, help="an extra -I folder")
    parser.add_argument("sources", nargs="+", type=pathlib.Path)
    args = parser.parse_args(argv)
    archs = [a.strip() for a in args.archs.replace(",", ";").split(";") if a.strip()]
    start = time.perf_counter()
    try:
        nvrtc = find_nvrtc()
        manifest = build(args.sources, args.out, archs, args.include, nvrtc)
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    total = sum(p.stat().st_size for p in args.out.glob("sm_*/*.cubin"))
    entries = sum(len(k["entries"]) for k in manifest["kernels"].values())
    print(
        f"NVRTC {'.'.join(map(str, nvrtc.version()))}: {len(args.sources)} kernel files x "
        f"{len(archs)} archs, {entries} entry points, {total / 1e6:.2f} MB, "
        f"{time.perf_counter() - start:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

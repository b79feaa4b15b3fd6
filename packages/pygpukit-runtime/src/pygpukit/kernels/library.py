"""A package's compiled kernels: cubins per SM, the sources for a JIT fallback, a manifest.

A :class:`KernelLibrary` is the folder :mod:`pygpukit.kernels.build` wrote (shipped inside
the package's wheel). ``kernel(file, name)`` returns a :class:`pygpukit.Kernel` for one
entry point on the current device: the cubin of the fitting SM when the wheel has one
(the runtime's rule: the exact SM, its ``a`` build first, else the newest lower minor of
the same major), else the shipped source compiled once through ``gp.jit``'s disk cache
with the build's options. Argument types and names come from the manifest, which the
build read back from the compiled cubins.
"""

from __future__ import annotations

import functools
import json
import pathlib
import threading
from typing import Any

from ..backend import select
from ..errors import DeviceNotSupportedError
from ..jit.compile import load_source
from ..jit.kernel import Kernel
from ..jit.signature import Param
from .build import INCLUDE_DIR, KERNEL_ABI_VERSION, MANIFEST_FORMAT

__all__ = ["KernelLibrary"]


class KernelLibrary:
    """The kernels in ``folder`` (``manifest.json``, ``sm_<arch>/*.cubin``, ``src/``).

    ``package`` names the distribution in error messages (what to reinstall). The
    manifest is read on first use, so a library can be created at import time.
    """

    def __init__(self, folder: str | pathlib.Path, package: str = "") -> None:
        self.folder = pathlib.Path(folder)
        self.package = package or str(self.folder)
        self._lock = threading.Lock()
        self._modules: dict[tuple[str, int], Any] = {}
        self._kernels: dict[tuple[str, str, int], Kernel] = {}

    def __repr__(self) -> str:
        return f"KernelLibrary({str(self.folder)!r})"

    @functools.cached_property
    def manifest(self) -> dict[str, Any]:
        """The manifest: archs, NVRTC options, and per kernel file its entries and constants.

        ``ImportError`` (the package's kernels are missing or from an incompatible build)
        with what to reinstall.
        """
        path = self.folder / "manifest.json"
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ImportError(
                f"the kernels of {self.package} are missing or unreadable ({path}): {exc}; "
                "reinstall the package (or rebuild its kernels)"
            ) from exc
        abi, fmt = data.get("kernel_abi"), data.get("format")
        if abi != KERNEL_ABI_VERSION or fmt != MANIFEST_FORMAT:
            raise ImportError(
                f"the kernels in {self.folder} were built with kernel ABI {abi} and manifest "
                f"format {fmt}; this pygpukit-runtime reads ABI {KERNEL_ABI_VERSION}, format "
                f"{MANIFEST_FORMAT}: rebuild or reinstall {self.package}"
            )
        return data

    def _file(self, file: str) -> dict[str, Any]:
        try:
            entry: dict[str, Any] = self.manifest["kernels"][file]
        except KeyError:
            have = ", ".join(sorted(self.manifest["kernels"])) or "none"
            raise KeyError(
                f"{self.package} has no kernel file {file!r}.cu (it has: {have})"
            ) from None
        return entry

    def files(self) -> list[str]:
        """The kernel files (stems of the ``.cu`` sources) this library holds."""
        return sorted(self.manifest["kernels"])

    def entries(self, file: str) -> dict[str, list[str]]:
        """Entry point name -> argument type codes (``ptr``, ``i32``, ``f32``, ...) of ``file``."""
        return {n: list(e["args"]) for n, e in self._file(file)["entries"].items()}

    def constants(self, file: str) -> dict[str, int]:
        """Every ``PGK_CONSTANT`` of ``file``, by name."""
        return dict(self._file(file)["constants"])

    def constant(self, file: str, name: str) -> int:
        """The integer ``PGK_CONSTANT(name, ...)`` of ``kernels/<file>.cu``, from the manifest.

        Works on every backend (no GPU needed). ``KeyError`` naming the constants the file
        exports when ``name`` is not one of them.
        """
        values = self._file(file)["constants"]
        try:
            return int(values[name])
        except KeyError:
            have = ", ".join(sorted(values)) or "none"
            raise KeyError(
                f"{file}.cu exports no constant {name!r} (it has: {have}); "
                f"declare it with PGK_CONSTANT({name}, value)"
            ) from None

    def params(self, file: str, name: str) -> tuple[Param, ...]:
        """The parameters of entry point ``name`` of ``file`` (names, type codes)."""
        entries = self._file(file)["entries"]
        try:
            entry = entries[name]
        except KeyError:
            raise KeyError(
                f"{file}.cu has no entry point {name!r} declared with PGK_KERNEL "
                f"({len(entries)} entry points; see KernelLibrary.entries({file!r}))"
            ) from None
        return tuple(Param(n, c, c) for n, c in zip(entry["names"], entry["args"], strict=True))

    def jit_options(self) -> list[str]:
        """NVRTC options of the JIT fallback: the build's, plus the shipped and runtime headers.

        ``gp.jit``'s cache key covers the headers a source includes with quotes from these
        folders, so a cubin compiled against an older header is not reused after an upgrade.
        """
        return [*self.manifest["options"], f"-I{self.folder / 'src'}", f"-I{INCLUDE_DIR}"]

    def source(self, file: str) -> str:
        """The shipped source of ``file`` (what the JIT fallback compiles)."""
        return (self.folder / "src" / f"{file}.cu").read_text(encoding="utf-8")

    def cubin_arch(self, device: int = 0) -> str | None:
        """The ``sm_<arch>`` folder whose cubins run on ``device``, or None (JIT fallback)."""
        backend = select.backend()
        native = select.native()
        if backend.name != "cuda" or native is None:
            return None
        major, minor = backend.device_info(device)["sm"]
        available = [f"sm_{a}" for a in self.manifest["archs"]]
        folder: str = native.choose_cubin_arch(major, minor, available)
        return folder or None

    def _module(self, file: str, device: int, backend: Any) -> Any:
        key = (file, device)
        module = self._modules.get(key)
        if module is not None:
            return module
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                folder = self.cubin_arch(device)
                cubin = self.folder / str(folder) / f"{file}.cubin"
                if folder is not None and cubin.exists():
                    module = backend.load_module(cubin.read_bytes(), device)
                else:  # a GPU the wheel has no cubin for: compile the shipped source once
                    module = load_source(self.source(file), f"{file}.cu", self.jit_options())
                self._modules[key] = module
        return module

    def kernel(self, file: str, name: str) -> Kernel:
        """Entry point ``name`` of ``kernels/<file>.cu`` on the current device, ready to launch.

        Cached per (file, name, device): after the first call this is a dict lookup.
        ``DeviceNotSupportedError`` on the CPU backend, ``KeyError`` for an unknown file or
        entry point.
        """
        backend = select.backend()
        device = int(backend.get_device())
        key = (file, name, device)
        k = self._kernels.get(key)
        if k is not None:
            return k
        if backend.name != "cuda":
            raise DeviceNotSupportedError(
                f"kernel {name} of {self.package} needs a CUDA GPU; this process runs on the "
                "CPU backend"
            )
        params = self.params(file, name)
        k = Kernel(self._module(file, device, backend).function(name), name, params)
        self._kernels[key] = k
        return k

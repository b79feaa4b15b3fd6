"""The libraries a case runs on: PyGPUkit itself and its peers, PyTorch and CuPy.

Each :class:`Library` adapts one array library to what the suites need:
upload a host array, download a result, synchronize, and a timer per timing
mode. Suites write the operation once per library (often the same expression,
``a + b``) and leave transfers and clocks to the adapter. Peers take part only
on the CUDA backend and only when importable with a visible GPU.
"""

from __future__ import annotations

import gc
import importlib
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from .case import Skip, TimingMode
from .data import storage_dtype
from .timers import EventTimer, HostTimer, Timer, WallTimer

__all__ = [
    "PEER_NAMES",
    "CupyLibrary",
    "Library",
    "PyGPUkitLibrary",
    "TorchLibrary",
    "discover_peers",
    "release_device_memory",
]

#: Host dtypes from ml_dtypes, which torch.from_numpy does not take.
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")

#: Peers in the order their columns appear.
PEER_NAMES = ("torch", "cupy")


class Library(ABC):
    """One array library as the harness and the suites see it."""

    #: ``"pygpukit"``, ``"torch"`` or ``"cupy"``: the column name.
    name: str
    #: The imported module (``pygpukit``, ``torch``, ``cupy``) for the suites' ops.
    module: Any
    #: Whether the arrays live on a CUDA device (else: PyGPUkit's CPU backend).
    on_gpu: bool

    @property
    @abstractmethod
    def version(self) -> str:
        """The library's version string."""

    @abstractmethod
    def upload(self, host: np.ndarray, dtype: str) -> Any:
        """A device array with the values of ``host`` in the benchmark dtype ``dtype``."""

    @abstractmethod
    def download(self, array: Any) -> np.ndarray:
        """The values of a device array (or scalar result) as a host ``ndarray``."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until the device has finished all work queued by this library."""

    @abstractmethod
    def device_timer(self) -> Timer:
        """A timer of GPU time (device events)."""

    def unsupported(self, dtype: str) -> str | None:
        """Why this library cannot hold ``dtype``, or ``None`` when it can."""
        return None

    def require(self, name: str) -> Any:
        """Attribute ``name`` of the module (dotted: ``"GPUArray.__add__"``), else :class:`Skip`."""
        obj = self.module
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise Skip(self._missing(name))
        return obj

    def _missing(self, name: str) -> str:
        return f"{self.name}.{name} does not exist"

    def timer(self, mode: TimingMode) -> Timer:
        """The timer for ``mode`` (see :data:`~pygpukit.benchmark.case.TimingMode`)."""
        if mode == "device":
            return self.device_timer() if self.on_gpu else WallTimer(self.synchronize)
        if mode == "host":
            return HostTimer(self.synchronize)
        return WallTimer(self.synchronize)


class PyGPUkitLibrary(Library):
    """PyGPUkit through its public API only (``import pygpukit as gp``).

    Parts of the API that do not exist yet make the cases that need them
    report ``skipped`` with the missing name, rather than fail.
    """

    name = "pygpukit"

    def __init__(self) -> None:
        self.module = importlib.import_module("pygpukit")
        self.backend = self.backend_name(self.module)
        self.on_gpu = self.backend == "cuda"

    @staticmethod
    def backend_name(gp: Any) -> str:
        """``"cuda"`` or ``"cpu"``: the backend PyGPUkit selected (else ``"unknown"``)."""
        query = getattr(gp, "backend_name", None)
        if query is not None:
            return str(query())
        is_cuda = getattr(gp, "is_cuda_available", None)
        if is_cuda is not None:
            return "cuda" if is_cuda() else "cpu"
        return "unknown"

    @property
    def version(self) -> str:
        """``pygpukit.__version__``."""
        return str(getattr(self.module, "__version__", "unknown"))

    def _missing(self, name: str) -> str:
        return f"gp.{name} is not available yet"

    def upload(self, host: np.ndarray, dtype: str) -> Any:
        """``gp.from_numpy(host)`` (tf32 cases hold float32 arrays)."""
        return self.require("from_numpy")(host)

    def download(self, array: Any) -> np.ndarray:
        """``array.to_numpy()``, or the value itself for host scalars."""
        to_numpy = getattr(array, "to_numpy", None)
        return np.asarray(to_numpy() if to_numpy is not None else array)

    def synchronize(self) -> None:
        """``gp.synchronize()``."""
        self.require("synchronize")()

    def device_timer(self) -> Timer:
        """Events from ``gp.Event(timing=True)``."""
        event = self.require("Event")
        return EventTimer(lambda: event(timing=True), lambda s, e: s.elapsed_time(e))

    def unsupported(self, dtype: str) -> str | None:
        """Dtypes outside ``pygpukit.dtypes.SUPPORTED``."""
        dtypes = getattr(self.module, "dtypes", None)
        if dtypes is None:
            return None
        try:
            dtypes.normalize(storage_dtype(dtype))
        except TypeError:
            return f"PyGPUkit has no {dtype} arrays"
        return None


class TorchLibrary(Library):
    """PyTorch on ``cuda:0`` (TF32 off unless a case turns it on, as PyTorch's default)."""

    name = "torch"
    on_gpu = True

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        self.module = torch
        self.device = torch.device("cuda")

    @property
    def version(self) -> str:
        """``torch.__version__`` with the CUDA version it was built for."""
        return f"{self.module.__version__} (CUDA {self.module.version.cuda})"

    def _dtype(self, dtype: str) -> Any:
        name = "float32" if dtype == "tf32" else dtype
        return getattr(self.module, name)

    def upload(self, host: np.ndarray, dtype: str) -> Any:
        """``torch.from_numpy(host)`` on the GPU; ml_dtypes types go through float32."""
        torch = self.module
        if host.dtype.name in _ML_DTYPES:
            staged = torch.from_numpy(np.ascontiguousarray(host, dtype=np.float32))
            return staged.to(self.device).to(self._dtype(dtype))
        return torch.from_numpy(np.ascontiguousarray(host)).to(self.device)

    def download(self, array: Any) -> np.ndarray:
        """The tensor's values on the host (types NumPy lacks come back as float32)."""
        torch = self.module
        if not isinstance(array, torch.Tensor):
            return np.asarray(array)
        t = array.detach()
        if str(t.dtype).removeprefix("torch.") in _ML_DTYPES:
            t = t.float()
        return t.cpu().numpy()

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``."""
        self.module.cuda.synchronize()

    def device_timer(self) -> Timer:
        """Events from ``torch.cuda.Event(enable_timing=True)``."""
        event = self.module.cuda.Event
        return EventTimer(lambda: event(enable_timing=True), lambda s, e: s.elapsed_time(e))

    def unsupported(self, dtype: str) -> str | None:
        """Dtypes without a torch equivalent."""
        name = "float32" if dtype == "tf32" else dtype
        return None if hasattr(self.module, name) else f"torch has no {dtype}"


class CupyLibrary(Library):
    """CuPy on the current device."""

    name = "cupy"
    on_gpu = True

    def __init__(self) -> None:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("CuPy sees no CUDA device")
        self.module = cupy

    @property
    def version(self) -> str:
        """``cupy.__version__``."""
        return str(self.module.__version__)

    def upload(self, host: np.ndarray, dtype: str) -> Any:
        """``cupy.asarray(host)``."""
        return self.module.asarray(host)

    def download(self, array: Any) -> np.ndarray:
        """``cupy.asnumpy(array)``."""
        return np.asarray(self.module.asnumpy(array))

    def synchronize(self) -> None:
        """``cudaDeviceSynchronize``."""
        self.module.cuda.runtime.deviceSynchronize()

    def device_timer(self) -> Timer:
        """Events from ``cupy.cuda.Event()``."""
        cuda = self.module.cuda
        return EventTimer(cuda.Event, cuda.get_elapsed_time)

    def unsupported(self, dtype: str) -> str | None:
        """CuPy has no bfloat16 or float8 arrays."""
        if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            return f"CuPy has no {dtype}"
        return None


_PEER_CLASSES: dict[str, type[Library]] = {"torch": TorchLibrary, "cupy": CupyLibrary}


def discover_peers(wanted: tuple[str, ...]) -> tuple[list[Library], dict[str, str]]:
    """The peers among ``wanted`` that can run here, and why each other one cannot."""
    found: list[Library] = []
    missing: dict[str, str] = {}
    for name in wanted:
        try:
            found.append(_PEER_CLASSES[name]())
        except ImportError as exc:
            missing[name] = f"not installed ({exc.name or exc})"
        except Exception as exc:  # a peer that cannot start is reported, never fatal
            missing[name] = f"unavailable: {exc}"
    return found, missing


def release_device_memory() -> None:
    """Give the memory of dropped models back to the device, ours and PyTorch's caches alike.

    Model suites call it between libraries: a 16 GB model that one library dropped but still
    caches would otherwise leave the next library short of memory.
    """
    import pygpukit as gp

    gc.collect()
    if gp.backend_name() == "cuda":
        gp.synchronize()
        gp.memory.empty_cache()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

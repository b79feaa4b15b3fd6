"""PyGPUkit: a small, fast GPU runtime for Python.

``import pygpukit as gp`` is cheap: the backend (CUDA, or the CPU simulation
backend when no usable GPU is present) is chosen on first use, not at import.
Set ``PYGPUKIT_BACKEND=cpu`` to force the CPU backend.
"""

# Lets pygpukit.ops / .llm / .asr / .tts from their own distributions share this
# package when they live in other folders (development checkouts).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from .array import (
    GPUArray,
    broadcast_to,
    expand_dims,
    reshape,
    squeeze,
    transpose,
)
from .creation import (
    arange,
    asarray,
    asnumpy,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    to_numpy,
    zeros,
    zeros_like,
)
from .device import (
    Device,
    backend_name,
    device_count,
    get_device,
    get_device_info,
    is_cuda_available,
    set_device,
    synchronize,
)
from .dtypes import (
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from .errors import (
    AdmissionError,
    BackendFallbackWarning,
    CompileError,
    CudaError,
    DeviceNotSupportedError,
    LibraryNotFoundError,
    OutOfMemoryError,
    PyGPUkitError,
)
from .graph import Graph, graph_capture
from .interop import from_dlpack
from .jit import (
    Kernel,
    Module,
    get_jit_cache_dir,
    get_nvrtc_path,
    get_nvrtc_version,
    is_nvrtc_available,
    jit,
    jit_module,
    set_jit_cache_dir,
)
from .linalg import matmul
from .reductions import (
    all,
    any,
    argmax,
    argmin,
    cumsum,
    log_softmax,
    max,
    mean,
    min,
    prod,
    softmax,
    std,
    sum,
    var,
)
from .shape_ops import (
    array_split,
    concatenate,
    flip,
    repeat,
    split,
    stack,
    take,
    tile,
    tril,
    triu,
)
from .stream import Event, Stream, current_stream

if TYPE_CHECKING:
    from . import benchmark, memory, scheduler

# Sub-modules loaded on first use, so `import pygpukit` stays cheap.
_LAZY_SUBMODULES = ("benchmark", "memory", "scheduler")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'pygpukit' has no attribute {name!r}")


__all__ = [
    "AdmissionError",
    "BackendFallbackWarning",
    "CompileError",
    "CudaError",
    "Device",
    "DeviceNotSupportedError",
    "Event",
    "GPUArray",
    "Graph",
    "Kernel",
    "LibraryNotFoundError",
    "Module",
    "OutOfMemoryError",
    "PyGPUkitError",
    "Stream",
    "__version__",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "array_split",
    "asarray",
    "asnumpy",
    "backend_name",
    "benchmark",
    "bfloat16",
    "bool_",
    "broadcast_to",
    "concatenate",
    "cumsum",
    "current_stream",
    "device_count",
    "empty",
    "empty_like",
    "expand_dims",
    "eye",
    "flip",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "get_device",
    "get_device_info",
    "get_jit_cache_dir",
    "get_nvrtc_path",
    "get_nvrtc_version",
    "graph_capture",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_cuda_available",
    "is_nvrtc_available",
    "jit",
    "jit_module",
    "linspace",
    "log_softmax",
    "matmul",
    "max",
    "mean",
    "memory",
    "min",
    "ones",
    "ones_like",
    "prod",
    "repeat",
    "reshape",
    "scheduler",
    "set_device",
    "set_jit_cache_dir",
    "softmax",
    "split",
    "squeeze",
    "stack",
    "std",
    "sum",
    "synchronize",
    "take",
    "tile",
    "to_numpy",
    "transpose",
    "tril",
    "triu",
    "uint8",
    "var",
    "zeros",
    "zeros_like",
]

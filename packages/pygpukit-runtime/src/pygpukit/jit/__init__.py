"""Run-time CUDA kernels: ``gp.jit`` / ``gp.jit_module`` compile with NVRTC.

They return callable :class:`Kernel` objects.

::

    kernel = gp.jit(src, "scale")
    kernel(x, factor=0.5, n=x.size)          # named or positional arguments

The kernel's parameters are parsed once from its source (a small regex-based C
declaration parser) into the type codes ``_native`` packs arguments by:
``ptr i8 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64 bool tmap``. Pointers take a
GPUArray (or an int device address); scalars take Python or NumPy numbers; a
``const __grid_constant__ CUtensorMap`` parameter (``tmap``, Hopper's TMA) takes a
:class:`TensorMap`.

Default launch (when ``grid`` is not given): 1-D, ``block = 256`` threads (fewer
when the kernel's ``max_threads_per_block`` is lower), ``grid = ceil(n / block)``
where ``n`` is the argument of the parameter named ``n``, ``size`` or ``numel``,
else the size of the largest GPUArray argument. ``n == 0`` launches nothing.

Compiled cubins are cached (:mod:`pygpukit._jit_cache`): the second process
that compiles the same source for the same GPU loads it from disk.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backend.select import backend as _backend
from .compile import get_jit_cache_dir, load, require_gpu, reset_jit_cache_dir, set_jit_cache_dir
from .kernel import Kernel, Module, TensorMap
from .nvrtc import get_nvrtc_path, get_nvrtc_version, is_nvrtc_available, nvrtc_status
from .signature import Param, parse_signature, signature

__all__ = [
    "Kernel",
    "Module",
    "Param",
    "TensorMap",
    "get_jit_cache_dir",
    "get_nvrtc_path",
    "get_nvrtc_version",
    "is_nvrtc_available",
    "jit",
    "jit_module",
    "nvrtc_status",
    "parse_signature",
    "reset_jit_cache_dir",
    "set_jit_cache_dir",
]


def jit(source: str, func: str, options: Sequence[str] = ()) -> Kernel:
    """Compile the ``extern "C" __global__`` function ``func`` of ``source`` into a Kernel.

    ``options`` are extra NVRTC flags (``"-use_fast_math"``, ``"-DN=4"``); the
    target is the current device's exact architecture (``sm_90a`` on Hopper).
    Raises ``DeviceNotSupportedError`` on the CPU backend, ``LibraryNotFoundError``
    without NVRTC, ``CompileError`` (with NVRTC's log and the failing line) for
    bad source, ``ValueError`` when ``func`` is not a kernel of ``source``.
    """
    require_gpu(_backend())
    module, _ = load(source, f"{func}.cu", (), options)  # NVRTC reports broken source first
    params = signature(source, func, None)
    return Kernel(module.function(func), func, params)


def jit_module(
    source: str,
    names: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
    options: Sequence[str] = (),
) -> Module:
    """Compile several kernels of one source in one NVRTC call.

    ``names`` are ``extern "C"`` kernels; ``name_expressions`` are C++ (template)
    kernels such as ``"scale<float>"``, instantiated and looked up through
    NVRTC's lowered names. Index the result by either.
    """
    require_gpu(_backend())
    if isinstance(names, str) or isinstance(name_expressions, str):
        raise TypeError("names and name_expressions are sequences of strings, not one string")
    if not names and not name_expressions:
        raise ValueError("jit_module() needs at least one kernel name or name expression")
    module, lowered = load(source, "module.cu", list(name_expressions), options)
    signatures = {n: signature(source, n, None) for n in names}
    for expr in name_expressions:
        signatures[expr] = signature(source, expr.split("<")[0].strip(), expr)
    kernels = {}
    for key, params in signatures.items():
        symbol = lowered.get(key, key)
        kernels[key] = Kernel(module.function(symbol), key, params)
    return Module(kernels)

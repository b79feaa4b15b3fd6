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

import functools
import math
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _jit_cache
from ._environment import KERNEL_ABI_VERSION
from .backend.select import backend as _backend
from .errors import CompileError, DeviceNotSupportedError, LibraryNotFoundError

__all__ = [
    "KERNEL_ABI_VERSION",
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
    "parse_signature",
    "set_jit_cache_dir",
]

DEFAULT_BLOCK = 256
SIZE_PARAM_NAMES = ("n", "size", "numel")

# --- NVRTC discovery -----------------------------------------------------------------------

_nvrtc_lock = threading.Lock()
_nvrtc_status: dict[str, Any] | None = None


def nvrtc_status() -> dict[str, Any]:
    """Locate and load NVRTC once; ``{"loaded", "path", "source", "tried", "version", "error"}``."""
    global _nvrtc_status
    with _nvrtc_lock:
        if _nvrtc_status is not None:
            return _nvrtc_status
        from ._environment import library_candidates
        from .backend.select import native, native_error

        status: dict[str, Any] = {
            "loaded": False,
            "path": None,
            "source": None,
            "tried": [],
            "version": None,
            "error": None,
        }
        mod = native()
        candidates = library_candidates("nvrtc")
        if mod is None:
            status["error"] = f"pygpukit._native did not load ({native_error()})"
            status["tried"] = [[c.path, "not tried: no native module"] for c in candidates]
        else:
            try:
                info = mod.load_nvrtc([c.path for c in candidates])
                status["tried"] = [list(t) for t in info.get("tried", [])]
                if info["loaded"]:
                    status["loaded"] = True
                    status["path"] = info["path"]
                    status["version"] = tuple(mod.nvrtc_version())
                    status["source"] = next(
                        (c.source for c in candidates if c.path == info["path"]), "system"
                    )
            except Exception as exc:  # an incomplete native build is reported, not raised
                status["error"] = f"{type(exc).__name__}: {exc}"
        _nvrtc_status = status
        return status


def is_nvrtc_available() -> bool:
    """Return whether custom kernels can be compiled and run here (NVRTC and a CUDA GPU)."""
    return bool(_backend().name == "cuda" and nvrtc_status()["loaded"])


def get_nvrtc_path() -> str | None:
    """Return the path NVRTC was loaded from, or None."""
    path = nvrtc_status()["path"]
    return None if path is None else str(path)


def get_nvrtc_version() -> tuple[int, int] | None:
    """Return NVRTC's ``(major, minor)`` version, or None when it is not available."""
    version = nvrtc_status()["version"]
    return None if version is None else (int(version[0]), int(version[1]))


def set_jit_cache_dir(path: str | None) -> None:
    """Cache compiled kernels in ``path``; ``None`` keeps them in memory only."""
    _jit_cache.set_cache_dir(path)


def reset_jit_cache_dir() -> None:
    """Undo :func:`set_jit_cache_dir`: use ``PYGPUKIT_CACHE_DIR`` or the platform cache folder."""
    _jit_cache.reset_cache_dir()


def get_jit_cache_dir() -> str | None:
    """Return the kernel cache folder (None in memory-only mode)."""
    folder = _jit_cache.cache_dir()
    return None if folder is None else str(folder)


# --- signature parsing -----------------------------------------------------------------------

_TYPE_CODES = {
    "float": "f32",
    "double": "f64",
    "__half": "f16",
    "half": "f16",
    "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16",
    "bool": "bool",
    "char": "i8",
    "signed char": "i8",
    "int8_t": "i8",
    "unsigned char": "u8",
    "uint8_t": "u8",
    "short": "i16",
    "short int": "i16",
    "signed short": "i16",
    "signed short int": "i16",
    "int16_t": "i16",
    "unsigned short": "u16",
    "unsigned short int": "u16",
    "uint16_t": "u16",
    "int": "i32",
    "signed": "i32",
    "signed int": "i32",
    "int32_t": "i32",
    "unsigned": "u32",
    "unsigned int": "u32",
    "uint32_t": "u32",
    "long": "i64",
    "long int": "i64",
    "signed long": "i64",
    "long long": "i64",
    "long long int": "i64",
    "signed long long": "i64",
    "int64_t": "i64",
    "ptrdiff_t": "i64",
    "ssize_t": "i64",
    "unsigned long": "u64",
    "unsigned long int": "u64",
    "unsigned long long": "u64",
    "unsigned long long int": "u64",
    "uint64_t": "u64",
    "size_t": "u64",
    "CUtensorMap": "tmap",
}
_TYPE_WORDS = {w for key in _TYPE_CODES for w in key.split()}
_QUALIFIERS = {
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "struct",
    "__grid_constant__",
}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TOKENS = re.compile(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*|\*|&|\[[^\]]*\]")
_TEMPLATE = re.compile(r"template\s*<(?P<params>[^{;]*)>\s*$", re.S)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, its C type as written, and its ``_native`` type code."""

    name: str
    ctype: str
    code: str


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _matching_paren(text: str, open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses in the kernel declaration")


def _find_kernel(source: str, func: str) -> tuple[str, str]:
    """Return ``(parameter list text, template parameter text)`` of ``__global__`` ``func``."""
    text = _COMMENTS.sub(" ", source)
    for match in re.finditer(rf"\b{re.escape(func)}\s*\(", text):
        start = max(text.rfind(";", 0, match.start()), text.rfind("}", 0, match.start()))
        head = text[start + 1 : match.start()]
        if "__global__" not in head:
            continue
        open_index = match.end() - 1
        close = _matching_paren(text, open_index)
        template = _TEMPLATE.search(head[: head.find("__global__")].rstrip() + "")
        tparams = template.group("params") if template else ""
        return text[open_index + 1 : close], tparams
    raise ValueError(
        f"kernel {func!r} not found in the source: expected a declaration like "
        f'extern "C" __global__ void {func}(...)'
    )


def _template_bindings(tparams: str, name_expression: str | None) -> dict[str, str]:
    if not tparams or name_expression is None or "<" not in name_expression:
        return {}
    names = []
    for p in _split_top_level(tparams):
        words = p.split("=")[0].split()
        if words:
            names.append(words[-1])
    args = _split_top_level(
        name_expression[name_expression.index("<") + 1 : name_expression.rindex(">")]
    )
    return dict(zip(names, args, strict=False))


def _parse_param(text: str, index: int, bindings: dict[str, str]) -> Param:
    decl = text.split("=")[0].strip()
    tokens = [re.sub(r"\s+", "", t) for t in _TOKENS.findall(decl)]
    words = [t for t in tokens if t[0].isalpha() or t[0] == "_"]
    name = f"arg{index}"
    if len(words) >= 2 and words[-1] not in _TYPE_WORDS and words[-1] not in _QUALIFIERS:
        name = words[-1]
        tokens = (
            tokens[: len(tokens) - 1 - tokens[::-1].index(name)]
            + tokens[len(tokens) - tokens[::-1].index(name) :]
        )
    type_tokens = []
    for t in tokens:
        if t in _QUALIFIERS:
            continue
        t = bindings.get(t, t)
        if t.startswith("std::"):
            t = t[5:]
        type_tokens.append(t)
    ctype = " ".join(type_tokens)
    if "&" in type_tokens:
        raise ValueError(
            f"kernel parameter {name!r} is a reference ({decl!r}); "
            "kernels take pointers and scalars"
        )
    if any(t == "*" or t.startswith("[") for t in type_tokens) or ctype.endswith("*"):
        return Param(name, ctype, "ptr")
    code = _TYPE_CODES.get(" ".join(t for t in type_tokens))
    if code == "tmap" and not ("__grid_constant__" in tokens and "const" in tokens):
        # TMA reads the descriptor where the launch put it (parameter space); a plain by-value
        # parameter may be copied to local memory first, where TMA cannot use it.
        raise ValueError(
            f"kernel parameter {name!r} is a CUtensorMap; declare it "
            f"`const __grid_constant__ CUtensorMap {name}`"
        )
    if code is None:
        raise ValueError(
            f"kernel parameter {name!r} has type {ctype!r}, which gp.jit cannot pass; "
            "use a pointer or one of: "
            + ", ".join(sorted({k for k in _TYPE_CODES if " " not in k}))
        )
    return Param(name, ctype, code)


def parse_signature(source: str, func: str, name_expression: str | None = None) -> list[Param]:
    """Parse the parameters of ``__global__`` function ``func`` in ``source``.

    ``name_expression`` (``"scale<float>"``) binds the template parameters of a
    template kernel. ``ValueError`` when the kernel is missing or a parameter
    type cannot be passed.
    """
    params_text, tparams = _find_kernel(source, func)
    bindings = _template_bindings(tparams, name_expression)
    parts = _split_top_level(params_text)
    if parts == ["void"]:
        return []
    return [_parse_param(p, i, bindings) for i, p in enumerate(parts)]


# --- kernels ------------------------------------------------------------------------------

_INT_CODES = {"i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"}
_INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1),
    "u8": (0, 2**8 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "u16": (0, 2**16 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u64": (0, 2**64 - 1),
}


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or int(d) != d or d < 1 for d in dims):
        raise ValueError(f"{what} must be a positive int or 1-3 positive ints, got {value!r}")
    padded = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    return padded  # type: ignore[return-value]


class TensorMap:
    """A TMA descriptor (``CUtensorMap``) of a device array, for Hopper and later kernels.

    Pass it to a kernel parameter declared ``const __grid_constant__ CUtensorMap name``;
    the kernel moves ``box``-shaped tiles between the array and shared memory with
    ``cp.async.bulk.tensor`` (one instruction per tile, completion on an mbarrier).

    ``box`` is the tile in elements per dimension, outermost first like ``array.shape``
    (at most 256 each); reads of a box that hangs over the array's edge are zero-filled.
    ``swizzle`` (0, 32, 64 or 128 bytes) lays rows out in shared memory in the pattern
    wgmma's swizzled operand modes read; the box's innermost extent must fit in it.
    The array's innermost dimension must be contiguous and its other strides multiples
    of 16 bytes; views (``reshape``, slices) describe other layouts of the same memory.
    The map holds the array's address, so the array cannot be evictable. Raises
    ``ValueError`` for a layout TMA cannot describe (before any driver call),
    ``DeviceNotSupportedError`` on the CPU backend.

    The map keeps the array alive, and a launch with it orders the array's memory
    after the kernel like a pointer argument does. Encoding is a host-side driver call:
    build maps once per array where a loop launches many times.

    NVRTC sources have no ``cuda.h``: declare the type yourself as
    ``struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };``. TMA needs a
    128-byte aligned shared-memory destination; for a swizzled box to land in the
    layout wgmma's swizzled modes read, align it to the pattern's repeat (1024 bytes
    for the 128-byte swizzle).
    """

    __slots__ = ("_impl", "array", "box", "swizzle")

    def __init__(self, array: Any, box: Sequence[int], swizzle: int = 0) -> None:
        from .array import GPUArray

        if not isinstance(array, GPUArray):
            raise TypeError(f"TensorMap needs a GPUArray, got {type(array).__name__}")
        b = _backend()
        _require_gpu(b)
        self.box = tuple(int(x) for x in box)
        self.swizzle = int(swizzle)
        self._impl = b.tensor_map(array._impl, self.box, self.swizzle)
        self.array = array

    def to_bytes(self) -> bytes:
        """The 128 encoded bytes, as the kernel receives them."""
        return bytes(self._impl.to_bytes())

    def __repr__(self) -> str:
        return (
            f"TensorMap(shape={tuple(self.array.shape)}, dtype={self.array.dtype}, "
            f"box={self.box}, swizzle={self.swizzle})"
        )


class Kernel:
    """A compiled kernel; call it with the kernel's arguments (positional or by name).

    Keyword-only launch options: ``grid``, ``block`` (an int or up to 3 ints),
    ``shared_mem`` (dynamic shared memory bytes), ``stream`` (a ``gp.Stream``).
    """

    __slots__ = ("_default_block", "_function", "_index", "_sizes", "name", "params")

    def __init__(self, function: Any, name: str, params: Sequence[Param]) -> None:
        self._function = function
        self.name = name
        self.params = tuple(params)
        self._index = {p.name: i for i, p in enumerate(self.params)}
        self._sizes = [i for i, p in enumerate(self.params) if p.name in SIZE_PARAM_NAMES]
        function.set_signature([p.code for p in self.params])
        max_threads = int(self.attributes().get("max_threads_per_block", DEFAULT_BLOCK))
        self._default_block = max(1, min(DEFAULT_BLOCK, max_threads))

    def attributes(self) -> dict[str, int]:
        """Function attributes: ``num_regs``, ``max_threads_per_block``, ``shared_size_bytes``..."""
        return dict(self._function.attributes())

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory.

        Launches above 48 KiB of dynamic shared memory fail until this is set (the
        driver's opt-in, ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``); the
        limit per block is the device's ``shared_memory_per_block_optin``.
        """
        if int(nbytes) < 0:
            raise ValueError(f"{self.name}: dynamic shared memory must be >= 0, got {nbytes}")
        self._function.set_max_dynamic_shared_memory(int(nbytes))

    @property
    def num_regs(self) -> int:
        """Registers per thread."""
        return int(self.attributes()["num_regs"])

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can be launched with."""
        return int(self.attributes()["max_threads_per_block"])

    @property
    def shared_size_bytes(self) -> int:
        """Static shared memory per block."""
        return int(self.attributes()["shared_size_bytes"])

    def signature(self) -> str:
        """Return the parsed signature, e.g. ``scale(float* x, float factor, int n)``."""
        return f"{self.name}(" + ", ".join(f"{p.ctype} {p.name}" for p in self.params) + ")"

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(self.params)
        if not kwargs and len(args) == n:
            return args
        if len(args) > n:
            raise TypeError(f"{self.signature()} takes {n} argument(s) but {len(args)} were given")
        values: list[Any] = list(args) + [_MISSING] * (n - len(args))
        for key, value in kwargs.items():
            i = self._index.get(key)
            if i is None:
                raise TypeError(f"{self.signature()} has no parameter named {key!r}")
            if values[i] is not _MISSING:
                raise TypeError(f"{self.signature()} got parameter {key!r} twice")
            values[i] = value
        missing = [self.params[i].name for i, v in enumerate(values) if v is _MISSING]
        if missing:
            raise TypeError(f"{self.signature()} is missing argument(s) for: {', '.join(missing)}")
        return tuple(values)

    def check_arguments(self, values: Sequence[Any]) -> None:
        """Raise ``TypeError`` naming the first argument that does not fit its parameter."""
        from .array import GPUArray

        for p, v in zip(self.params, values, strict=True):
            ok: bool
            if p.code == "ptr":
                ok = isinstance(v, GPUArray) or (isinstance(v, int) and not isinstance(v, bool))
                want = "a GPUArray (or an int device address)"
            elif p.code == "bool":
                ok = isinstance(v, (bool, np.bool_))
                want = "a bool"
            elif p.code == "tmap":
                ok = isinstance(v, TensorMap)
                want = "a gp.TensorMap"
            elif p.code in _INT_CODES:
                ok = isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                lo, hi = _INT_RANGES[p.code]
                ok = ok and lo <= int(v) <= hi
                want = f"an int in [{lo}, {hi}]"
            else:
                ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
                    v, (bool, np.bool_)
                )
                want = "a real number"
            if not ok:
                raise TypeError(
                    f"argument for parameter {p.name!r} ({p.ctype}) of {self.name} must be "
                    f"{want}, got {type(v).__name__} {v!r}"
                )

    def launch_config(
        self, values: Sequence[Any], grid: Any, block: Any
    ) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
        """Return ``(grid, block)`` for a launch, or None when the default grid is empty."""
        block3 = (self._default_block, 1, 1) if block is None else _dim3(block, "block")
        if grid is not None:
            return _dim3(grid, "grid"), block3
        n = None
        for i in self._sizes:
            n = int(values[i])
            break
        if n is None:
            from .array import GPUArray

            sizes = [v.size for v in values if isinstance(v, GPUArray)]
            if not sizes:
                raise TypeError(
                    f"{self.name}: cannot choose a default launch (no parameter named "
                    f"{'/'.join(SIZE_PARAM_NAMES)} and no array argument); pass grid= and block="
                )
            n = max(sizes)
        if n <= 0:
            return None
        return (math.ceil(n / block3[0]), 1, 1), block3

    def __call__(
        self,
        *args: Any,
        grid: Any = None,
        block: Any = None,
        shared_mem: int = 0,
        stream: Any = None,
        **kwargs: Any,
    ) -> None:
        """Launch on ``stream`` (the current stream by default); does not wait."""
        values = self._bind(args, kwargs)
        config = self.launch_config(values, grid, block)
        if config is None:
            return
        stream_impl = _backend().current_stream() if stream is None else stream._impl
        try:
            self._function.launch(config[0], config[1], int(shared_mem), stream_impl, values)
        except TypeError:
            self.check_arguments(values)  # a clearer message naming the parameter
            raise

    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Any = None,
    ) -> None:
        """Launch with an explicit grid and block and the arguments in declaration order.

        The lean form of calling the kernel, for library code launching the same kernel
        many times: no binding by name, no default grid. Arguments are still type-checked
        as they are packed; a mismatch raises ``TypeError`` naming the parameter, before
        anything is enqueued.
        """
        stream_impl = _backend().current_stream() if stream is None else stream._impl
        try:
            self._function.launch(grid, block, shared_mem, stream_impl, args)
        except TypeError:
            if len(args) != len(self.params):
                raise TypeError(
                    f"{self.name} takes {len(self.params)} arguments, got {len(args)}"
                ) from None
            self.check_arguments(args)
            raise

    def __repr__(self) -> str:
        return f"Kernel({self.signature()})"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


class Module:
    """Several kernels compiled from one source; ``module["name"]`` or ``module.name``."""

    __slots__ = ("_kernels",)

    def __init__(self, kernels: dict[str, Kernel]) -> None:
        self._kernels = kernels

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(
                f"no kernel {name!r} in this module; it has {', '.join(self._kernels)}"
            ) from None

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._kernels[name]
        except KeyError:
            raise AttributeError(f"no kernel {name!r} in this module") from None

    def names(self) -> list[str]:
        """Return the kernel names (and name expressions) this module holds."""
        return list(self._kernels)


# --- compile and load -----------------------------------------------------------------------

_modules: dict[tuple[str, int], Any] = {}
# (source, program, name expressions, options, device) -> (module, lowered names) of this process.
_loaded: dict[tuple[Any, ...], tuple[Any, dict[str, str]]] = {}
_modules_lock = threading.Lock()


def _require_gpu(b: Any) -> None:
    if b.name != "cuda":
        raise DeviceNotSupportedError(
            "Custom CUDA kernels (gp.jit) need a CUDA GPU (SM 80 or newer); this process runs "
            "on the CPU simulation backend. Run `python -m pygpukit info` to see why."
        )


def _require_nvrtc() -> tuple[int, int]:
    status = nvrtc_status()
    if not status["loaded"]:
        tried = [(str(t[0]), str(t[1])) for t in status["tried"]]
        if status["error"]:
            tried.append(("pygpukit._native", status["error"]))
        raise LibraryNotFoundError("nvrtc", tried)
    return status["version"]


@functools.cache
def _include_flags() -> tuple[str, ...]:
    """``-I`` flags for the CUDA headers, searched once per process (a file-system scan)."""
    from ._environment import include_dirs

    return tuple(f"-I{c.path}" for c in include_dirs())


def _options(b: Any, device: int, options: Iterable[str]) -> list[str]:
    opts = [str(o) for o in options]
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.append(f"--gpu-architecture={b.arch(device)}")
    opts.extend(_include_flags())
    return opts


@functools.lru_cache(maxsize=256)
def _signature(source: str, func: str, name_expression: str | None) -> tuple[Param, ...]:
    """parse_signature, once per (source, kernel): gp.jit of a known kernel skips the parser."""
    return tuple(parse_signature(source, func, name_expression))


def _load(
    source: str, program: str, name_expressions: Sequence[str], options: Iterable[str]
) -> tuple[Any, dict[str, str]]:
    """Compile (or fetch from the cache) and load on the current device."""
    b = _backend()
    _require_gpu(b)
    device = int(b.get_device())
    # Loaded before in this process: no hashing, no disk, no option building.
    call = (source, program, tuple(name_expressions), tuple(options), device)
    hit = _loaded.get(call)
    if hit is not None:
        return hit
    version = _require_nvrtc()
    opts = _options(b, device, options)
    key = _jit_cache.cache_key(source, name_expressions, opts, b.arch(device), version)
    entry = _jit_cache.load(key)
    if entry is None:
        try:
            cubin, _log, lowered = b.compile(source, program, opts, list(name_expressions))
        except CompileError as exc:
            raise CompileError(exc.log, source, program) from None
        entry = _jit_cache.CacheEntry(bytes(cubin), dict(lowered))
        _jit_cache.store(key, entry)
    with _modules_lock:
        module = _modules.get((key, device))
        if module is None:
            module = b.load_module(entry.cubin, device)
            _modules[(key, device)] = module
        _loaded[call] = (module, entry.lowered)
    return module, entry.lowered


def jit(source: str, func: str, options: Sequence[str] = ()) -> Kernel:
    """Compile the ``extern "C" __global__`` function ``func`` of ``source`` into a Kernel.

    ``options`` are extra NVRTC flags (``"-use_fast_math"``, ``"-DN=4"``); the
    target is the current device's exact architecture (``sm_90a`` on Hopper).
    Raises ``DeviceNotSupportedError`` on the CPU backend, ``LibraryNotFoundError``
    without NVRTC, ``CompileError`` (with NVRTC's log and the failing line) for
    bad source, ``ValueError`` when ``func`` is not a kernel of ``source``.
    """
    _require_gpu(_backend())
    module, _ = _load(source, f"{func}.cu", (), options)  # NVRTC reports broken source first
    params = _signature(source, func, None)
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
    _require_gpu(_backend())
    if isinstance(names, str) or isinstance(name_expressions, str):
        raise TypeError("names and name_expressions are sequences of strings, not one string")
    if not names and not name_expressions:
        raise ValueError("jit_module() needs at least one kernel name or name expression")
    module, lowered = _load(source, "module.cu", list(name_expressions), options)
    signatures = {n: _signature(source, n, None) for n in names}
    for expr in name_expressions:
        signatures[expr] = _signature(source, expr.split("<")[0].strip(), expr)
    kernels = {}
    for key, params in signatures.items():
        symbol = lowered.get(key, key)
        kernels[key] = Kernel(module.function(symbol), key, params)
    return Module(kernels)

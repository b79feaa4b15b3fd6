"""Every ``PYGPUKIT_*`` environment variable: one registry, validated readers.

Each variable is registered once with its kind, allowed values, default and what it
does (:func:`register`); :func:`variables` lists them all (``docs/errors.md`` has the
table). Code reads a variable only through a reader of its kind: :func:`flag`,
:func:`choice`, :func:`size`, :func:`integer`, :func:`path`, :func:`items` or
:func:`text`. A reader validates the value the first time it sees it and caches the
result, so a hot path pays one dictionary lookup; setting the variable to another
value later (a benchmark switching kernels, a test) is seen and validated anew.

A value that is not allowed is never ignored silently. Either the reader warns once
(:class:`~pygpukit.errors.EnvironmentVariableWarning`, pointed at the caller's line,
naming the variable and what it accepts) and uses the default, or, for a variable
registered with ``on_invalid="raise"`` (one where falling back would silently do
something else than asked, like forcing a backend), it raises
:class:`~pygpukit.errors.EnvironmentVariableError`. The runtime validates every
registered variable when it picks its backend (:func:`validate_all`), on every
backend, including those read by native code (``PYGPUKIT_UPLOAD_KERNEL``).

Other packages register their own knobs the same way::

    from pygpukit import env

    env.register("PYGPUKIT_EXAMPLE_KERNEL", "choice", allowed=("auto", "a", "b"), default="auto",
                 description="Which kernel my op runs.", package="pygpukit-myops")
    kernel = env.choice("PYGPUKIT_EXAMPLE_KERNEL")

Standard library only: imports nothing else of PyGPUkit but its error types.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._caller import user_stacklevel
from .errors import EnvironmentVariableError, EnvironmentVariableWarning

__all__ = [
    "Variable",
    "choice",
    "clear_cache",
    "describe_environment",
    "flag",
    "get",
    "integer",
    "is_set",
    "items",
    "path",
    "register",
    "size",
    "text",
    "validate_all",
    "variable",
    "variables",
]

Kind = Literal["flag", "choice", "size", "integer", "path", "items", "text"]
KINDS: tuple[str, ...] = ("flag", "choice", "size", "integer", "path", "items", "text")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

# Binary and decimal units of sizes, as gp.memory.set_limit and PYGPUKIT_MEMORY_LIMIT read them.
_UNITS = {
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tib": 1024**4,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


class _Invalid(Exception):
    """A value a parser rejects; the message says what is wrong with it."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: what it accepts, its default and what it does.

    ``kind`` is one of ``flag`` (``1/0``, ``true/false``, ``yes/no``, ``on/off``),
    ``choice`` (one of ``allowed``, case-insensitive), ``size`` (bytes, or a size with a
    unit like ``8GiB``; also a fraction like ``0.5`` when ``fraction`` is true),
    ``integer`` (within ``minimum``/``maximum``), ``path``, ``items`` (a comma-separated
    list) or ``text``. ``default`` is the value used when it is unset or empty (for
    ``path``, empty has a meaning of its own: see :func:`path`). ``read`` says when it is
    read (``"first use"``, ``"each call"``, ``"build"``, ...), ``package`` which
    distribution owns it. ``on_invalid`` is ``"warn"`` (warn once, use the default) or
    ``"raise"``. ``reported_natively``: native code reads it and reports a bad value
    itself, so :func:`validate_all` leaves it out (one warning, not two).
    """

    name: str
    kind: str
    description: str
    default: Any = None
    allowed: tuple[str, ...] = ()
    read: str = "first use"
    package: str = "pygpukit-runtime"
    on_invalid: str = "warn"
    fraction: bool = False
    reported_natively: bool = False
    minimum: int | None = None
    maximum: int | None = None
    accepts: str = ""
    check: Callable[[str], None] | None = field(default=None, compare=False)

    def allowed_text(self) -> str:
        """What the variable accepts, in words (used in messages and docs)."""
        if self.accepts:
            return self.accepts
        if self.kind == "flag":
            return "1/true/yes/on or 0/false/no/off"
        if self.kind == "choice":
            return ", ".join(self.allowed)
        if self.kind == "size":
            forms = "bytes (1073741824) or a size with a unit (8GiB, 512MiB, 2GB)"
            return forms + (
                " or a fraction of device memory in (0, 1] (0.5)" if self.fraction else ""
            )
        if self.kind == "integer":
            low = "" if self.minimum is None else f" >= {self.minimum}"
            high = "" if self.maximum is None else f" <= {self.maximum}"
            return f"an integer{low}{high and (' and' if low else '') + high}"
        if self.kind == "items":
            return "a comma-separated list" + (
                f" of {', '.join(self.allowed)}" if self.allowed else ""
            )
        if self.kind == "path":
            return "a path"
        return "any text"

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` (not empty); raises an internal error when not allowed."""
        value = raw.strip()
        if self.kind == "flag":
            low = value.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise _Invalid
        if self.kind == "choice":
            low = value.lower()
            if low not in self.allowed:
                raise _Invalid
            return low
        if self.kind == "size":
            return _parse_size(value, self.fraction)
        if self.kind == "integer":
            try:
                number = int(value)
            except ValueError:
                raise _Invalid from None
            if (self.minimum is not None and number < self.minimum) or (
                self.maximum is not None and number > self.maximum
            ):
                raise _Invalid
            return number
        if self.kind == "items":
            parts = tuple(p.strip() for p in value.split(",") if p.strip())
            if self.allowed and any(p.lower() not in self.allowed for p in parts):
                raise _Invalid
            if self.check is not None:
                for part in parts:
                    self.check(part)
            return parts
        if self.check is not None:
            self.check(value)
        if self.kind == "path":
            return Path(raw).expanduser()
        return raw


def _parse_size(value: str, fraction: bool) -> int | float:
    match = _SIZE.match(value)
    if match is None:
        raise _Invalid
    number, unit = match.group(1), match.group(2).lower()
    if not unit:
        if "." in number:
            share = float(number)
            if not fraction or not 0.0 < share <= 1.0:
                raise _Invalid
            return share
        return int(number)
    scale = _UNITS.get(unit)
    if scale is None:
        raise _Invalid
    return int(float(number) * scale)


_lock = threading.Lock()
_registry: dict[str, Variable] = {}
_cache: dict[str, tuple[str | None, Any]] = {}
_warned: set[tuple[str, str]] = set()


def register(
    name: str,
    kind: Kind,
    *,
    description: str,
    default: Any = None,
    allowed: tuple[str, ...] = (),
    read: str = "first use",
    package: str = "pygpukit-runtime",
    on_invalid: Literal["warn", "raise"] = "warn",
    fraction: bool = False,
    reported_natively: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
    accepts: str = "",
    check: Callable[[str], None] | None = None,
) -> Variable:
    """Register an environment variable and return its :class:`Variable`.

    Registering the same definition again (a module reloaded) is harmless; a different
    definition under a taken name raises ``ValueError``. ``check`` (kinds ``path`` and
    ``text``, and each entry of ``items``) raises ``ValueError`` for a value it refuses.
    """
    if (
        not name.startswith("PYGPUKIT_")
        or not name.replace("_", "").isalnum()
        or name != name.upper()
    ):
        raise ValueError(f"environment variable names are PYGPUKIT_ plus capitals, got {name!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if on_invalid not in ("warn", "raise"):
        raise ValueError(f"on_invalid must be 'warn' or 'raise', got {on_invalid!r}")
    if kind == "choice" and not allowed:
        raise ValueError(f"{name}: a choice needs its allowed values")
    allowed = tuple(a.lower() for a in allowed)
    if kind == "choice" and default is not None and default not in allowed:
        raise ValueError(f"{name}: default {default!r} is not among {allowed}")
    definition = Variable(
        name=name,
        kind=kind,
        description=description,
        default=default,
        allowed=allowed,
        read=read,
        package=package,
        on_invalid=on_invalid,
        reported_natively=reported_natively,
        fraction=fraction,
        minimum=minimum,
        maximum=maximum,
        accepts=accepts,
        check=check,
    )
    with _lock:
        known = _registry.get(name)
        if known is not None and known != definition:
            raise ValueError(
                f"{name} is already registered by {known.package} with another definition"
            )
        _registry[name] = definition
        _cache.pop(name, None)
    return definition


def variable(name: str) -> Variable:
    """The registered :class:`Variable` called ``name`` (``KeyError`` names the known ones)."""
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(sorted(_registry))
        raise KeyError(f"{name} is not a registered environment variable; known: {known}") from None


def variables() -> tuple[Variable, ...]:
    """Every registered variable, sorted by name."""
    with _lock:
        return tuple(sorted(_registry.values(), key=lambda v: v.name))


def is_set(name: str) -> bool:
    """Whether ``name`` is in the environment at all (an empty value counts as set)."""
    variable(name)
    return name in os.environ


def _invalid(var: Variable, raw: str, detail: str = "") -> Any:
    """Raise or warn (once per value) about a value ``var`` does not accept; the default."""
    allowed = var.allowed_text() + (f" ({detail})" if detail else "")
    if var.on_invalid == "raise":
        raise EnvironmentVariableError(var.name, raw, allowed)
    key = (var.name, raw)
    with _lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        default = "unset" if var.default is None else repr(var.default)
        warnings.warn(
            f"{var.name}={raw!r} ignored: allowed values are {allowed}; using the default "
            f"({default}). Fix or unset {var.name}.",
            EnvironmentVariableWarning,
            stacklevel=user_stacklevel(),
        )
    return var.default


def get(name: str) -> Any:
    """The validated value of ``name``, or its default when unset (or empty).

    The value is parsed once per distinct setting and cached.
    """
    raw = os.environ.get(name)
    hit = _cache.get(name)
    if hit is not None and hit[0] == raw:
        return hit[1]
    var = variable(name)
    if raw is None or (not raw.strip() and var.kind != "path"):
        value = var.default
    elif var.kind == "path" and not raw.strip():
        value = None
    else:
        try:
            value = var.parse(raw)
        except _Invalid:
            value = _invalid(var, raw)
        except ValueError as exc:  # a check() that explains itself
            value = _invalid(var, raw, str(exc))
    _cache[name] = (raw, value)
    return value


def _typed(name: str, kind: str) -> Any:
    var = _registry.get(name)
    if var is not None and var.kind != kind:
        raise TypeError(f"{name} is a {var.kind} variable; read it with env.{var.kind}()")
    return get(name)


def flag(name: str) -> bool:
    """A boolean variable: true for ``1/true/yes/on``, false for ``0/false/no/off``."""
    return bool(_typed(name, "flag"))


def choice(name: str) -> str:
    """A choice variable, lower-cased; the default when unset."""
    return str(_typed(name, "choice"))


def size(name: str) -> int | float | None:
    """A size in bytes (or a fraction of device memory where allowed); None when unset."""
    value: int | float | None = _typed(name, "size")
    return value


def integer(name: str) -> int | None:
    """An integer variable; its default when unset."""
    value: int | None = _typed(name, "integer")
    return value


def path(name: str) -> Path | None:
    """A folder path (``~`` expanded), or None when unset or set to an empty string.

    Tell the two apart with :func:`is_set`: ``PYGPUKIT_CACHE_DIR=""`` means "no folder".
    """
    value: Path | None = _typed(name, "path")
    return value


def items(name: str) -> tuple[str, ...]:
    """A comma-separated list variable, blanks dropped; ``()`` when unset."""
    value = _typed(name, "items")
    return tuple(value) if value else ()


def text(name: str) -> str | None:
    """A free-text variable; its default when unset."""
    value: str | None = _typed(name, "text")
    return value


def validate_all() -> None:
    """Validate every registered variable that is set (warn or raise as each one says).

    The runtime calls this when it picks its backend, so a bad value is reported on
    every backend, even for variables that backend never reads.
    """
    for var in variables():
        skip = var.read == "build" or var.package == "tests" or var.reported_natively
        if not skip and var.name in os.environ:
            get(var.name)


def describe_environment() -> list[tuple[str, str, str]]:
    """``(name, value, verdict)`` for every ``PYGPUKIT_*`` variable set now, sorted.

    The verdict is ``"ok"``, what the variable accepts when the value is not allowed, or,
    for a name nothing registered, that it is unknown (with the closest registered name:
    a typo is otherwise silently ignored). Warns and raises nothing: for reports such as
    ``pygpukit info``. Variables of packages not imported yet count as unknown.
    """
    import difflib

    known = {var.name: var for var in variables()}
    rows = []
    for name in sorted(n for n in os.environ if n.startswith("PYGPUKIT_")):
        raw = os.environ[name]
        var = known.get(name)
        if var is None:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            rows.append((name, raw, f"not a known variable{hint}"))
            continue
        verdict = "ok"
        if raw.strip():
            try:
                var.parse(raw)
            except _Invalid:
                verdict = f"not valid: allowed values are {var.allowed_text()}"
            except ValueError as exc:
                verdict = f"not valid: allowed values are {var.allowed_text()} ({exc})"
        rows.append((name, raw, verdict))
    return rows


def clear_cache() -> None:
    """Forget parsed values and the warnings already given (tests use this)."""
    with _lock:
        _cache.clear()
        _warned.clear()


_MODULE_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)?$")
_SM_LIST = re.compile(r"^\d{2,3}[af]?(;\d{2,3}[af]?)*$")


def _module_reference(value: str) -> None:
    if not _MODULE_REFERENCE.match(value):
        raise ValueError(f"{value!r} is not a module:attribute reference")


def _sm_list(value: str) -> None:
    if not _SM_LIST.match(value):
        raise ValueError(f"{value!r} is not a ';'-separated list of SM numbers")


# The runtime's variables. The ops package and the model packages register their own.
register(
    "PYGPUKIT_BACKEND",
    "choice",
    allowed=("cpu", "cuda"),
    description="Force a backend: `cpu` (no fallback notice) or `cuda` (a missing GPU is an "
    "error instead of a fallback). Unset: CUDA when usable, else the CPU backend.",
    on_invalid="raise",
)
register(
    "PYGPUKIT_ALLOW_TF32",
    "flag",
    default=False,
    read="each matmul",
    description="Let float32 matmuls use TF32 tensor cores when `allow_tf32` is not given "
    "(about 1e-3 relative error instead of fp32's 1e-6).",
)
register(
    "PYGPUKIT_GEMM_BACKEND",
    "choice",
    allowed=("auto", "own", "cublaslt"),
    default="auto",
    read="each matmul",
    description="Which GEMM implementation matmul uses on the GPU: cuBLASLt when installed "
    "(`auto`), PyGPUkit's own kernels (`own`), or cuBLASLt only (`cublaslt`: an error when "
    "it is missing).",
    on_invalid="raise",
)
register(
    "PYGPUKIT_MEMORY_LIMIT",
    "size",
    fraction=True,
    read="when pygpukit._rust loads (first use)",
    reported_natively=True,
    description="A limit on every memory pool, as gp.memory.set_limit takes it. Read by the "
    "Rust core, which warns and ignores a value it cannot read.",
)
register(
    "PYGPUKIT_CACHE_DIR",
    "path",
    read="first kernel compile",
    description="Folder of the JIT kernel cache. Unset: `$XDG_CACHE_HOME/pygpukit/kernels` "
    "(`~/.cache/...`). Empty: kernels are cached in memory only. A folder that cannot be "
    "used is reported once and the cache stays in memory.",
)
register(
    "PYGPUKIT_DEBUG_LIBRARY_LOAD",
    "flag",
    default=False,
    read="each library search",
    description="Print to stderr, when libcuda, NVRTC or cuBLASLt is loaded, every candidate "
    "path that failed (and why) and the one that loaded.",
)
register(
    "PYGPUKIT_UPLOAD_KERNEL",
    "choice",
    allowed=("0", "1"),
    default="1",
    read="first upload (by the C++ core)",
    description="`0` keeps every host-to-device upload on the copy engines; `1` (default) lets "
    "large pageable uploads use the pull kernel where the device suits it.",
    on_invalid="raise",
)
register(
    "PYGPUKIT_BENCHMARK_PLUGINS",
    "items",
    accepts="a comma-separated list of module:attribute (or module) names",
    check=_module_reference,
    read="python -m pygpukit.benchmark",
    description="Benchmark suite plug-ins as `module:attribute`, comma-separated, for source "
    "checkouts without installed entry points (`pygpukit.ops.benchmarks:suites`).",
)
register(
    "PYGPUKIT_REQUIRE_GPU",
    "flag",
    default=False,
    read="test session start",
    package="tests",
    description="Make the test suite fail instead of skipping GPU tests when no usable GPU "
    "is found (tools/gpu_check.sh sets it).",
    on_invalid="raise",
)
register(
    "PYGPUKIT_CUDA_ARCHS",
    "text",
    accepts="SM numbers separated by ';' (80;86;89;90a;100a;120a)",
    check=_sm_list,
    default="80;86;89;90a;100a;120a",
    read="build",
    description="SM targets the built-in kernels are compiled for at build time, "
    "`;`-separated (`90a`, `80;90a`).",
)
register(
    "PYGPUKIT_PREBUILT_RUST",
    "path",
    read="build",
    description="A prebuilt `_rust` module for the build to use instead of running cargo "
    "(GPU machines without a Rust toolchain).",
)
register(
    "PYGPUKIT_KERNEL_LINEINFO",
    "flag",
    default=False,
    read="build",
    description="Compile the built-in kernels with `-lineinfo` (source lines in profilers; "
    "bigger wheels).",
)

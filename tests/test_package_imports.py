"""Packages outside the runtime use only its public names.

Every module of the ops and model packages (their sources, not their tests) is read with
``ast``: an import of a ``_``-prefixed runtime module or name, of the runtime's internal
``pygpukit.backend``, an attribute access to a private GPUArray slot (``x._impl``,
``x._backend``), or to a private attribute of the ``pygpukit`` module itself fails the test,
naming the file and line. A package may import its own private modules.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from pygpukit.array import GPUArray

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: distribution folder -> the import package it owns.
PACKAGES = {
    "pygpukit-ops": "pygpukit.ops",
    "pygpukit-llm": "pygpukit.llm",
    "pygpukit-asr": "pygpukit.asr",
    "pygpukit-tts": "pygpukit.tts",
}
#: Runtime modules that are internal although their names are not ``_``-prefixed.
INTERNAL_MODULES = ("pygpukit.backend",)
#: GPUArray's private slots: the CPU/CUDA implementation object and its backend module.
PRIVATE_ATTRIBUTES = frozenset(s for s in GPUArray.__slots__ if s.startswith("_") and s[1] != "_")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of a (possibly relative) ``from ... import``."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _private_module(name: str, own: str) -> str | None:
    """Why importing module ``name`` from package ``own`` is not allowed, or None."""
    if not (name == "pygpukit" or name.startswith("pygpukit.")):
        return None
    if name == own or name.startswith(own + "."):
        return None
    parts = name.split(".")
    if any(p.startswith("_") for p in parts[1:]):
        return f"imports the private module {name}"
    if any(name == m or name.startswith(m + ".") for m in INTERNAL_MODULES):
        return f"imports the runtime's internal {name}"
    return None


def violations(source: str, module: str, own: str) -> list[str]:
    """Every use of a private runtime name in ``source`` (module ``module`` of package ``own``)."""
    tree = ast.parse(source)
    found: list[str] = []
    runtime_aliases = set()  # local names bound to the pygpukit module itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                why = _private_module(alias.name, own)
                if why:
                    found.append(f"line {node.lineno}: {why}")
                if alias.name == "pygpukit":
                    runtime_aliases.add(alias.asname or "pygpukit")
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            why = _private_module(target, own)
            if why:
                found.append(f"line {node.lineno}: {why}")
            elif not (target == own or target.startswith(own + ".")):
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if alias.name.startswith("_"):
                        found.append(f"line {node.lineno}: imports the private name {full}")
                    elif _private_module(full, own):
                        found.append(f"line {node.lineno}: {_private_module(full, own)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in PRIVATE_ATTRIBUTES:
                found.append(f"line {node.lineno}: reads the private GPUArray slot .{node.attr}")
            elif (
                node.attr.startswith("_")
                and isinstance(node.value, ast.Name)
                and node.value.id in runtime_aliases
            ):
                found.append(f"line {node.lineno}: reads the private {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE_ATTRIBUTES
        ):
            found.append(
                f"line {node.lineno}: {node.func.id} of the private slot {node.args[1].value}"
            )
    return found


def package_modules() -> list[tuple[pathlib.Path, str, str]]:
    """(file, module name, own package) of every source module outside the runtime."""
    out = []
    for dist, own in PACKAGES.items():
        src = ROOT / "packages" / dist / "src"
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
                parts.append("__init__")  # relative imports resolve against the package itself
            out.append((path, ".".join(parts), own))
    return out


MODULES = package_modules()


def test_every_package_has_sources() -> None:
    for own in PACKAGES.values():
        assert any(o == own for _, _, o in MODULES), f"no sources found for {own}"


@pytest.mark.parametrize(
    ("path", "module", "own"), MODULES, ids=[str(p.relative_to(ROOT)) for p, _, _ in MODULES]
)
def test_package_uses_only_public_runtime_names(path: pathlib.Path, module: str, own: str) -> None:
    found = violations(path.read_text(encoding="utf-8"), module, own)
    assert not found, f"{path.relative_to(ROOT)} uses runtime internals:\n  " + "\n  ".join(found)


CLEAN = """
import numpy as np
import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.kernels import KernelLibrary, host_array
from . import _common
from ._kernel_loader import kernel
from pygpukit.ops._rows import rows

def f(x):
    return gp.zeros(x.shape) + host_array(x)[0] + x._private_of_ours
"""

PLANTED = [
    ("from pygpukit.jit import _load", "private name pygpukit.jit._load"),
    ("from pygpukit import _jit_cache", "private name pygpukit._jit_cache"),
    ("import pygpukit._native as n", "private module pygpukit._native"),
    ("from pygpukit._environment import include_dirs", "private module pygpukit._environment"),
    ("from pygpukit.backend import select", "internal pygpukit.backend"),
    ("from pygpukit.backend.select import backend", "internal pygpukit.backend.select"),
    ("from pygpukit import backend", "internal pygpukit.backend"),
    ("from .. import _jit_cache", "private name pygpukit._jit_cache"),
    ("from ..jit import _signature", "private name pygpukit.jit._signature"),
    ("from pygpukit.llm import _weights", "private name pygpukit.llm._weights"),
    ("def f(x):\n    return x._impl", "private GPUArray slot ._impl"),
    ("def f(x):\n    return x._backend.name", "private GPUArray slot ._backend"),
    ("def f(x):\n    return getattr(x, '_impl')", "getattr of the private slot _impl"),
    ("import pygpukit as gp\nn = gp._native", "private gp._native"),
]


def test_clean_source_passes() -> None:
    assert violations(CLEAN, "pygpukit.ops.layers", "pygpukit.ops") == []


@pytest.mark.parametrize(("source", "message"), PLANTED, ids=[s for s, _ in PLANTED])
def test_planted_violation_fails(source: str, message: str) -> None:
    found = violations(source, "pygpukit.ops.layers", "pygpukit.ops")
    assert len(found) == 1 and message in found[0], found

"""Facts that more than one language needs are defined once; these tests prove the others agree.

- Promotion: C++ owns the table (``_native.PROMOTION``); the CPU backend resolves every dtype pair
  to the same result, and the NumPy rule it falls back to without ``_native`` gives the same table.
- Elementwise ops: C++ owns the list (``_native.BINARY_OPS`` / ``UNARY_OPS``, passed by name);
  the CPU backend implements exactly those ops.
- The Rust/C++ C API: the structs in ``rust_capi.h`` and their ``#[repr(C)]`` mirrors have the
  same version, sizes, alignments, field offsets and constants.
- ``KERNEL_ABI_VERSION``: defined once (``pygpukit._environment``); the kernel manifests carry it.

They change nothing; they fail when one side moves without the other.
"""

from __future__ import annotations

import json
import pathlib
import re
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _environment, _jit_cache
from pygpukit.backend import cpu_elementwise
from pygpukit.backend.select import native, native_error
from pygpukit.dtypes import SUPPORTED, numpy_promotion, promote_types, promotion_table
from pygpukit.kernels import KERNEL_ABI_VERSION as PUBLIC_KERNEL_ABI_VERSION

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNTIME_SRC = pathlib.Path(_environment.__file__).resolve().parent


@pytest.fixture(scope="module")
def native_module() -> ModuleType:
    module = native()
    if module is None:
        pytest.skip(f"pygpukit._native is not built here ({native_error()})")
    missing = [
        n for n in ("PROMOTION", "BINARY_OPS", "UNARY_OPS", "capi_layout") if not hasattr(module, n)
    ]
    assert not missing, f"_native lacks {missing}: it is older than this checkout; rebuild it"
    return module


def _random(rng: np.random.Generator, name: str, n: int = 16) -> np.ndarray:
    """Nonzero random values every dtype holds (1..5, random signs for signed types)."""
    values = rng.integers(1, 6, size=n)
    if name not in ("uint8", "bool"):
        values = values * rng.choice([-1, 1], size=n)
    if name == "bool":
        return rng.integers(0, 2, size=n).astype(bool) | (np.arange(n) == 0)
    return values.astype(SUPPORTED[name])


def test_cpu_backend_promotes_every_dtype_pair_as_the_cpp_table(
    native_module: ModuleType, rng: np.random.Generator
) -> None:
    table = native_module.PROMOTION
    assert set(table) == {(a, b) for a in SUPPORTED for b in SUPPORTED}
    assert dict(table) == cpu_elementwise.PROMOTE == promotion_table()
    for a in SUPPORTED:
        for b in SUPPORTED:
            x, y = _random(rng, a), _random(rng, b)
            # maximum's result dtype is the operands' promotion for every pair (a comparison's
            # is bool, divide's a float).
            result = cpu_elementwise.binary("maximum", x, y)
            assert result.dtype.name == table[a, b], (a, b)


def test_concatenate_promotes_by_the_same_table(
    native_module: ModuleType, rng: np.random.Generator
) -> None:
    for a in SUPPORTED:
        for b in SUPPORTED:
            x, y = gp.asarray(_random(rng, a)), gp.asarray(_random(rng, b))
            expected = native_module.PROMOTION[a, b]
            assert gp.concatenate([x, y]).dtype == expected == promote_types(a, b), (a, b)


def test_numpy_rule_used_without_native_gives_the_cpp_table(native_module: ModuleType) -> None:
    derived = {(a, b): numpy_promotion(a, b) for a in SUPPORTED for b in SUPPORTED}
    differences = {
        k: (v, derived[k]) for k, v in native_module.PROMOTION.items() if derived[k] != v
    }
    assert not differences, f"(C++, NumPy rule) differ: {differences}"


def test_promotion_table_without_native_is_the_cpp_table(
    native_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pygpukit.backend import select

    monkeypatch.setattr(select, "native", lambda: None)
    assert promotion_table.__wrapped__() == dict(native_module.PROMOTION)


def test_cpu_backend_implements_exactly_the_cpp_op_lists(native_module: ModuleType) -> None:
    binary, unary = native_module.BINARY_OPS, native_module.UNARY_OPS
    assert len(set(binary)) == len(binary) and len(set(unary)) == len(unary)
    assert frozenset(binary) == cpu_elementwise.BINARY_OPS
    assert frozenset(unary) == cpu_elementwise.UNARY_OPS


# Ops C++ resolves through another op's kernel (native/ops/elementwise.cpp, docs/elementwise.md):
# greater/greater_equal are less/less_equal with swapped operands, logical_not is equal(a, False),
# positive is a copy.
WITHOUT_OWN_KERNEL = {"greater", "greater_equal", "logical_not", "positive"}


def test_elementwise_cubin_has_kernels_for_exactly_the_cpp_ops(native_module: ModuleType) -> None:
    cubins = sorted((RUNTIME_SRC / "_kernels").glob("sm_*/elementwise.cubin"))
    if not cubins:
        pytest.skip("no built kernels here")
    suffixes = "f64|f32|f16|bf16|i8|i16|i32|i64|u8|b1"
    pattern = rf"(?<![\w])(ew|un)_(\w+?)_(?:{suffixes})(?![\w])".encode()
    kernels: dict[bytes, set[str]] = {b"ew": set(), b"un": set()}
    for kind, op in re.findall(pattern, cubins[0].read_bytes()):
        kernels[kind].add(op.decode())
    binary, unary = set(native_module.BINARY_OPS), set(native_module.UNARY_OPS)
    assert kernels[b"ew"] == binary - WITHOUT_OWN_KERNEL
    assert kernels[b"un"] == unary - WITHOUT_OWN_KERNEL


def test_every_cpp_op_runs_on_the_cpu_backend_by_name(
    native_module: ModuleType, rng: np.random.Generator
) -> None:
    x, y = _random(rng, "int32"), np.abs(_random(rng, "int32"))
    for name in native_module.BINARY_OPS:
        assert cpu_elementwise.binary(name, x, y).shape == x.shape, name
    for name in native_module.UNARY_OPS:
        assert cpu_elementwise.unary(name, x).shape == x.shape, name
    with pytest.raises(ValueError, match="unknown op 'hypot'"):
        cpu_elementwise.binary("hypot", x, y)
    with pytest.raises(TypeError, match="op must be a str"):
        cpu_elementwise.unary(3, x)  # type: ignore[arg-type]


def _check_complete(name: str, entry: dict[str, Any]) -> None:
    """The listed fields cover the struct: offsets increase, the last ends within 8 bytes."""
    offsets = [offset for _, offset in entry["fields"]]
    assert offsets[0] == 0 and offsets == sorted(set(offsets)), name
    assert 0 < entry["size"] - offsets[-1] <= 8, f"{name}: a field after the last one listed?"


def test_capi_layout_is_the_same_in_rust_and_cpp(native_module: ModuleType) -> None:
    from pygpukit import _rust

    rust, cpp = _rust.capi_layout(), native_module.capi_layout()
    assert rust["version"] == cpp["version"] == _rust.CAPI_VERSION
    assert (
        set(rust["structs"])
        == set(cpp["structs"])
        == {
            "pgk_api",
            "pgk_block",
            "pgk_device_backend",
            "pgk_pull_args",
        }
    )
    for name, entry in cpp["structs"].items():
        _check_complete(name, entry)
        assert rust["structs"][name] == entry, name
    assert rust["constants"] == cpp["constants"]
    assert rust == cpp


def test_capsule_import_check_names_the_first_layout_difference(
    native_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pygpukit import _rust

    rust_layout = _rust.capi_layout
    assert native_module.capi_layout_mismatch() == ""

    swapped = rust_layout()
    fields = swapped["structs"]["pgk_api"]["fields"]
    (name_a, offset_a), (name_b, offset_b) = fields[3], fields[4]
    fields[3], fields[4] = (name_a, offset_b), (name_b, offset_a)
    monkeypatch.setattr(_rust, "capi_layout", lambda: swapped)
    assert native_module.capi_layout_mismatch().startswith("pgk_api: ")

    constant = rust_layout()
    constant["constants"]["PGK_WOULD_BLOCK"] += 1
    monkeypatch.setattr(_rust, "capi_layout", lambda: constant)
    expected = f"PGK_WOULD_BLOCK: {constant['constants']['PGK_WOULD_BLOCK']} (Rust) vs"
    assert native_module.capi_layout_mismatch().startswith(expected)

    newer = rust_layout()
    newer["version"] += 1
    monkeypatch.setattr(_rust, "capi_layout", lambda: newer)
    assert native_module.capi_layout_mismatch().startswith(f"C API version {newer['version']}")


def test_kernel_abi_version_is_defined_once() -> None:
    definition = re.compile(r"(?i)\b(_?kernel_?abi(_version)?|kKernelAbi)\s*(:\s*\w+\s*)?=\s*\d")
    places = []
    for folder in ("packages", "native", "tools", "rust"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".rs"}:
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    if definition.search(line):
                        places.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert [place.split(":")[0] for place in places] == [
        "packages/pygpukit-runtime/src/pygpukit/_environment.py"
    ], places
    assert PUBLIC_KERNEL_ABI_VERSION is _environment.KERNEL_ABI_VERSION
    assert _jit_cache.KERNEL_ABI_VERSION is _environment.KERNEL_ABI_VERSION


def test_built_kernel_manifests_carry_the_kernel_abi_version() -> None:
    import pygpukit.ops

    manifests = [
        RUNTIME_SRC / "_kernels" / "manifest.json",
        pathlib.Path(pygpukit.ops.__file__).resolve().parent / "_kernels" / "manifest.json",
    ]
    present = [m for m in manifests if m.exists()]
    if not present:
        pytest.skip("no built kernels here")
    for path in present:
        assert json.loads(path.read_text())["kernel_abi"] == _environment.KERNEL_ABI_VERSION, path


@pytest.mark.gpu
def test_native_ops_are_named_by_any_equal_str(rng: np.random.Generator) -> None:
    a = gp.asarray(_random(rng, "float32"))
    b = gp.asarray(_random(rng, "float32"))
    built = "".join(["ad", "d"])  # equal to "add" but not the interned literal
    native_module = native()
    assert native_module is not None
    host = np.empty(a.shape, np.float32)
    native_module.binary(built, a._impl, b._impl).copy_to_host(host)
    np.testing.assert_array_equal(host, a.to_numpy() + b.to_numpy())
    with pytest.raises(ValueError, match="unknown op 'hypot'"):
        native_module.binary("hypot", a._impl, b._impl)
    with pytest.raises(TypeError, match="op must be a str"):
        native_module.unary(3, a._impl)

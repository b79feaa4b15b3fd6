"""pygpukit.kernels: the package kernel build (NVRTC, no GPU), its manifest, and KernelLibrary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _jit_cache
from pygpukit.errors import DeviceNotSupportedError
from pygpukit.kernels import KernelLibrary, host_array
from pygpukit.kernels import build as kbuild
from pygpukit.kernels.cubin import parameter_names, records

PACKAGE_KERNEL = r"""
#include "pygpukit/kernel.cuh"
#include "scale_impl.cuh"

#define PGK_SCALE(sfx, T) \
    PGK_KERNEL(scale_##sfx, (T* __restrict__ x, T factor, long long n)) { scale<T>(x, factor, n); }
PGK_SCALE(f32, float)
PGK_SCALE(f16, __half)
PGK_KERNEL_BOUNDS(mixed, (const __grid_constant__ CUtensorMap m, const void* p, bool b,
                          unsigned char u, short h, unsigned long long q, double d), 128, 2) {}
PGK_KERNEL(nothing, ()) {}

constexpr int kBlock = 256;
PGK_CONSTANT(SCALE_BLOCK, kBlock);
PGK_CONSTANT(NEGATIVE, -3 * kBlock);
"""

SCALE_HEADER = r"""
#pragma once
template <typename T>
__device__ __forceinline__ void scale(T* x, T factor, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * factor;
}
"""


@pytest.fixture(scope="module")
def nvrtc() -> kbuild.Nvrtc:
    try:
        return kbuild.find_nvrtc()
    except RuntimeError as exc:
        pytest.skip(f"NVRTC is not installed here: {exc}")


def write_sources(folder: Path, body: str = PACKAGE_KERNEL) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scale.cu").write_text(body)
    (folder / "scale_impl.cuh").write_text(SCALE_HEADER)
    return folder / "scale.cu"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, nvrtc: kbuild.Nvrtc) -> Path:
    """A package-style kernel folder built for two archs."""
    root = tmp_path_factory.mktemp("package")
    src = write_sources(root / "kernels")
    kbuild.build([src], root / "_kernels", ["80", "90a"], nvrtc=nvrtc)
    return root / "_kernels"


def test_build_writes_signatures_from_the_compiler(built: Path) -> None:
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["format"] == kbuild.MANIFEST_FORMAT
    assert manifest["kernel_abi"] == kbuild.KERNEL_ABI_VERSION
    assert manifest["archs"] == ["80", "90a"]
    entry = manifest["kernels"]["scale"]
    assert entry["entries"] == {
        "mixed": {
            "args": ["tmap", "ptr", "bool", "u8", "i16", "u64", "f64"],
            "names": ["m", "p", "b", "u", "h", "q", "d"],
        },
        "nothing": {"args": [], "names": []},
        "scale_f16": {"args": ["ptr", "f16", "i64"], "names": ["x", "factor", "n"]},
        "scale_f32": {"args": ["ptr", "f32", "i64"], "names": ["x", "factor", "n"]},
    }
    assert entry["constants"] == {"NEGATIVE": -768, "SCALE_BLOCK": 256}
    for arch in ("80", "90a"):
        assert (built / f"sm_{arch}" / "scale.cubin").stat().st_size > 0
    # The sources and the headers beside them ship for the JIT fallback.
    assert (built / "src" / "scale.cu").read_text() == PACKAGE_KERNEL
    assert (built / "src" / "scale_impl.cuh").exists()


def test_records_come_from_each_cubin(built: Path) -> None:
    rec = records((built / "sm_80" / "scale.cubin").read_bytes())
    assert rec.entries["scale_f32"]["args"] == ["ptr", "f32", "i64"]
    assert rec.constants["SCALE_BLOCK"] == 256


def test_unsupported_parameter_type_fails_the_build(tmp_path: Path, nvrtc: kbuild.Nvrtc) -> None:
    src = write_sources(
        tmp_path / "k",
        '#include "pygpukit/kernel.cuh"\nstruct Pair { int a, b; };\n'
        "PGK_KERNEL(bad, (Pair p)) {}\n",
    )
    with pytest.raises(RuntimeError, match="ArgCode"):
        kbuild.build([src], tmp_path / "out", ["80"], nvrtc=nvrtc)


def test_archs_must_agree_on_constants(tmp_path: Path, nvrtc: kbuild.Nvrtc) -> None:
    body = (
        '#include "pygpukit/kernel.cuh"\n'
        "#if __CUDA_ARCH__ >= 900\nPGK_CONSTANT(TILE, 128);\n"
        "#else\nPGK_CONSTANT(TILE, 64);\n#endif\n"
    )
    src = write_sources(tmp_path / "k", body)
    with pytest.raises(RuntimeError, match="differ"):
        kbuild.build([src], tmp_path / "out", ["80", "90a"], nvrtc=nvrtc)


def test_library_reads_constants_and_params_on_any_backend(built: Path) -> None:
    lib = KernelLibrary(built, "my-package")
    assert lib.files() == ["scale"]
    assert lib.constant("scale", "SCALE_BLOCK") == 256
    assert lib.constants("scale") == {"NEGATIVE": -768, "SCALE_BLOCK": 256}
    assert lib.entries("scale")["scale_f16"] == ["ptr", "f16", "i64"]
    params = lib.params("scale", "scale_f32")
    assert [(p.name, p.code) for p in params] == [("x", "ptr"), ("factor", "f32"), ("n", "i64")]
    with pytest.raises(KeyError, match="SCALE_BLOCK"):
        lib.constant("scale", "TILE")
    with pytest.raises(KeyError, match="no kernel file 'other'"):
        lib.constant("other", "TILE")
    with pytest.raises(KeyError, match="PGK_KERNEL"):
        lib.params("scale", "scale_f64")


def test_library_refuses_another_manifest_format(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"kernel_abi": 1, "archs": ["80"]}))
    with pytest.raises(ImportError, match="rebuild or reinstall my-package"):
        KernelLibrary(tmp_path, "my-package").constant("scale", "X")
    with pytest.raises(ImportError, match="missing"):
        KernelLibrary(tmp_path / "absent", "my-package").files()


def test_library_kernel_needs_a_gpu(built: Path) -> None:
    if gp.is_cuda_available():
        pytest.skip("the CUDA backend runs here (tests/runtime/gpu covers the launch)")
    with pytest.raises(DeviceNotSupportedError, match="my-package"):
        KernelLibrary(built, "my-package").kernel("scale", "scale_f32")


def test_jit_fallback_key_changes_with_a_shipped_header(built: Path, tmp_path: Path) -> None:
    """gp.jit's cache key for the fallback compile covers the headers in the shipped src/."""
    import shutil

    folder = tmp_path / "_kernels"
    shutil.copytree(built, folder)
    lib = KernelLibrary(folder)

    def key() -> str:
        return _jit_cache.cache_key(lib.source("scale"), (), lib.jit_options(), "sm_90a", (13, 0))

    first = key()
    assert first == key()
    (folder / "src" / "scale_impl.cuh").write_text(SCALE_HEADER + "\n// changed\n")
    assert key() != first


@pytest.mark.parametrize(
    ("text", "count", "names"),
    [
        ("(const float* __restrict__ x, int n)", 2, ["x", "n"]),
        ("(float*, int)", 2, ["arg0", "arg1"]),
        (
            "(const __grid_constant__ CUtensorMap tq, Pair<int, float> p, int a[4])",
            3,
            ["tq", "p", "a"],
        ),
        ("()", 0, []),
        ("(unsigned long long)", 1, ["arg0"]),
    ],
)
def test_parameter_names(text: str, count: int, names: list[str]) -> None:
    assert parameter_names(text, count) == names


def test_host_array_is_a_view_of_a_cpu_array(rng: np.random.Generator) -> None:
    values = rng.standard_normal((3, 5)).astype(np.float32)
    x = gp.from_numpy(values)
    if x.device != "cpu":
        with pytest.raises(TypeError, match="only CPU-backend arrays"):
            host_array(x)
        return
    view = host_array(x)
    np.testing.assert_array_equal(view, values)
    view[1, 2] = 7.5
    assert x.to_numpy()[1, 2] == 7.5
    with pytest.raises(TypeError, match="GPUArray"):
        host_array(values)  # type: ignore[arg-type]
    x.setflags(write=False)  # a read-only array gives a read-only view
    with pytest.raises(ValueError, match="read-only"):
        host_array(x)[0, 0] = 1.0

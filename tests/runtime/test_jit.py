"""JIT logic that needs no GPU: signature parsing, argument binding, launch shape, the cache."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _jit_cache
from pygpukit.jit import Kernel, Param, parse_signature

ON_GPU = gp.is_cuda_available()

README_KERNEL = r"""
extern "C" __global__
void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor;
}
"""


def _sig(source: str, name: str, expr: str | None = None) -> list[tuple[str, str]]:
    return [(p.name, p.code) for p in parse_signature(source, name, expr)]


def test_readme_kernel_signature() -> None:
    params = parse_signature(README_KERNEL, "scale")
    assert params == [
        Param("x", "float *", "ptr"),
        Param("factor", "float", "f32"),
        Param("n", "int", "i32"),
    ]


def test_every_scalar_type_and_qualifiers() -> None:
    src = """
    // void all(int fake) in a comment must be ignored
    /* extern "C" __global__ void all(double fake) */
    #include <cuda_fp16.h>
    extern "C" __global__ void __launch_bounds__(128, 2) all(
        const float* __restrict__ a, __half h, __nv_bfloat16 b, unsigned long long n,
        size_t s, int8_t c, bool flag, double d, unsigned u, short sh, unsigned char uc,
        int64_t big, float out[], volatile int* counter, std::uint32_t w, long l,
        signed char sc, unsigned short us, uint8_t u8v, int16_t i16v, const int k = 3)
    { }
    """
    assert _sig(src, "all") == [
        ("a", "ptr"),
        ("h", "f16"),
        ("b", "bf16"),
        ("n", "u64"),
        ("s", "u64"),
        ("c", "i8"),
        ("flag", "bool"),
        ("d", "f64"),
        ("u", "u32"),
        ("sh", "i16"),
        ("uc", "u8"),
        ("big", "i64"),
        ("out", "ptr"),
        ("counter", "ptr"),
        ("w", "u32"),
        ("l", "i64"),
        ("sc", "i8"),
        ("us", "u16"),
        ("u8v", "u8"),
        ("i16v", "i16"),
        ("k", "i32"),
    ]


def test_picks_the_global_function_among_several() -> None:
    src = """
    __device__ float helper(float v) { return v * 2; }
    extern "C" __global__ void first(int* p) { p[0] = 1; }
    extern "C" __global__ void helper_kernel(double* q, unsigned int count) { }
    extern "C" __global__ void empty_args(void) { }
    extern "C" __global__ void unnamed(float*, int) { }
    """
    assert _sig(src, "helper_kernel") == [("q", "ptr"), ("count", "u32")]
    assert _sig(src, "first") == [("p", "ptr")]
    assert _sig(src, "empty_args") == []
    assert _sig(src, "unnamed") == [("arg0", "ptr"), ("arg1", "i32")]
    with pytest.raises(ValueError, match="kernel 'helper' not found"):
        parse_signature(src, "helper")  # a __device__ function is not a kernel


def test_template_kernel_with_name_expression() -> None:
    src = """
    template <typename T, int N>
    __global__ void axpy(T* y, const T* x, T alpha, int n) { }
    """
    assert _sig(src, "axpy", "axpy<float, 4>") == [
        ("y", "ptr"),
        ("x", "ptr"),
        ("alpha", "f32"),
        ("n", "i32"),
    ]
    assert _sig(src, "axpy", "axpy<__nv_bfloat16, 2>")[2] == ("alpha", "bf16")
    assert _sig(src, "axpy", "axpy<double,1>")[2] == ("alpha", "f64")


@pytest.mark.parametrize(
    ("decl", "match"),
    [
        ("float& r", "is a reference"),
        ("struct Params p", "cannot pass"),
        ("float4 v", "cannot pass"),
    ],
)
def test_unpassable_parameter_types(decl: str, match: str) -> None:
    src = f'extern "C" __global__ void k({decl}) {{ }}'
    with pytest.raises(ValueError, match=match):
        parse_signature(src, "k")


def test_tensor_map_parameters() -> None:
    """A TMA descriptor is passed by value: code tmap, only as `const __grid_constant__`."""
    src = (
        'extern "C" __global__ void k(const __grid_constant__ CUtensorMap tq, float* out,'
        " int n) { }"
    )
    assert _sig(src, "k") == [("tq", "tmap"), ("out", "ptr"), ("n", "i32")]
    for decl in ("CUtensorMap m", "const CUtensorMap m", "__grid_constant__ CUtensorMap m"):
        with pytest.raises(ValueError, match="const __grid_constant__ CUtensorMap m"):
            parse_signature(f'extern "C" __global__ void k({decl}) {{ }}', "k")


def test_tensor_map_needs_a_gpuarray(rand) -> None:
    with pytest.raises(TypeError, match="GPUArray"):
        gp.TensorMap(rand((8, 8)), (8, 8))


def test_tensor_map_on_the_cpu_backend_says_it_needs_a_gpu(rand) -> None:
    if gp.backend_name() != "cpu":
        pytest.skip("the CPU backend's error (tests/runtime/gpu/test_gpu_tensor_map.py: GPU)")
    with pytest.raises(gp.DeviceNotSupportedError, match="need a CUDA GPU"):
        gp.TensorMap(gp.from_numpy(rand((8, 8))), (8, 8))


def test_check_arguments_wants_a_tensor_map_for_tmap(rand) -> None:
    src = 'extern "C" __global__ void k(const __grid_constant__ CUtensorMap m, int n) { }'
    k, _ = _kernel(src, "k")
    x = gp.from_numpy(rand((4,)))
    with pytest.raises(TypeError, match=r"parameter 'm'.*gp.TensorMap"):
        k.check_arguments((x, 1))


class FakeFunction:
    """Stands in for _native.Function: records launches, rejects a str like the C++ packer."""

    def __init__(self, max_threads: int = 1024) -> None:
        self.max_threads = max_threads
        self.codes: list[str] = []
        self.launches: list[tuple[Any, ...]] = []

    def attributes(self) -> dict[str, int]:
        return {"num_regs": 12, "max_threads_per_block": self.max_threads, "shared_size_bytes": 64}

    def set_signature(self, codes: list[str]) -> None:
        self.codes = list(codes)

    def launch(self, grid, block, shared_mem, stream, args, dependent=False) -> None:
        for i, a in enumerate(args):
            if isinstance(a, (str, np.ndarray)) or (
                self.codes[i] == "i32" and isinstance(a, float)
            ):
                raise TypeError(f"argument {i}: cannot pack {type(a).__name__} as {self.codes[i]}")
        self.launches.append((grid, block, shared_mem, stream, args))


def _kernel(source: str = README_KERNEL, name: str = "scale", max_threads: int = 1024):
    fn = FakeFunction(max_threads)
    return Kernel(fn, name, parse_signature(source, name)), fn


def test_kernel_sets_signature_and_attributes() -> None:
    k, fn = _kernel()
    assert fn.codes == ["ptr", "f32", "i32"]
    assert k.attributes()["num_regs"] == 12
    assert k.num_regs == 12 and k.max_threads_per_block == 1024 and k.shared_size_bytes == 64
    assert k.signature() == "scale(float * x, float factor, int n)"
    assert "scale(" in repr(k)


def test_keyword_and_positional_binding(rand) -> None:
    k, fn = _kernel()
    x = gp.from_numpy(rand((1000,)))
    k(x, factor=0.5, n=x.size)
    k(x, 0.5, 1000)
    k(n=10, x=x, factor=2.0)
    assert [launch[4][1:] for launch in fn.launches] == [(0.5, 1000), (0.5, 1000), (2.0, 10)]
    assert fn.launches[0][4][0] is x
    with pytest.raises(TypeError, match="missing argument\\(s\\) for: factor, n"):
        k(x)
    with pytest.raises(TypeError, match="takes 3 argument"):
        k(x, 1.0, 2, 3)
    with pytest.raises(TypeError, match="no parameter named 'm'"):
        k(x, 1.0, n=3, m=2)
    with pytest.raises(TypeError, match="parameter 'factor' twice"):
        k(x, 1.0, factor=2.0, n=1)


def test_type_errors_name_the_parameter(rand) -> None:
    k, _ = _kernel()
    x = gp.from_numpy(rand((8,)))
    with pytest.raises(TypeError, match="parameter 'factor' \\(float\\)"):
        k(x, "half", 8)
    with pytest.raises(TypeError, match="parameter 'n' \\(int\\)"):
        k(x, 0.5, 8.0)
    with pytest.raises(TypeError, match="parameter 'x'"):
        k(np.ones(8, np.float32), 0.5, 8)


def test_check_arguments_ranges_and_kinds(rand) -> None:
    src = 'extern "C" __global__ void k(unsigned char u, bool b, double d, int* p) {}'
    k, _ = _kernel(src, "k")
    x = gp.from_numpy(rand((4,), np.int32))
    k.check_arguments((255, True, 1, x))
    k.check_arguments((np.uint8(3), np.bool_(False), np.float32(2.5), 0xDEAD0000))
    with pytest.raises(TypeError, match=r"parameter 'u'.*\[0, 255\]"):
        k.check_arguments((256, True, 1.0, x))
    with pytest.raises(TypeError, match="parameter 'b'"):
        k.check_arguments((1, 1, 1.0, x))
    with pytest.raises(TypeError, match="parameter 'd'"):
        k.check_arguments((1, True, True, x))
    with pytest.raises(TypeError, match="parameter 'p'"):
        k.check_arguments((1, True, 1.0, 3.5))


def test_default_launch_configuration(rand) -> None:
    k, fn = _kernel()
    x = gp.from_numpy(rand((1000,)))
    k(x, 0.5, 1000)
    assert fn.launches[-1][:3] == ((4, 1, 1), (256, 1, 1), 0)
    k(x, 0.5, 256)
    assert fn.launches[-1][0] == (1, 1, 1)
    k(x, 0.5, 1000, block=128)
    assert fn.launches[-1][:2] == ((8, 1, 1), (128, 1, 1))
    k(x, 0.5, 1000, grid=(2, 3), block=(16, 4), shared_mem=1024)
    assert fn.launches[-1][:3] == ((2, 3, 1), (16, 4, 1), 1024)
    count = len(fn.launches)
    k(x, 0.5, 0)  # nothing to do: no launch
    assert len(fn.launches) == count
    with pytest.raises(ValueError, match="block must be"):
        k(x, 0.5, 10, block=0)
    with pytest.raises(ValueError, match="grid must be"):
        k(x, 0.5, 10, grid=(1, 2, 3, 4))


def test_default_launch_respects_launch_bounds_and_array_sizes(rand) -> None:
    k, fn = _kernel(max_threads=96)
    k(gp.from_numpy(rand((200,))), 1.0, 200)
    assert fn.launches[-1][:2] == ((3, 1, 1), (96, 1, 1))
    src = 'extern "C" __global__ void add(const float* a, float* b, int count) {}'
    k2, fn2 = _kernel(src, "add")
    k2(gp.from_numpy(rand((10,))), gp.from_numpy(rand((600,))), 600)
    assert fn2.launches[-1][0] == (3, 1, 1)  # the largest array: 600 elements
    src3 = 'extern "C" __global__ void s(float v, int count) {}'
    k3, _ = _kernel(src3, "s")
    with pytest.raises(TypeError, match="pass grid= and block="):
        k3(1.0, 5)


def test_kernel_uses_the_given_or_current_stream(rand) -> None:
    k, fn = _kernel()
    x = gp.from_numpy(rand((4,)))
    s = gp.Stream()
    k(x, 1.0, 4, stream=s)
    assert fn.launches[-1][3] is s._impl
    with s:
        k(x, 1.0, 4)
    assert fn.launches[-1][3] is s._impl


@pytest.mark.skipif(ON_GPU, reason="CPU-backend behaviour")
def test_jit_on_cpu_says_kernels_need_a_gpu() -> None:
    assert gp.is_nvrtc_available() is False
    with pytest.raises(gp.DeviceNotSupportedError, match="need a CUDA GPU"):
        gp.jit(README_KERNEL, "scale")
    with pytest.raises(gp.DeviceNotSupportedError, match="need a CUDA GPU"):
        gp.jit_module(README_KERNEL, names=["scale"])


def test_nvrtc_queries_never_raise() -> None:
    path = gp.get_nvrtc_path()
    version = gp.get_nvrtc_version()
    assert path is None or isinstance(path, str)
    assert version is None or (len(version) == 2 and version[0] >= 11)


# --- the cache -------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(_jit_cache, "_override", _jit_cache._UNSET)
    monkeypatch.setattr(_jit_cache, "_memory", {})
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def _key(**changes: Any) -> str:
    args: dict[str, Any] = {
        "source": README_KERNEL,
        "name_expressions": (),
        "options": ("--gpu-architecture=sm_90a",),
        "arch": "sm_90a",
        "nvrtc_version": (13, 0),
    }
    args.update(changes)
    return _jit_cache.cache_key(**args)


def test_cache_key_covers_everything_that_changes_the_code() -> None:
    base = _key()
    assert base == _key() and len(base) == 64
    variants = [
        _key(source=README_KERNEL + " "),
        _key(name_expressions=("scale<float>",)),
        _key(options=("--gpu-architecture=sm_90a", "-use_fast_math")),
        _key(arch="sm_80"),
        _key(nvrtc_version=(13, 1)),
    ]
    assert len({base, *variants}) == 6


def test_cache_key_covers_included_headers(tmp_path) -> None:
    (tmp_path / "outer.cuh").write_text('#include "inner.cuh"\n#define OUTER 1\n')
    (tmp_path / "inner.cuh").write_text("#define WIDTH 4\n")
    (tmp_path / "unused.cuh").write_text("#define UNUSED 1\n")
    src = '#include "outer.cuh"\n#include "missing.cuh"\n' + README_KERNEL
    opts = ("--gpu-architecture=sm_90a", f"-I{tmp_path}")
    base = _key(source=src, options=opts)
    assert _key(source=src, options=opts) == base
    (tmp_path / "unused.cuh").write_text("#define UNUSED 2\n")
    assert _key(source=src, options=opts) == base  # not included: no effect
    (tmp_path / "inner.cuh").write_text("#define WIDTH 8\n")  # included through outer.cuh
    changed = _key(source=src, options=opts)
    assert changed != base
    (tmp_path / "outer.cuh").write_text('#include "inner.cuh"\n#define OUTER 2\n')
    assert _key(source=src, options=opts) not in (base, changed)
    assert set(_jit_cache.included_headers(src, ("-I", str(tmp_path)))) == {
        str((tmp_path / "outer.cuh").resolve()),
        str((tmp_path / "inner.cuh").resolve()),
    }


def test_cache_key_covers_the_abi_version(monkeypatch) -> None:
    base = _key()
    monkeypatch.setattr(_jit_cache, "KERNEL_ABI_VERSION", _jit_cache.KERNEL_ABI_VERSION + 1)
    assert _key() != base


def test_store_and_load_round_trip(cache, rng) -> None:
    cubin = rng.bytes(4096)
    key = _key()
    _jit_cache.store(key, _jit_cache.CacheEntry(cubin, {"scale<float>": "_Z5scaleIfEvPT_"}))
    files = sorted(os.listdir(cache))
    assert files == [f"{key}.cubin"]  # no temporary file left behind
    _jit_cache.clear_memory()
    entry = _jit_cache.load(key)
    assert entry is not None
    assert entry.cubin == cubin and entry.lowered == {"scale<float>": "_Z5scaleIfEvPT_"}
    assert _jit_cache.load(_key(arch="sm_80")) is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other-key"])
def test_damaged_entries_are_misses_and_removed(cache, rng, damage) -> None:
    key = _key()
    _jit_cache.store(key, _jit_cache.CacheEntry(rng.bytes(2048), {}))
    _jit_cache.clear_memory()
    path = cache / f"{key}.cubin"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:  # a valid entry of another key under this key's name
        other = _key(arch="sm_80")
        _jit_cache.store(other, _jit_cache.CacheEntry(rng.bytes(16), {}))
        _jit_cache.clear_memory()
        data = bytearray((cache / f"{other}.cubin").read_bytes())
    path.write_bytes(bytes(data))
    assert _jit_cache.load(key) is None
    assert not path.exists()


def test_memory_only_modes(tmp_path, monkeypatch, rng) -> None:
    monkeypatch.setattr(_jit_cache, "_override", _jit_cache._UNSET)
    monkeypatch.setattr(_jit_cache, "_memory", {})
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", "")
    assert _jit_cache.cache_dir() is None and gp.get_jit_cache_dir() is None
    key = _key()
    entry = _jit_cache.CacheEntry(rng.bytes(64), {})
    _jit_cache.store(key, entry)
    assert _jit_cache.load(key) == entry
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    gp.set_jit_cache_dir(None)  # the function wins over the environment
    assert _jit_cache.cache_dir() is None
    _jit_cache.store(_key(arch="sm_80"), entry)
    assert list(tmp_path.iterdir()) == []
    gp.set_jit_cache_dir(str(tmp_path / "mine"))
    assert gp.get_jit_cache_dir() == str(tmp_path / "mine")
    gp.reset_jit_cache_dir()  # back to the environment's choice
    assert gp.get_jit_cache_dir() == str(tmp_path)


def test_default_cache_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(_jit_cache, "_override", _jit_cache._UNSET)
    monkeypatch.delenv("PYGPUKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _jit_cache.cache_dir() == tmp_path / "pygpukit" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert str(_jit_cache.cache_dir()).endswith(os.path.join(".cache", "pygpukit", "kernels"))


def test_unwritable_cache_dir_keeps_the_entry_in_memory(tmp_path, monkeypatch, rng) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"x")
    monkeypatch.setattr(_jit_cache, "_memory", {})
    monkeypatch.setattr(_jit_cache, "_override", blocker / "kernels")
    key = _key()
    entry = _jit_cache.CacheEntry(rng.bytes(32), {})
    monkeypatch.setattr(_jit_cache, "_warned_unwritable", False)
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache"):
        _jit_cache.store(key, entry)  # cannot mkdir under a file: a warning, no exception
    assert _jit_cache.load(key) == entry

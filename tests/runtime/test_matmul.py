"""matmul / ``@`` against NumPy in float64, on every backend; on CUDA both GEMM backends.

``PYGPUKIT_GEMM_BACKEND`` is set per test (``own``: the runtime's kernels; ``cublaslt``:
cuBLASLt, skipped where it is not installed). Limits ``||out - ref|| / ||ref||``: fp32 1e-5,
tf32 5e-4, fp16 3e-3, bf16 1e-2; integers exactly (wrapping as NumPy's do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.errors import LibraryNotFoundError

FLOATS = ["float32", "float16", "bfloat16", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "bool"]
TOL = {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-4, "float16": 3e-3, "bfloat16": 1e-2}
# (m, k, n): odd sizes on every axis, tile-aligned cases (the cp.async / wgmma paths), K = 1000.
SHAPES = [
    (1, 1, 1),
    (7, 33, 129),
    (129, 1000, 7),
    (33, 7, 1),
    (128, 64, 256),
    (1000, 129, 33),
    (64, 1000, 136),
    (300, 200, 264),  # wgmma edge tiles on Hopper: partial M, N and K tiles
    (1024, 1024, 1024),  # large enough for cuBLASLt's one-time timing of its candidates
]


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return np.matmul(a, b)  # exact, wrapping like the GPU kernel
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _check(out: gp.GPUArray, ref: np.ndarray, tol_key: str) -> None:
    host = out.to_numpy()
    assert host.shape == ref.shape
    if tol_key in TOL:
        out64 = host.astype(np.float64)
        ref64 = ref.astype(np.float64)
        denom = np.linalg.norm(ref64.ravel()) or 1.0
        err = np.linalg.norm((out64 - ref64).ravel()) / denom
        assert err <= TOL[tol_key], f"relative error {err} > {TOL[tol_key]}"
    else:
        np.testing.assert_array_equal(host, ref.astype(host.dtype))


def _tf32_exact(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to TF32's 10-bit mantissa, so a TF32 product differs from the float64
    reference by fp32 accumulation only (TF32 input rounding alone is ~4e-4 of the result,
    too close to the 5e-4 limit for random data to pass reliably)."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_2d_floats(
    gemm: str, rand: Callable[..., np.ndarray], dtype: str, shape: Any
) -> None:
    m, k, n = shape
    a, b = rand((m, k), dtype), rand((k, n), dtype)
    out = gp.from_numpy(a) @ gp.from_numpy(b)
    assert out.dtype == a.dtype
    _check(out, _ref(a, b), dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_matmul_2d_integers(gemm: str, rand: Callable[..., np.ndarray], dtype: str) -> None:
    a, b = rand((7, 33), dtype), rand((33, 129), dtype)
    out = gp.matmul(gp.from_numpy(a), gp.from_numpy(b))
    assert out.dtype == a.dtype
    _check(out, np.matmul(a, b), dtype)


@pytest.mark.parametrize(
    "shape", [(7, 33, 129), (128, 64, 256), (129, 1000, 33), (300, 200, 264), (256, 512, 512)]
)
def test_tf32_opt_in(
    gemm: str, rand: Callable[..., np.ndarray], monkeypatch: pytest.MonkeyPatch, shape: Any
) -> None:
    m, k, n = shape
    a, b = _tf32_exact(rand((m, k))), _tf32_exact(rand((k, n)))
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    _check(gp.matmul(ga, gb, allow_tf32=True), _ref(a, b), "tf32")
    monkeypatch.setenv("PYGPUKIT_ALLOW_TF32", "1")
    _check(ga @ gb, _ref(a, b), "tf32")
    # An explicit False wins over the variable: full fp32 on random (not TF32-exact) data.
    x, y = rand((m, k)), rand((k, n))
    _check(gp.matmul(gp.from_numpy(x), gp.from_numpy(y), allow_tf32=False), _ref(x, y), "float32")


# With PYGPUKIT_GEMM_BACKEND=own, float32 with TF32 runs gemm_wgmma_tf32 on SM 9.0 (both operands
# repacked K-major and rounded to TF32 in pool scratch) when m >= 64, n >= 64 and m*n*k >= 128^3;
# smaller problems and other SMs run the mma.sync kernel. The shapes below take the wgmma path on
# Hopper: whole tiles, partial M/N/K tiles, K not a multiple of 4 (zero-padded packed rows),
# N below one 256-wide tile, many K tiles on a single output tile, an odd N (scalar stores).
TF32_WGMMA_SHAPES = [
    (128, 64, 256),
    (1024, 1024, 1024),
    (300, 200, 264),
    (257, 131, 389),
    (1000, 70, 96),
    (64, 4099, 64),
    (130, 517, 1031),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TF32_WGMMA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tf32_wgmma_shapes(gemm: str, rand: Callable[..., np.ndarray], shape: Any) -> None:
    m, k, n = shape
    a, b = _tf32_exact(rand((m, k))), _tf32_exact(rand((k, n)))
    out = gp.matmul(gp.from_numpy(a), gp.from_numpy(b), allow_tf32=True)
    _check(out, _ref(a, b), "tf32")


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("ashape", "bshape"),
    [
        ((3, 200, 136), (3, 136, 260)),  # batched, partial tiles
        ((2, 130, 67), (67, 300)),  # B broadcast (batch stride 0: packed once)
        ((130, 64), (4, 64, 129)),  # A broadcast
        ((2, 1, 128, 96), (1, 3, 96, 256)),  # both broadcast on different axes
    ],
)
def test_tf32_wgmma_batched(
    gemm: str, rand: Callable[..., np.ndarray], ashape: Any, bshape: Any
) -> None:
    a, b = _tf32_exact(rand(ashape)), _tf32_exact(rand(bshape))
    out = gp.matmul(gp.from_numpy(a), gp.from_numpy(b), allow_tf32=True)
    ref = _ref(a, b)
    assert out.shape == ref.shape
    _check(out, ref, "tf32")


@pytest.mark.gpu
def test_tf32_wgmma_views(gemm: str, rand: Callable[..., np.ndarray]) -> None:
    """Transposed, batched-transposed and strided operands are read in place by the packing pass
    (a K-major B needs no transpose, a row-major A is transposed by it)."""
    x, y = _tf32_exact(rand((300, 200))), _tf32_exact(rand((260, 300)))
    gx, gy = gp.from_numpy(x), gp.from_numpy(y)

    def mm(p: gp.GPUArray, q: gp.GPUArray) -> gp.GPUArray:
        return gp.matmul(p, q, allow_tf32=True)

    _check(mm(gx.T, gy.T), _ref(x.T, y.T), "tf32")  # both transposed
    _check(mm(gx.T, gx), _ref(x.T, x), "tf32")  # A transposed
    _check(mm(gy, gx), _ref(y, x), "tf32")  # both row-major
    _check(mm(gy[:, ::2], gx[::2, :]), _ref(y[:, ::2], x[::2, :]), "tf32")  # strided
    z = _tf32_exact(rand((3, 150, 260)))
    gz = gp.from_numpy(z)
    _check(mm(gz.swapaxes(1, 2), gz), _ref(z.swapaxes(1, 2), z), "tf32")  # batched transposed


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [(256, 512, 256), (300, 200, 264), (32, 512, 48)],  # wgmma on Hopper; mma.sync (m < 64)
    ids=lambda s: "x".join(map(str, s)),
)
def test_tf32_rounds_inputs_to_nearest(
    gemm: str, rand: Callable[..., np.ndarray], shape: Any
) -> None:
    """Our kernels round fp32 inputs to TF32 to nearest. On positive data the rounding errors
    cancel over K (relative error ~3e-5 at K >= 200) while truncating the low mantissa bits, which
    a wgmma reading fp32 straight from shared memory does, biases every product down (~7e-4)."""
    if gemm != "own":
        pytest.skip("how cuBLASLt converts fp32 inputs to TF32 is its own choice")
    m, k, n = shape
    a, b = np.abs(rand((m, k))), np.abs(rand((k, n)))
    out = gp.matmul(gp.from_numpy(a), gp.from_numpy(b), allow_tf32=True).to_numpy()
    ref = _ref(a, b)
    err = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err <= 1e-4, f"relative error {err}: TF32 inputs not rounded to nearest?"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(
    ("ashape", "bshape"),
    [
        ((5, 33, 17), (5, 17, 65)),
        ((2, 3, 7, 33), (33, 9)),
        ((7, 33), (4, 33, 9)),
        ((3, 1, 7, 16), (1, 4, 16, 24)),
        ((2, 1, 130, 64), (3, 64, 128)),
    ],
)
def test_batched_broadcast(
    gemm: str, rand: Callable[..., np.ndarray], dtype: str, ashape: Any, bshape: Any
) -> None:
    a, b = rand(ashape, dtype), rand(bshape, dtype)
    out = gp.from_numpy(a) @ gp.from_numpy(b)
    ref = _ref(a, b)
    assert out.shape == ref.shape
    _check(out, ref, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64", "int32"])
def test_transposed_and_strided_views(
    gemm: str, rand: Callable[..., np.ndarray], dtype: str
) -> None:
    x, y = rand((65, 33), dtype), rand((129, 65), dtype)
    gx, gy = gp.from_numpy(x), gp.from_numpy(y)
    tol = dtype if dtype in TOL else "exact"
    _check(gx.T @ gy.T, _ref(x.T, y.T), tol)  # both transposed
    _check(gx.T @ gx, _ref(x.T, x), tol)
    _check(gy @ gx, _ref(y, x), tol)
    z = rand((3, 40, 66), dtype)
    gz = gp.from_numpy(z)
    _check(gz.swapaxes(1, 2) @ gz, _ref(z.swapaxes(1, 2), z), tol)  # batched transposed
    _check(gz[:, ::2, 1::2] @ gx[:33:1, ::3], _ref(z[:, ::2, 1::2], x[:33, ::3]), tol)  # strided


def test_vectors(gemm: str, rand: Callable[..., np.ndarray]) -> None:
    a, v, w = rand((7, 33)), rand((33,)), rand((7,))
    b3 = rand((2, 33, 5))
    ga, gv, gw, gb3 = (gp.from_numpy(t) for t in (a, v, w, b3))
    for left, right, hl, hr in [
        (ga, gv, a, v),
        (gw, ga, w, a),
        (gv, gv, v, v),
        (gv, gb3, v, b3),
    ]:
        out = left @ right
        ref = _ref(hl, hr)
        assert out.shape == ref.shape
        _check(out, ref, "float32")


def test_promotion_and_out(gemm: str, rand: Callable[..., np.ndarray]) -> None:
    a16, bbf = rand((7, 33), "float16"), rand((33, 9), "bfloat16")
    out = gp.from_numpy(a16) @ gp.from_numpy(bbf)
    assert out.dtype == np.float32
    _check(out, _ref(a16, bbf), "float32")
    a8, b32 = rand((7, 33), "int8"), rand((33, 9), "float32")
    assert (gp.from_numpy(a8) @ gp.from_numpy(b32)).dtype == np.float32
    a, b = rand((7, 33)), rand((33, 9))
    target = gp.from_numpy(rand((7, 9), "float64"))
    got = gp.matmul(gp.from_numpy(a), gp.from_numpy(b), out=target)
    assert got is target
    _check(target, _ref(a, b), "float32")
    sq, sq2 = rand((16, 16)), rand((16, 16))
    gsq = gp.from_numpy(sq)
    gsq @= gp.from_numpy(sq2)
    _check(gsq, _ref(sq, sq2), "float32")
    c = gp.from_numpy(rand((16, 16)))
    ref = _ref(c.to_numpy(), c.to_numpy())
    gp.matmul(c, c, out=c)  # out aliases both operands
    _check(c, ref, "float32")


def test_empty_and_zero_k(gemm: str, rand: Callable[..., np.ndarray]) -> None:
    out = gp.from_numpy(rand((0, 5))) @ gp.from_numpy(rand((5, 3)))
    assert out.shape == (0, 3)
    z = gp.from_numpy(np.ones((4, 0), np.float32)) @ gp.from_numpy(np.ones((0, 3), np.float32))
    np.testing.assert_array_equal(z.to_numpy(), np.zeros((4, 3), np.float32))


def test_shape_errors(gemm: str, rand: Callable[..., np.ndarray]) -> None:
    a, b = gp.from_numpy(rand((7, 33))), gp.from_numpy(rand((32, 9)))
    with pytest.raises(ValueError, match="contracted"):
        a @ b
    with pytest.raises(ValueError, match="broadcast"):
        gp.from_numpy(rand((2, 7, 33))) @ gp.from_numpy(rand((3, 33, 9)))
    with pytest.raises(ValueError):
        gp.from_numpy(np.float32(1.0).reshape(())) @ a
    with pytest.raises(ValueError, match="out"):
        gp.matmul(a, gp.from_numpy(rand((33, 9))), out=gp.empty((7, 8)))
    with pytest.raises(TypeError):
        gp.matmul(a, rand((33, 9)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "tf32"])
@pytest.mark.parametrize("shape", [(64, 96, 128), (1024, 1024, 1024)])
def test_matmul_in_graph_capture(
    gemm: str, rand: Callable[..., np.ndarray], shape: Any, dtype: str
) -> None:
    """A matmul captured on a fresh stream (its cuBLASLt workspace and any timing pass cannot
    happen inside the capture) replays correctly; TF32 at 1024^3 on Hopper allocates its packed
    operands from the pool inside the capture."""
    if gp.backend_name() != "cuda":
        pytest.skip("needs the CUDA backend")
    m, k, n = shape
    if dtype == "tf32":
        a, b = _tf32_exact(rand((m, k))), _tf32_exact(rand((k, n)))
    else:
        a, b = rand((m, k), dtype), rand((k, n), dtype)
    stream = gp.Stream()
    with stream:
        ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    stream.synchronize()
    with stream, gp.graph_capture() as graph:
        out = gp.matmul(ga, gb, allow_tf32=dtype == "tf32")
    graph.replay(stream)
    stream.synchronize()
    _check(out, _ref(a, b), dtype)


@pytest.mark.gpu
def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    if gp.backend_name() != "cuda":
        pytest.skip("needs the CUDA backend")
    from pygpukit.backend import cuda_linalg

    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", "own")
    assert cuda_linalg.matmul_implementation("bfloat16", False) == "mma"
    assert cuda_linalg.matmul_implementation("float32", False) == "simt"
    assert cuda_linalg.matmul_implementation("float32", True) == "mma"
    assert cuda_linalg.matmul_implementation("int32", False) == "naive"
    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", "cublaslt")
    if cuda_linalg.cublaslt_status()["loaded"]:
        assert cuda_linalg.matmul_implementation("bfloat16", False) == "cublaslt"
    else:
        with pytest.raises(LibraryNotFoundError):
            gp.ones((2, 2)) @ gp.ones((2, 2))
    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", "fastest")
    with pytest.raises(ValueError):
        gp.ones((2, 2)) @ gp.ones((2, 2))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
def test_one_call_path_equals_general_path(
    gemm: str, rand: Callable[..., np.ndarray], dtype: str
) -> None:
    """The one-backend-call path of 2-D and equal-batch 3-D products gives what the general
    path (views, allocation and product made step by step) gives, views included."""
    from pygpukit.linalg import _matmul_general

    x, y, z = rand((65, 33), dtype), rand((33, 130), dtype), rand((3, 40, 66), dtype)
    gx, gy, gz = (gp.from_numpy(t) for t in (x, y, z))
    pairs = [
        (gx, gy),
        (gy.T, gx.T),
        (gx[::2, 1:], gy[1:, ::3]),
        (gz, gz.swapaxes(1, 2)),
        (gz.swapaxes(1, 2)[:, 1:], gz[:, :, :7]),
    ]
    for left, right in pairs:
        fast, general = gp.matmul(left, right), _matmul_general(left, right, None, None)
        assert fast.shape == general.shape and fast.dtype == general.dtype
        assert fast.is_contiguous() and fast.flags.writeable
        np.testing.assert_array_equal(fast.to_numpy(), general.to_numpy())
        tol = dtype if dtype in TOL else "exact"
        _check(fast, _ref(left.to_numpy(), right.to_numpy()), tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_nt(gemm: str, rand: Callable[..., np.ndarray], dtype: str) -> None:
    """``linalg.matmul_nt``: ``out = x @ w.T`` with x [..., K], in one backend call."""
    from pygpukit.linalg import matmul_nt

    x, w = rand((2, 5, 48), dtype), rand((72, 48), dtype)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w)
    out = gp.empty((2, 5, 72), dtype)
    matmul_nt(gx, gw, out)
    _check(out, _ref(x, w.T), dtype)
    wt = rand((48, 72), dtype)  # a weight that is itself a transposed view
    flat = gp.empty((10 * 72,), dtype)  # any C-contiguous out of M * N elements
    matmul_nt(gx, gp.from_numpy(wt).T, flat)
    _check(flat.reshape(2, 5, 72), _ref(x, wt), dtype)
    with pytest.raises(ValueError):
        matmul_nt(gx.swapaxes(0, 1), gw, out)  # x not C-contiguous
    with pytest.raises(ValueError):
        matmul_nt(gx, gw, gp.empty((2, 5, 71), dtype))  # out of the wrong size
    assert matmul_nt(gx, gw, out) is out  # the out given is the result


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_nt_new_result(gemm: str, rand: Callable[..., np.ndarray], dtype: str) -> None:
    """``linalg.matmul_nt(x, w)`` without ``out``: a new C-contiguous ``[..., N]`` array."""
    from pygpukit.linalg import matmul_nt

    x, w = rand((3, 7, 40), dtype), rand((24, 40), dtype)
    gx = gp.from_numpy(x)
    for weight, ref_w in ((gp.from_numpy(w), w), (gp.from_numpy(w.T.copy()).T, w)):
        y = matmul_nt(gx, weight)
        assert y.shape == (3, 7, 24) and y.dtype == x.dtype
        assert y.is_contiguous() and y.flags.writeable
        _check(y, _ref(x, ref_w.T), dtype)
    two_d = matmul_nt(gp.from_numpy(x[0]), gp.from_numpy(w))
    assert two_d.shape == (7, 24)
    _check(two_d, _ref(x[0], w.T), dtype)
    with pytest.raises(ValueError):
        matmul_nt(gx, gp.from_numpy(rand((24, 41), dtype)))  # K differs
    with pytest.raises(ValueError):
        matmul_nt(gx.swapaxes(0, 1), gp.from_numpy(w))  # x not C-contiguous
    with pytest.raises(ValueError):
        matmul_nt(gx, gp.from_numpy(rand((2, 24, 40), dtype)))  # a 3-D weight


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cublaslt_timed_choice(
    monkeypatch: pytest.MonkeyPatch, rand: Callable[..., np.ndarray], dtype: str
) -> None:
    """A 1024^3 product times every cuBLASLt candidate (3 rounds, each keeping its fastest) and
    runs the fastest (within 2%, the heuristic's order breaking ties); a 32^3 one runs the
    heuristic's first untimed. ``cublaslt_plans`` reports both, and the results stay right."""
    if gp.backend_name() != "cuda":
        pytest.skip("needs the CUDA backend")
    from pygpukit.backend import cuda_linalg

    if not cuda_linalg.cublaslt_status()["loaded"]:
        pytest.skip("cuBLASLt is not installed")
    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", "cublaslt")
    for n in (32, 1024):
        a, b = rand((n, n), dtype), rand((n, n), dtype)
        _check(gp.from_numpy(a) @ gp.from_numpy(b), _ref(a, b), dtype)
    plans = {
        p["m"]: p
        for p in cuda_linalg._native.cublaslt_plans(gp.get_device())
        if p["dtype"] == dtype and p["m"] == p["n"] == p["k"] and p["batch"] == 1
    }
    small, large = plans[32], plans[1024]
    assert not small["tuned"] and small["chosen"] == 0 and small["candidates"]
    assert large["tuned"] and len(large["candidates"]) >= 1
    costs = [max(c["gpu_us"], c["host_us"]) for c in large["candidates"] if c["gpu_us"] >= 0]
    assert costs, "no candidate could be timed"
    chosen = large["candidates"][large["chosen"]]
    assert chosen["gpu_us"] > 0 and chosen["algo_id"] >= 0
    assert max(chosen["gpu_us"], chosen["host_us"]) <= min(costs) * 1.02 + 1e-6
    # M = 1100 is in 1024's power-of-two bucket: the plan reuses 1024's timed choice when the
    # heuristic offers that algorithm again (else it times its own candidates).
    a, b = rand((1100, 1024), dtype), rand((1024, 1024), dtype)
    _check(gp.from_numpy(a) @ gp.from_numpy(b), _ref(a, b), dtype)
    near = next(
        p
        for p in cuda_linalg._native.cublaslt_plans(gp.get_device())
        if p["dtype"] == dtype and (p["m"], p["n"], p["k"], p["batch"]) == (1100, 1024, 1024, 1)
    )
    assert near["tuned"] != near["inherited"]
    if near["inherited"]:
        config = ("algo_id", "tile", "stages", "splitk", "reduction", "swizzle", "custom")
        got = near["candidates"][near["chosen"]]
        assert all(got[f] == chosen[f] for f in config)


@pytest.mark.gpu
def test_native_shortcut_errors(rand: Callable[..., np.ndarray]) -> None:
    """The raw native shortcuts (``matmul_new``, ``matmul_nt``, ``matmul_nt_new``) refuse wrong
    argument counts and types with ``TypeError`` and mismatched shapes with ``ValueError``."""
    if gp.backend_name() != "cuda":
        pytest.skip("needs the CUDA backend")
    from pygpukit.backend import cuda_linalg

    native = cuda_linalg._native
    a = gp.from_numpy(rand((4, 8), "float32"))._impl
    b = gp.from_numpy(rand((8, 3), "float32"))._impl
    w = gp.from_numpy(rand((3, 8), "float32"))._impl
    out = gp.empty((4, 3), "float32")._impl
    with pytest.raises(TypeError):
        native.matmul_new(a, b, False)  # no backend
    with pytest.raises(TypeError, match=r"must be a _native\.Array"):
        native.matmul_new(a, np.ones((8, 3)), False, "auto")
    with pytest.raises(TypeError, match="backend must be a str"):
        native.matmul_nt_new(a, w, False, 1)
    with pytest.raises(ValueError, match="backend must be"):
        native.matmul_nt(a, w, out, False, "fastest")
    with pytest.raises(ValueError):
        native.matmul_new(a, a, False, "auto")  # (4, 8) @ (4, 8)
    with pytest.raises(ValueError):
        native.matmul_nt_new(a, b, False, "auto")  # K = 8 against w's 3 columns
    got = native.matmul_nt_new(a, w, True, "auto")  # any truthy flag
    assert tuple(got.shape) == (4, 3)

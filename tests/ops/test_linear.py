"""pygpukit.ops.linear on the current backend (CPU in CI): gemv and linear vs float64 NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import act_ref, linear_ref, rel_err

import pygpukit as gp
from pygpukit.ops import config, gemv, linear
from pygpukit.ops.linear import ACTIVATIONS, GEMV_VARIANTS, gemv_variant

LIMITS = {np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
HALF = [gp.float16, gp.bfloat16]
ALL = [gp.float32, gp.float16, gp.bfloat16]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("m", range(1, 9))
def test_gemv_matches_float64(rand: Callable[..., np.ndarray], dtype: object, m: int) -> None:
    n, k = 37, 203  # odd N, K not a multiple of 8
    x, w = rand((m, k), dtype), rand((n, k), dtype)
    y = gemv(gp.from_numpy(x), gp.from_numpy(w))
    assert y.shape == (m, n) and y.dtype == np.dtype(dtype)
    assert rel_err(y.to_numpy(), linear_ref(x, w, None, None)) < LIMITS[np.dtype(dtype)]


def test_gemv_vector_x_and_out(rand: Callable[..., np.ndarray]) -> None:
    x, w = rand((64,), gp.bfloat16), rand((24, 64), gp.bfloat16)
    out = gp.empty((24,), gp.bfloat16)
    y = gemv(gp.from_numpy(x), gp.from_numpy(w), out=out)
    assert y is out
    assert rel_err(out.to_numpy(), linear_ref(x, w, None, None)) < 1e-2


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("m", [1, 5, 8, 9, 40])
@pytest.mark.parametrize("dtype", ALL)
def test_linear_matches_float64(
    rand: Callable[..., np.ndarray], dtype: object, m: int, with_bias: bool, activation: str | None
) -> None:
    n, k = 33, 72
    x, w, b = rand((m, k), dtype), rand((n, k), dtype), rand((n,), dtype)
    bias = gp.from_numpy(b) if with_bias else None
    y = linear(gp.from_numpy(x), gp.from_numpy(w), bias, activation=activation)
    ref = linear_ref(x, w, b if with_bias else None, activation)
    assert y.shape == (m, n)
    assert rel_err(y.to_numpy(), ref) < LIMITS[np.dtype(dtype)]


def test_linear_leading_dims_and_out(rand: Callable[..., np.ndarray]) -> None:
    x, w, b = rand((2, 3, 40), gp.float16), rand((11, 40), gp.float16), rand((11,), gp.float16)
    out = gp.empty((2, 3, 11), gp.float16)
    y = linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), activation="silu", out=out)
    assert y is out
    assert rel_err(out.to_numpy(), linear_ref(x, w, b, "silu")) < 3e-3


def test_activation_definitions_differ(rand: Callable[..., np.ndarray]) -> None:
    # The activations must actually be applied: each result differs from the plain product.
    x, w = rand((2, 16), np.float32), rand((8, 16), np.float32)
    plain = linear(gp.from_numpy(x), gp.from_numpy(w)).to_numpy()
    for activation in ("relu", "gelu", "gelu_tanh", "silu"):
        got = linear(gp.from_numpy(x), gp.from_numpy(w), activation=activation).to_numpy()
        assert not np.allclose(got, plain)
        assert rel_err(got, act_ref(plain.astype(np.float64), activation)) < 1e-5


def _arrays(rand: Callable[..., np.ndarray]) -> tuple[gp.GPUArray, gp.GPUArray]:
    return gp.from_numpy(rand((2, 16), gp.bfloat16)), gp.from_numpy(rand((8, 16), gp.bfloat16))


def test_errors(rand: Callable[..., np.ndarray]) -> None:
    x, w = _arrays(rand)
    with pytest.raises(TypeError, match="x must be a GPUArray"):
        linear(np.ones((2, 16)), w)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight has dtype"):
        linear(x, gp.from_numpy(rand((8, 16), gp.float16)))
    with pytest.raises(ValueError, match="features"):
        linear(x, gp.from_numpy(rand((8, 15), gp.bfloat16)))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        linear(x, gp.from_numpy(rand((16,), gp.bfloat16)))
    with pytest.raises(ValueError, match="bias must have shape"):
        linear(x, w, gp.from_numpy(rand((7,), gp.bfloat16)))
    with pytest.raises(TypeError, match="bias has dtype"):
        linear(x, w, gp.from_numpy(rand((8,), np.float32)))
    with pytest.raises(ValueError, match="activation must be one of"):
        linear(x, w, activation="tanh")
    with pytest.raises(ValueError, match="out must have shape"):
        linear(x, w, out=gp.empty((2, 7), gp.bfloat16))
    with pytest.raises(TypeError, match="out must have dtype"):
        linear(x, w, out=gp.empty((2, 8), gp.float32))
    with pytest.raises(ValueError, match="weight must be C-contiguous"):
        linear(x, gp.from_numpy(rand((16, 8), gp.bfloat16)).T)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        linear(gp.from_numpy(rand((16, 2), gp.bfloat16)).T, w)
    with pytest.raises(TypeError, match="x must have dtype"):
        linear(gp.from_numpy(rand((2, 16), np.int32)), w)


@pytest.mark.parametrize(("dtype", "m"), [(gp.bfloat16, 16), (np.float32, 2)])
def test_plain_product_shapes_and_errors(
    rand: Callable[..., np.ndarray], dtype: object, m: int
) -> None:
    """No bias, activation or ``out``, beyond the GEMV rows (or float32): on the GPU the one
    runtime call. Its results, and the errors of bad arguments, are those of the general path."""
    lim = LIMITS[np.dtype(dtype)]
    x, w = rand((2, m, 40), dtype), rand((24, 40), dtype)
    y = linear(gp.from_numpy(x), gp.from_numpy(w))
    assert y.shape == (2, m, 24) and y.dtype == np.dtype(dtype) and y.is_contiguous()
    expected = linear_ref(x.reshape(-1, 40), w, None, None).reshape(y.shape)
    assert rel_err(y.to_numpy(), expected) < lim
    gx, gw = gp.from_numpy(x[0]), gp.from_numpy(w)
    with pytest.raises(TypeError, match="weight must be a GPUArray"):
        linear(gx, w)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight has dtype"):
        linear(gx, gp.from_numpy(rand((24, 40), gp.float16)))
    with pytest.raises(ValueError, match="features"):
        linear(gx, gp.from_numpy(rand((24, 39), dtype)))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        linear(gx, gp.from_numpy(rand((2, 24, 40), dtype)))
    with pytest.raises(ValueError, match="weight must be C-contiguous"):
        linear(gx, gp.from_numpy(rand((40, 24), dtype)).T)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        linear(gp.from_numpy(rand((40, m), dtype)).T, gw)
    with pytest.raises(TypeError, match="x must have dtype"):
        linear(gp.from_numpy(rand((m, 40), np.int32)), gp.from_numpy(rand((24, 40), np.int32)))


def test_gemv_errors(rand: Callable[..., np.ndarray]) -> None:
    x, w = _arrays(rand)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        gemv(gp.from_numpy(rand((9, 16), gp.bfloat16)), w)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        gemv(gp.from_numpy(rand((2, 16), np.float32)), gp.from_numpy(rand((8, 16), np.float32)))
    with pytest.raises(ValueError, match="x must be 1 or 2-D"):
        gemv(gp.from_numpy(rand((1, 2, 16), gp.bfloat16)), w)
    with pytest.raises(ValueError, match="out must have shape"):
        gemv(x, w, out=gp.empty((8, 2), gp.bfloat16))


def test_benchmark_suite_smoke() -> None:
    """The ops_linear suite's cases run and pass their correctness check on this backend."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import HarnessConfig, measure
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import linear as suite

    rng = np.random.default_rng()
    backend = PyGPUkitLibrary.backend_name(gp)
    ctx = SuiteContext(backend, True, DataCache(rng), rng, sizes=[40])
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(max_reps=2, min_reps=1, budget_s=0.05, warmup_s=0.0, target_rep_ms=0.1)
    results = [measure(case, lib, cfg) for case in suite.SUITE.cases(ctx)]
    # Three shapes; on a GPU one row per GEMV variant each.
    assert len(results) >= 3 and all(r.status == "ok" for r in results), [r.reason for r in results]


def test_gemv_variant_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset or auto: simt for one row of x, mma for more; a named variant applies to every M.

    The knob is read once into ops.config: a change to the environment counts after reload().
    """
    try:
        for unset in (None, "", "auto"):
            if unset is None:
                monkeypatch.delenv("PYGPUKIT_GEMV_VARIANT", raising=False)
            else:
                monkeypatch.setenv("PYGPUKIT_GEMV_VARIANT", unset)
            config.reload()
            assert [gemv_variant(m) for m in range(1, 9)] == ["simt"] + ["mma"] * 7
        for name in GEMV_VARIANTS:
            monkeypatch.setenv("PYGPUKIT_GEMV_VARIANT", name)
            assert gemv_variant(1) == "simt"  # not read again until reload()
            config.reload()
            assert {gemv_variant(m) for m in range(1, 9)} == {name}
        monkeypatch.setenv("PYGPUKIT_GEMV_VARIANT", "r3u3")
        with pytest.raises(ValueError, match="PYGPUKIT_GEMV_VARIANT='r3u3' is not valid"):
            config.reload()
        with pytest.raises(ValueError, match=r"gemv_variant .* must be one of auto, simt, mma"):
            config.set(gemv_variant="r3u3")
        assert gemv_variant(2) == "mma"  # the bad value left the configuration as it was
    finally:
        monkeypatch.undo()
        config.reload()


def test_benchmark_rows_per_variant_on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU every variant gets a row and PyTorch is shared; a pinned variant runs alone."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import linear as suite

    rng = np.random.default_rng()
    ctx = SuiteContext("cuda", True, DataCache(rng), rng, sizes=[64])
    with config.override(gemv_variant="auto"):
        every = list(suite.SUITE.cases(ctx))
    cases = [c for c in every if c.op == "gemv"]
    assert len(cases) == 3 * len(GEMV_VARIANTS)
    assert {c.params["kernel"] for c in cases} == set(GEMV_VARIANTS)
    assert len({c.peer_key for c in cases}) == 3
    # The GEMM-path rows: one per row count, on PyGPUkit's default path.
    linear_rows = [c for c in every if c.op == "linear"]
    assert [c.params["m"] for c in linear_rows] == list(suite.LINEAR_ROWS)
    assert all("kernel" not in c.params and c.flops for c in linear_rows)
    with config.override(gemv_variant="mma"):
        cases = [c for c in suite.SUITE.cases(ctx) if c.op == "gemv"]
    assert len(cases) == 3 and all("kernel" not in c.params for c in cases)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("m", [1, 3, 8])
def test_gemv_float32_out_is_unrounded(
    rand: Callable[..., np.ndarray], dtype: object, m: int
) -> None:
    # Language-model logits: rounded to bfloat16, close top values become ties.
    n, k = 40, 576
    x, w = rand((m, k), dtype), rand((n, k), dtype)
    y = gemv(gp.from_numpy(x), gp.from_numpy(w), out_dtype=gp.float32).to_numpy()
    assert y.dtype == np.float32 and y.shape == (m, n)
    assert rel_err(y, linear_ref(x, w, None, None)) < 1e-6
    assert np.mean(y != y.astype(dtype).astype(np.float32)) > 0.5  # not 16-bit values


def test_gemv_float32_out_errors(rand: Callable[..., np.ndarray]) -> None:
    x, w = gp.from_numpy(rand((2, 64), gp.bfloat16)), gp.from_numpy(rand((8, 64), gp.bfloat16))
    with pytest.raises(TypeError, match="out_dtype"):
        gemv(x, w, out_dtype=gp.float16)
    with pytest.raises(TypeError, match="out"):  # out must have out_dtype
        gemv(x, w, out_dtype=gp.float32, out=gp.empty((2, 8), gp.bfloat16))
    out = gp.empty((2, 8), gp.float32)
    assert gemv(x, w, out_dtype=gp.float32, out=out) is out

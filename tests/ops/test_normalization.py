"""rmsnorm, layernorm and the fused residual forms on the CPU backend, against float64 NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import ln_ref, rel_err, rms_ref

import pygpukit as gp
from pygpukit import ops

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)


Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (4, 7), (2, 3, 64), (5, 1)])
def test_rmsnorm(rand: Rand, dtype: str, shape: tuple[int, ...]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w = rand(shape, dt), rand(shape[-1:], dt)
    y = ops.rmsnorm(gp.from_numpy(x), gp.from_numpy(w), 1e-6)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y.to_numpy(), rms_ref(x, w, 1e-6)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", [(3,), (4, 7), (2, 3, 96)])
def test_layernorm(rand: Rand, dtype: str, with_bias: bool, shape: tuple[int, ...]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w, b = rand(shape, dt), rand(shape[-1:], dt), rand(shape[-1:], dt)
    bias = gp.from_numpy(b) if with_bias else None
    y = ops.layernorm(gp.from_numpy(x), gp.from_numpy(w), bias, eps=1e-5)
    ref = ln_ref(x, w, b if with_bias else None, 1e-5)
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]


def test_layernorm_large_offset(rand: Rand) -> None:
    # The variance comes from centred values: E[x^2] - E[x]^2 would lose ~10% to cancellation.
    x = (rand((4, 256), np.float32) / 3 + 1e3).astype(np.float32)
    w = np.ones(256, np.float32)
    y = ops.layernorm(gp.from_numpy(x), gp.from_numpy(w)).to_numpy()
    assert rel_err(y, ln_ref(x, w, None, 1e-5)) < 1e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer", [False, True])
def test_add_norm(rand: Rand, dtype: str, layer: bool) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, r, w, b = rand((3, 40), dt), rand((3, 40), dt), rand((40,), dt), rand((40,), dt)
    gx, gr, gw = gp.from_numpy(x), gp.from_numpy(r), gp.from_numpy(w)
    if layer:
        s, y = ops.add_layernorm(gx, gr, gw, gp.from_numpy(b), eps=1e-5)
    else:
        s, y = ops.add_rmsnorm(gx, gr, gw, eps=1e-6)
    # The sum is rounded to the dtype, and the norm is of the rounded sum.
    s_ref = (x.astype(np.float64) + r.astype(np.float64)).astype(dt)
    np.testing.assert_array_equal(s.to_numpy(), s_ref)
    ref = ln_ref(s_ref, w, b, 1e-5) if layer else rms_ref(s_ref, w, 1e-6)
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]
    # The inputs are untouched.
    np.testing.assert_array_equal(gx.to_numpy(), x)
    np.testing.assert_array_equal(gr.to_numpy(), r)


def test_out_and_inplace(rand: Rand) -> None:
    x, w = rand((6, 32), np.float32), rand((32,), np.float32)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w)
    out = gp.empty((6, 32), np.float32)
    assert ops.rmsnorm(gx, gw, out=out) is out
    assert rel_err(out.to_numpy(), rms_ref(x, w, 1e-6)) < 1e-5
    ops.layernorm(gx, gw, out=gx)
    assert rel_err(gx.to_numpy(), ln_ref(x, w, None, 1e-5)) < 1e-5


def test_empty_rows() -> None:
    x = gp.empty((0, 16), np.float32)
    assert ops.rmsnorm(x, gp.ones((16,), np.float32)).shape == (0, 16)


def test_argument_errors(rand: Rand) -> None:
    x = gp.from_numpy(rand((4, 8), np.float32))
    w = gp.from_numpy(rand((8,), np.float32))
    with pytest.raises(ValueError, match="weight must have shape"):
        ops.rmsnorm(x, gp.from_numpy(rand((7,), np.float32)))
    with pytest.raises(TypeError, match="weight has dtype"):
        ops.rmsnorm(x, gp.from_numpy(rand((8,), np.float16)))
    with pytest.raises(TypeError, match="x must have dtype"):
        ops.rmsnorm(gp.from_numpy(rand((4, 8), np.int32)), w)
    with pytest.raises(ValueError, match="residual must have shape"):
        ops.add_rmsnorm(x, gp.from_numpy(rand((4, 9), np.float32)), w)
    with pytest.raises(ValueError, match="bias must have shape"):
        ops.layernorm(x, w, gp.from_numpy(rand((3,), np.float32)))
    with pytest.raises(ValueError, match="out must have shape"):
        ops.rmsnorm(x, w, out=gp.empty((4, 9), np.float32))
    with pytest.raises(ValueError, match="eps"):
        ops.rmsnorm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.rmsnorm(
            gp.from_numpy(rand((8, 4), np.float32)).T, gp.from_numpy(rand((8,), np.float32))
        )

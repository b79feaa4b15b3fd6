"""silu_mul, gelu_mul, embedding and softmax on the CPU backend, against float64 NumPy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import gated_ref, rel_err, softmax_ref

import pygpukit as gp
from pygpukit import ops

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["silu", "tanh", "none"])
@pytest.mark.parametrize("shape", [(6,), (3, 14), (2, 5, 128)])
def test_gated(rand: Rand, dtype: str, act: str, shape: tuple[int, ...]) -> None:
    x = rand(shape, gp.dtypes.normalize(dtype))
    gx = gp.from_numpy(x)
    y = ops.silu_mul(gx) if act == "silu" else ops.gelu_mul(gx, approximate=act)
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == gx.dtype
    assert rel_err(y.to_numpy(), gated_ref(x, act)) < TOL[dtype]


def test_gated_errors(rand: Rand) -> None:
    with pytest.raises(ValueError, match="2\\*d"):
        ops.silu_mul(gp.from_numpy(rand((3, 5), np.float32)))
    with pytest.raises(ValueError, match="approximate"):
        ops.gelu_mul(gp.from_numpy(rand((3, 4), np.float32)), approximate="erf")
    out = gp.empty((3, 2), np.float32)
    assert ops.silu_mul(gp.from_numpy(rand((3, 4), np.float32)), out=out) is out


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("table_dtype", ["float32", "bfloat16", "float16", "int8"])
def test_embedding(rng: np.random.Generator, rand: Rand, id_dtype: type, table_dtype: str) -> None:
    table = rand((11, 6), gp.dtypes.normalize(table_dtype))
    ids: np.ndarray = rng.integers(0, 11, size=(2, 5)).astype(id_dtype)
    y = ops.embedding(gp.from_numpy(ids), gp.from_numpy(table))
    assert y.shape == (2, 5, 6) and y.dtype == table.dtype
    np.testing.assert_array_equal(y.to_numpy(), table[ids])


def test_embedding_out_of_range(rand: Rand) -> None:
    if gp.is_cuda_available():
        pytest.skip("the CPU backend's check; the GPU writes zeros (tests/ops/gpu)")
    table = gp.from_numpy(rand((4, 3), np.float32))
    for bad in (4, -1):
        with pytest.raises(IndexError, match=r"\[0, 4\)"):
            ops.embedding(gp.from_numpy(np.array([0, bad], np.int64)), table)
    with pytest.raises(TypeError, match="ids must have dtype"):
        ops.embedding(gp.from_numpy(np.array([0.0], np.float32)), table)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (2, 2, 257)])
def test_softmax(rand: Rand, dtype: str, shape: tuple[int, ...]) -> None:
    x = rand(shape, gp.dtypes.normalize(dtype))
    y = ops.softmax(gp.from_numpy(x))
    assert rel_err(y.to_numpy(), softmax_ref(x)) < TOL[dtype]


def test_softmax_out_and_large_values(rand: Rand) -> None:
    x = (rand((4, 50), np.float32) * 100).astype(np.float32)
    gx = gp.from_numpy(x)
    assert ops.softmax(gx, out=gx) is gx
    assert rel_err(gx.to_numpy(), softmax_ref(x)) < 1e-5

"""instance_norm, ada_in (with fused LeakyReLU / Snake), channel_layernorm, snake and
leaky_relu against float64 NumPy on odd and even shapes and every float dtype; their errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import (
    ada_in_ref,
    channel_layernorm_ref,
    leaky_relu_ref,
    snake_ref,
)

import pygpukit as gp
from pygpukit import ops

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
SHAPES = [(2, 3, 17), (1, 8, 64), (3, 5, 1001), (2, 1, 2)]
Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm(rand: Rand, dtype: str, shape: tuple[int, int, int], affine: bool) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w, b = rand(shape, dt), rand(shape[1:2], dt), rand(shape[1:2], dt)
    args = (gp.from_numpy(w), gp.from_numpy(b)) if affine else ()
    y = ops.instance_norm(gp.from_numpy(x), *args)
    ref = ada_in_ref(x, None, None, *((w, b) if affine else ()))
    assert y.dtype == dt and rel_err(y.to_numpy(), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", [None, "leaky_relu", "snake"])
def test_ada_in(
    rand: Rand, dtype: str, shape: tuple[int, int, int], activation: str | None
) -> None:
    dt = gp.dtypes.normalize(dtype)
    batch, channels, _ = shape
    x = rand(shape, dt)
    h = rand((batch, 2 * channels), dt)  # the style projection fc(s): [gamma | beta]
    w, b = rand((channels,), dt), rand((channels,), dt)
    alpha = (np.abs(rand((channels,))) + 0.2).astype(dt)
    gh = gp.from_numpy(h)
    y = ops.ada_in(
        gp.from_numpy(x), gh[:, :channels], gh[:, channels:], weight=gp.from_numpy(w),
        bias=gp.from_numpy(b), activation=activation, negative_slope=0.2,
        alpha=gp.from_numpy(alpha) if activation == "snake" else None,
    )  # fmt: skip
    ref = ada_in_ref(x, h[:, :channels], h[:, channels:], w, b)
    if activation == "leaky_relu":
        ref = leaky_relu_ref(ref, 0.2)
    elif activation == "snake":
        ref = snake_ref(ref, alpha)
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]


def test_ada_in_in_place_and_large_offset(rand: Rand) -> None:
    x = (rand((2, 4, 300)) + 500).astype(np.float32)  # centred variance: no cancellation
    gamma, beta = rand((2, 4)), rand((2, 4))
    gx = gp.from_numpy(x)
    y = ops.ada_in(gx, gp.from_numpy(gamma), gp.from_numpy(beta), out=gx)
    assert y is gx
    assert rel_err(gx.to_numpy(), ada_in_ref(x, gamma, beta)) < 1e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_channel_layernorm(
    rand: Rand, dtype: str, shape: tuple[int, int, int], with_bias: bool
) -> None:
    dt = gp.dtypes.normalize(dtype)
    if shape[1] == 1:
        shape = (shape[0], 2, shape[2])  # one channel normalises to exactly the bias
    x, w, b = rand(shape, dt), rand(shape[1:2], dt), rand(shape[1:2], dt)
    y = ops.channel_layernorm(
        gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b) if with_bias else None
    )
    ref = channel_layernorm_ref(x, w, b if with_bias else None)
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_snake(rand: Rand, dtype: str, shape: tuple[int, int, int]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x = (rand(shape) * 3).astype(dt)
    alpha = (np.abs(rand((1, shape[1], 1))) + 0.1).astype(dt)  # PyTorch's [1, C, 1] parameter
    y = ops.snake(gp.from_numpy(x), gp.from_numpy(alpha))
    assert rel_err(y.to_numpy(), snake_ref(x, alpha.reshape(-1))) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (2, 3, 17), (4, 1001)])
@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_leaky_relu(rand: Rand, dtype: str, shape: tuple[int, ...], slope: float) -> None:
    dt = gp.dtypes.normalize(dtype)
    x = rand(shape, dt)
    gx = gp.from_numpy(x)
    y = ops.leaky_relu(gx, slope)
    assert rel_err(y.to_numpy(), leaky_relu_ref(x, slope)) < TOL[dtype]
    ops.leaky_relu(gx, slope, out=gx)  # in place
    assert rel_err(gx.to_numpy(), leaky_relu_ref(x, slope)) < TOL[dtype]


def test_channel_op_errors(rand: Rand) -> None:
    x = gp.from_numpy(rand((2, 4, 10)))
    g = gp.from_numpy(rand((2, 4)))
    with pytest.raises(ValueError, match="must be 3-D"):
        ops.instance_norm(gp.from_numpy(rand((4, 10))))
    with pytest.raises(ValueError, match="one value per channel"):
        ops.instance_norm(x, gp.from_numpy(rand((5,))))
    with pytest.raises(ValueError, match="gamma must have shape"):
        ops.ada_in(x, gp.from_numpy(rand((2, 5))), g)
    with pytest.raises(TypeError, match="gamma and beta"):
        ops.ada_in(x, None, g)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="activation must be"):
        ops.ada_in(x, g, g, activation="relu")
    with pytest.raises(ValueError, match="alpha"):
        ops.ada_in(x, g, g, activation="snake")
    with pytest.raises(ValueError, match="unit stride"):
        ops.ada_in(x, gp.from_numpy(rand((4, 2))).swapaxes(0, 1), g)
    with pytest.raises(ValueError, match="eps"):
        ops.instance_norm(x, eps=-1.0)
    with pytest.raises(TypeError, match="dtype"):
        ops.channel_layernorm(x, gp.from_numpy(rand((4,), np.float16)))
    with pytest.raises(ValueError, match="one value per channel"):
        ops.snake(x, gp.from_numpy(rand((3,))))
    with pytest.raises(ValueError, match="out must have shape"):
        ops.leaky_relu(x, out=gp.empty((2, 4, 9), gp.float32))
    with pytest.raises(TypeError, match="real number"):
        ops.leaky_relu(x, "0.1")  # type: ignore[arg-type]

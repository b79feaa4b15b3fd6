"""The [B, C, L] norms and activations on the GPU (instance_norm / ada_in with fused
activations, channel_layernorm, snake, leaky_relu) against float64 NumPy and PyTorch, at
Kokoro's sizes and odd ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
#: Kokoro's decoder and generator sizes, a long odd signal, and tiny ones.
SHAPES = [(1, 512, 301), (2, 256, 3001), (3, 7, 33), (2, 64, 20001), (1, 3, 1)]
Rand = Callable[..., np.ndarray]


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def to_torch(torch: Any, a: np.ndarray, dtype: str) -> Any:
    return torch.from_numpy(a.astype(np.float32)).cuda().to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("activation", [None, "leaky_relu", "snake"])
def test_ada_in_gpu(
    rand: Rand, dtype: str, shape: tuple[int, int, int], activation: str | None
) -> None:
    dt = gp.dtypes.normalize(dtype)
    batch, channels, _ = shape
    x, h = rand(shape, dt), rand((batch, 2 * channels), dt)
    w, b = rand((channels,), dt), rand((channels,), dt)
    alpha = (np.abs(rand((channels,))) + 0.2).astype(dt)
    gh = gp.from_numpy(h)
    y = ops.ada_in(
        gp.from_numpy(x), gh[:, :channels], gh[:, channels:], weight=gp.from_numpy(w),
        bias=gp.from_numpy(b), activation=activation, negative_slope=0.2,
        alpha=gp.from_numpy(alpha) if activation == "snake" else None,
    ).to_numpy()  # fmt: skip
    ref = ada_in_ref(x, h[:, :channels], h[:, channels:], w, b)
    if activation == "leaky_relu":
        ref = leaky_relu_ref(ref, 0.2)
    elif activation == "snake":
        ref = snake_ref(ref, alpha)
    assert rel_err(y, ref) < TOL[dtype]


def masked_ada_in_ref(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, lengths: list[int]
) -> np.ndarray:
    """Each row's first ``lengths[b]`` samples normalised alone (float64); zeros after them."""
    out = np.zeros(x.shape, np.float64)
    for b, n in enumerate(lengths):
        if n:
            out[b : b + 1, :, :n] = ada_in_ref(
                x[b : b + 1, :, :n], gamma[b : b + 1], beta[b : b + 1]
            )
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("length", "lengths"),
    [(301, [301, 100, 1]), (20001, [20001, 12345, 2049]), (54601, [0, 54601, 30000]),
     (140000, [140000, 4097, 131073])],
)  # fmt: skip
def test_ada_in_lengths_gpu(rand: Rand, dtype: str, length: int, lengths: list[int]) -> None:
    """Short rows (one block) and long ones (split over blocks), each with padded rows."""
    dt = gp.dtypes.normalize(dtype)
    x = (rand((3, 5, length)) * 0.5 + 2).astype(dt)  # an offset: the split merge must not cancel
    gamma, beta = rand((3, 5), dt), rand((3, 5), dt)
    gx = gp.from_numpy(x)
    y = ops.ada_in(
        gx, gp.from_numpy(gamma), gp.from_numpy(beta), lengths=np.array(lengths), out=gx,
        activation="leaky_relu", negative_slope=0.2,
    ).to_numpy()  # fmt: skip
    ref = leaky_relu_ref(masked_ada_in_ref(x, gamma, beta, lengths), 0.2)
    assert rel_err(y, ref) < TOL[dtype]
    for b, n in enumerate(lengths):
        assert not y[b, :, n:].any()


def test_instance_norm_long_row_large_offset_gpu(rand: Rand) -> None:
    """The split statistics (Chan's merge of centred partials) keep a large mean exact."""
    x = (rand((1, 4, 100003)) + 300).astype(np.float32)
    y = ops.instance_norm(gp.from_numpy(x)).to_numpy()
    assert rel_err(y, ada_in_ref(x, None, None)) < 5e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES[:4])
def test_instance_norm_gpu_vs_torch(rand: Rand, dtype: str, shape: tuple[int, int, int]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w, b = rand(shape, dt), rand(shape[1:2], dt), rand(shape[1:2], dt)
    y = ops.instance_norm(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b)).to_numpy()
    assert rel_err(y, ada_in_ref(x, None, None, w, b)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        want = torch.nn.functional.instance_norm(
            to_torch(torch, x, dtype), weight=to_torch(torch, w, dtype),
            bias=to_torch(torch, b, dtype), eps=1e-5,
        )  # fmt: skip
        assert rel_err(y, want.float().cpu().numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES[:4])
def test_channel_layernorm_gpu(rand: Rand, dtype: str, shape: tuple[int, int, int]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w, b = rand(shape, dt), rand(shape[1:2], dt), rand(shape[1:2], dt)
    y = ops.channel_layernorm(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b)).to_numpy()
    assert rel_err(y, channel_layernorm_ref(x, w, b)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        tx = to_torch(torch, x, dtype).transpose(1, 2)
        want = torch.nn.functional.layer_norm(
            tx, (shape[1],), to_torch(torch, w, dtype), to_torch(torch, b, dtype), 1e-5
        ).transpose(1, 2)
        assert rel_err(y, want.float().cpu().numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_snake_and_leaky_relu_gpu(rand: Rand, dtype: str, shape: tuple[int, int, int]) -> None:
    dt = gp.dtypes.normalize(dtype)
    x = (rand(shape) * 3).astype(dt)
    alpha = (np.abs(rand((shape[1],))) + 0.1).astype(dt)
    y = ops.snake(gp.from_numpy(x), gp.from_numpy(alpha)).to_numpy()
    assert rel_err(y, snake_ref(x, alpha)) < TOL[dtype]
    gx = gp.from_numpy(x)
    ops.leaky_relu(gx, 0.1, out=gx)
    assert rel_err(gx.to_numpy(), leaky_relu_ref(x, 0.1)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        want = torch.nn.functional.leaky_relu(to_torch(torch, x, dtype), 0.1)
        assert rel_err(gx.to_numpy(), want.float().cpu().numpy()) < TOL[dtype]

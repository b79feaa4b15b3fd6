"""The layer ops on the GPU: norms, RoPE, gated activations, embedding and softmax.

Every op and dtype over odd and even widths (1, 7, 4096, 8192, 10000, and rows too wide for the
register kernels) against float64 NumPy; rmsnorm, layernorm and softmax also against PyTorch when
it is importable; RoPE against an independent complex-multiplication reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ops_references import gated_ref, ln_ref, rel_err, rms_ref, rope_ref, softmax_ref

import pygpukit as gp
from pygpukit import ops

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
#: Widths: scalar and vector paths, the register buckets, and the streaming fallback
#: (70000 and 40001 exceed what the register buckets hold for every dtype).
WIDTHS = [1, 7, 64, 4096, 8192, 10000, 40001, 70000]
Rand = Callable[..., np.ndarray]


def rows_for(width: int) -> int:
    return 37 if width <= 64 else 5


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def to_torch(torch: Any, a: np.ndarray, dtype: str) -> Any:
    return torch.from_numpy(a.astype(np.float32)).cuda().to(getattr(torch, dtype))


# ----------------------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_rmsnorm(rand: Rand, dtype: str, width: int) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w = rand((rows_for(width), width), dt), rand((width,), dt)
    y = ops.rmsnorm(gp.from_numpy(x), gp.from_numpy(w), 1e-6).to_numpy()
    assert rel_err(y, rms_ref(x, w, 1e-6)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        t = torch.nn.functional.rms_norm(
            to_torch(torch, x, dtype), (width,), to_torch(torch, w, dtype), 1e-6
        )
        assert rel_err(y, t.float().cpu().numpy()) < 2 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_layernorm(rand: Rand, dtype: str, width: int, with_bias: bool) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w, b = rand((rows_for(width), width), dt), rand((width,), dt), rand((width,), dt)
    bias = gp.from_numpy(b) if with_bias else None
    y = ops.layernorm(gp.from_numpy(x), gp.from_numpy(w), bias, 1e-5).to_numpy()
    if width == 1 and not with_bias:
        # A one-element row is all mean: the output is exactly zero.
        assert not np.any(y.astype(np.float64))
        return
    assert rel_err(y, ln_ref(x, w, b if with_bias else None, 1e-5)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        tb = to_torch(torch, b, dtype) if with_bias else None
        t = torch.nn.functional.layer_norm(
            to_torch(torch, x, dtype), (width,), to_torch(torch, w, dtype), tb, 1e-5
        )
        assert rel_err(y, t.float().cpu().numpy()) < 2 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 7, 4096, 8192, 10000, 70000])
@pytest.mark.parametrize("layer", [False, True])
def test_add_norm(rand: Rand, dtype: str, width: int, layer: bool) -> None:
    dt = gp.dtypes.normalize(dtype)
    shape = (rows_for(width), width)
    x, r, w, b = rand(shape, dt), rand(shape, dt), rand((width,), dt), rand((width,), dt)
    gx, gr, gw = gp.from_numpy(x), gp.from_numpy(r), gp.from_numpy(w)
    if layer:
        s, y = ops.add_layernorm(gx, gr, gw, gp.from_numpy(b), 1e-5)
    else:
        s, y = ops.add_rmsnorm(gx, gr, gw, 1e-6)
    s_ref = (x.astype(np.float64) + r.astype(np.float64)).astype(dt)
    np.testing.assert_array_equal(s.to_numpy(), s_ref)
    ref = ln_ref(s_ref, w, b, 1e-5) if layer else rms_ref(s_ref, w, 1e-6)
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]
    np.testing.assert_array_equal(gx.to_numpy(), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_3d_misaligned_and_inplace(rand: Rand, dtype: str) -> None:
    dt = gp.dtypes.normalize(dtype)
    x, w = rand((2, 3, 256), dt), rand((256,), dt)
    # A view one element into a buffer: not 16-byte aligned, so the scalar kernels run.
    flat = gp.from_numpy(np.concatenate([x.reshape(-1)[:1], x.reshape(-1)]))
    view = flat[1:].reshape(2, 3, 256)
    y = ops.rmsnorm(view, gp.from_numpy(w)).to_numpy()
    assert rel_err(y, rms_ref(x, w, 1e-6)) < TOL[dtype]
    gx = gp.from_numpy(x)
    assert ops.layernorm(gx, gp.from_numpy(w), out=gx) is gx
    assert rel_err(gx.to_numpy(), ln_ref(x, w, None, 1e-5)) < TOL[dtype]


# ----------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_softmax(rand: Rand, dtype: str, width: int) -> None:
    x = rand((rows_for(width), width), gp.dtypes.normalize(dtype))
    y = ops.softmax(gp.from_numpy(x)).to_numpy()
    assert rel_err(y, softmax_ref(x)) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        t = torch.softmax(to_torch(torch, x, dtype), dim=-1)
        assert rel_err(y, t.float().cpu().numpy()) < 2 * TOL[dtype]


def test_softmax_inplace_and_misaligned(rand: Rand) -> None:
    x = rand((4, 3, 1000), np.float32) * 10
    gx = gp.from_numpy(x)
    assert ops.softmax(gx, out=gx) is gx
    assert rel_err(gx.to_numpy(), softmax_ref(x)) < 1e-5
    flat = gp.from_numpy(np.concatenate([x.reshape(-1)[:2], x.reshape(-1)]).astype(np.float16))
    y = ops.softmax(flat[2:].reshape(12, 1000)).to_numpy()
    assert rel_err(y, softmax_ref(x.astype(np.float16).reshape(12, 1000))) < 3e-3


# ----------------------------------------------------------------------------- gated activations


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [1, 7, 4096, 8192, 10000])
@pytest.mark.parametrize("act", ["silu", "tanh", "none"])
def test_gated(rand: Rand, dtype: str, d: int, act: str) -> None:
    x = rand((rows_for(d), 2 * d), gp.dtypes.normalize(dtype))
    gx = gp.from_numpy(x)
    y = ops.silu_mul(gx) if act == "silu" else ops.gelu_mul(gx, approximate=act)
    assert y.shape == (x.shape[0], d)
    assert rel_err(y.to_numpy(), gated_ref(x, act)) < TOL[dtype]


# ----------------------------------------------------------------------------- embedding


@pytest.mark.parametrize("table_dtype", ["float32", "float16", "bfloat16", "int8"])
@pytest.mark.parametrize("dim", [1, 7, 4096, 10000])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_embedding(
    rng: np.random.Generator, rand: Rand, table_dtype: str, dim: int, id_dtype: type
) -> None:
    table = rand((50, dim), gp.dtypes.normalize(table_dtype))
    ids: np.ndarray = rng.integers(0, 50, size=(3, 7)).astype(id_dtype)
    y = ops.embedding(gp.from_numpy(ids), gp.from_numpy(table)).to_numpy()
    np.testing.assert_array_equal(y, table[ids])


def test_embedding_out_of_range_is_zero(rand: Rand) -> None:
    table = rand((8, 16), np.float32)
    ids = np.array([1, 8, -1, 7, 1 << 40], np.int64)
    y = ops.embedding(gp.from_numpy(ids), gp.from_numpy(table)).to_numpy()
    np.testing.assert_array_equal(y[[0, 3]], table[[1, 7]])
    assert not np.any(y[[1, 2, 4]])


# ----------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("head_dim,rotary_dim", [(128, 128), (128, 64), (80, 32), (64, 2)])
@pytest.mark.parametrize("inplace", [False, True])
def test_rope(
    rng: np.random.Generator,
    rand: Rand,
    dtype: str,
    layout: str,
    head_dim: int,
    rotary_dim: int,
    inplace: bool,
) -> None:
    dt = gp.dtypes.normalize(dtype)
    tokens, hq, hk = 19, 8, 2
    q, k = rand((tokens, hq, head_dim), dt), rand((tokens, hk, head_dim), dt)
    pos = rng.integers(0, 4096, size=tokens).astype(np.int64 if inplace else np.int32)
    cos, sin = ops.rope_cos_sin(4096, rotary_dim)
    gq, gk = gp.from_numpy(q), gp.from_numpy(k)
    qo, ko = ops.apply_rope(
        gq, gk, cos, sin, gp.from_numpy(pos), layout=layout, rotary_dim=rotary_dim, inplace=inplace
    )
    assert (qo is gq) == inplace and (ko is gk) == inplace
    assert rel_err(qo.to_numpy(), rope_ref(q, pos, rotary_dim, layout)) < TOL[dtype]
    assert rel_err(ko.to_numpy(), rope_ref(k, pos, rotary_dim, layout)) < TOL[dtype]
    np.testing.assert_array_equal(qo.to_numpy()[..., rotary_dim:], q[..., rotary_dim:])
    np.testing.assert_array_equal(ko.to_numpy()[..., rotary_dim:], k[..., rotary_dim:])
    if not inplace:
        np.testing.assert_array_equal(gq.to_numpy(), q)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rope_half_tables_batched(rng: np.random.Generator, rand: Rand, dtype: str) -> None:
    dt = gp.dtypes.normalize(dtype)
    q, k = rand((2, 5, 4, 64), dt), rand((2, 5, 1, 64), dt)
    pos = rng.integers(0, 64, size=(2, 5)).astype(np.int32)
    cos, sin = ops.rope_cos_sin(64, 64, dtype=dtype)
    qo, ko = ops.apply_rope(gp.from_numpy(q), gp.from_numpy(k), cos, sin, gp.from_numpy(pos))
    # Rounded tables add one rounding of cos/sin to the error.
    assert rel_err(qo.to_numpy(), rope_ref(q, pos, 64, "neox")) < 2 * TOL[dtype]
    assert rel_err(ko.to_numpy(), rope_ref(k, pos, 64, "neox")) < 2 * TOL[dtype]


def test_rope_out_of_range_position_passes_through(rand: Rand) -> None:
    q, k = rand((3, 2, 16), np.float32), rand((3, 1, 16), np.float32)
    cos, sin = ops.rope_cos_sin(8, 16)
    pos = np.array([1, 8, -3], np.int32)
    qo, ko = ops.apply_rope(gp.from_numpy(q), gp.from_numpy(k), cos, sin, gp.from_numpy(pos))
    np.testing.assert_array_equal(qo.to_numpy()[1:], q[1:])
    np.testing.assert_array_equal(ko.to_numpy()[1:], k[1:])
    assert rel_err(qo.to_numpy()[:1], rope_ref(q[:1], pos[:1], 16, "neox")) < 1e-5

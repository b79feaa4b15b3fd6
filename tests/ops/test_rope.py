"""rope_cos_sin and apply_rope on the CPU backend, against an independent float64 reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err, rope_ref

import pygpukit as gp
from pygpukit import ops

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
Rand = Callable[..., np.ndarray]


def test_cos_sin_tables() -> None:
    cos, sin = ops.rope_cos_sin(16, 8, base=500.0)
    assert cos.shape == sin.shape == (16, 4) and cos.dtype == np.float32
    ang = np.arange(16)[:, None] * 500.0 ** (-np.arange(4) * 2 / 8)
    np.testing.assert_allclose(cos.to_numpy(), np.cos(ang), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sin.to_numpy(), np.sin(ang), rtol=1e-6, atol=1e-7)
    c2, _ = ops.rope_cos_sin(np.array([3, 9]), 8, base=500.0, dtype="bfloat16")
    assert c2.dtype == gp.bfloat16
    np.testing.assert_allclose(c2.to_numpy().astype(np.float64), np.cos(ang[[3, 9]]), atol=1e-2)
    with pytest.raises(ValueError, match="even"):
        ops.rope_cos_sin(4, 7)


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_apply_rope(
    rng: np.random.Generator, rand: Rand, dtype: str, layout: str, partial: bool, inplace: bool
) -> None:
    dt = gp.dtypes.normalize(dtype)
    tokens, hq, hk, d = 5, 4, 2, 32
    rd = 16 if partial else d
    q, k = rand((tokens, hq, d), dt), rand((tokens, hk, d), dt)
    pos = rng.integers(0, 100, size=tokens).astype(np.int64)
    cos, sin = ops.rope_cos_sin(100, rd)
    gq, gk = gp.from_numpy(q), gp.from_numpy(k)
    qo, ko = ops.apply_rope(
        gq, gk, cos, sin, gp.from_numpy(pos), layout=layout, rotary_dim=rd, inplace=inplace
    )
    assert (qo is gq) == inplace and (ko is gk) == inplace
    assert rel_err(qo.to_numpy(), rope_ref(q, pos, rd, layout)) < TOL[dtype]
    assert rel_err(ko.to_numpy(), rope_ref(k, pos, rd, layout)) < TOL[dtype]
    if partial:  # the pass-through dims are copied exactly
        np.testing.assert_array_equal(qo.to_numpy()[..., rd:], q[..., rd:])
    if not inplace:
        np.testing.assert_array_equal(gq.to_numpy(), q)


def test_apply_rope_batched(rng: np.random.Generator, rand: Rand) -> None:
    q, k = rand((2, 3, 4, 8), np.float32), rand((2, 3, 1, 8), np.float32)
    pos = rng.integers(0, 10, size=(2, 3)).astype(np.int32)
    cos, sin = ops.rope_cos_sin(10, 8)
    qo, ko = ops.apply_rope(gp.from_numpy(q), gp.from_numpy(k), cos, sin, gp.from_numpy(pos))
    assert rel_err(qo.to_numpy(), rope_ref(q, pos, 8, "neox")) < 1e-5
    assert rel_err(ko.to_numpy(), rope_ref(k, pos, 8, "neox")) < 1e-5


def test_apply_rope_errors(rand: Rand) -> None:
    q, k = gp.from_numpy(rand((2, 2, 8), np.float32)), gp.from_numpy(rand((2, 1, 8), np.float32))
    cos, sin = ops.rope_cos_sin(4, 8)
    if not gp.is_cuda_available():  # the CPU backend's check; the GPU passes such tokens through
        with pytest.raises(ValueError, match=r"\[0, 4\)"):
            ops.apply_rope(q, k, cos, sin, gp.from_numpy(np.array([0, 4], np.int32)))
    ok = gp.from_numpy(np.array([0, 3], np.int32))
    with pytest.raises(ValueError, match="layout"):
        ops.apply_rope(q, k, cos, sin, ok, layout="llama")
    with pytest.raises(ValueError, match="rotary_dim"):
        ops.apply_rope(q, k, cos, sin, ok, rotary_dim=4)
    with pytest.raises(TypeError, match="positions must have dtype"):
        ops.apply_rope(q, k, cos, sin, gp.from_numpy(np.array([0.0, 1.0], np.float32)))
    with pytest.raises(ValueError, match="positions must have shape"):
        ops.apply_rope(q, k, cos, sin, gp.from_numpy(np.array([0], np.int32)))
    with pytest.raises(ValueError, match="k "):
        ops.apply_rope(q, gp.from_numpy(rand((3, 1, 8), np.float32)), cos, sin, ok)

"""pygpukit.ops.layers on the GPU at model sizes: the GEMV vector kernels, split decode with the
layer's held workspace, paged decode, the Hopper prefill kernels; layers vs the function API
(identical results) and float64 NumPy; plans kept and nothing allocated on repeated calls."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import gather_pages, linear_ref, qkv, ref_decode, ref_sdpa, rel_err, rms_ref

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config
from pygpukit.ops._plan import plan_caches
from pygpukit.ops.layers import Attention, GatedMLP, Linear, RMSNorm

pytestmark = pytest.mark.gpu
Rand = Callable[..., np.ndarray]
LIMIT = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(a)


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16])
@pytest.mark.parametrize("m", [1, 2, 8, 33])
def test_linear_at_model_size(rand: Rand, dtype: object, m: int) -> None:
    """K = 4096: the simt (M = 1) and mma (M > 1) GEMV kernels, and matmul above 8 rows."""
    x, w, b = rand((m, 4096), dtype), rand((1024, 4096), dtype), rand((1024,), dtype)
    layer = Linear(up(w), up(b), activation="gelu_tanh")
    got = layer(up(x)).to_numpy()
    want = ops.linear(up(x), layer.weight, layer.bias, activation="gelu_tanh").to_numpy()
    np.testing.assert_array_equal(got, want)
    assert rel_err(got, linear_ref(x, w, b, "gelu_tanh")) < LIMIT[np.dtype(dtype)]


def test_fused_qkv_and_mlp_at_model_size(rand: Rand) -> None:
    dt = gp.bfloat16
    wq, wk, wv = (rand(s, dt) for s in ((2048, 2048), (512, 2048), (512, 2048)))
    layer = Linear.fused([up(wq), up(wk), up(wv)])
    x = rand((1, 2048), dt)
    for part, w in zip(layer.split(layer(up(x))), (wq, wk, wv), strict=True):
        assert rel_err(part.to_numpy(), linear_ref(x, w, None, None)) < 1e-2
    sc = 0.02
    wg, wu, wd = ((rand(s) * sc).astype(dt) for s in ((5632, 2048), (5632, 2048), (2048, 5632)))
    mlp = GatedMLP(up(wg), up(wu), up(wd))
    g = x.astype(np.float64) @ wg.astype(np.float64).T
    u = x.astype(np.float64) @ wu.astype(np.float64).T
    ref = (g / (1 + np.exp(-g)) * u) @ wd.astype(np.float64).T
    assert rel_err(mlp(up(x)).to_numpy(), ref) < 2e-2


def test_rmsnorm_residual_at_model_size(rand: Rand) -> None:
    x, r, w = rand((4, 4096), gp.bfloat16), rand((4, 4096), gp.bfloat16), rand((4096,), gp.bfloat16)
    s, y = RMSNorm(up(w))(up(x), up(r))
    s_ref = (x.astype(np.float32) + r.astype(np.float32)).astype(gp.bfloat16)
    np.testing.assert_array_equal(s.to_numpy(), s_ref)
    assert rel_err(y.to_numpy(), rms_ref(s_ref, w, 1e-6)) < 1e-2


@pytest.mark.parametrize("kernel", ["mma2", "mma", "simt"])
@pytest.mark.parametrize("paged", [False, True])
def test_split_decode_with_the_layers_workspace(rand: Rand, rng, kernel: str, paged: bool) -> None:
    """4096 cached tokens at batch 1: the keys split across CTAs and merged; the layer reuses
    its partials on every call and matches the function API bit for bit."""
    b, hq, hkv, d, n, dt = 1, 32, 8, 128, 4096, gp.bfloat16
    q = (rand((b, hq, d)) * 0.3).astype(dt)
    lens = np.array([n - 5], np.int32)
    with config.override(decode_kernel=kernel):
        attn = Attention(hq, hkv, d)
        table_h = None
        if paged:
            bs = 16
            kc = (rand((n // bs, hkv, bs, d)) * 0.3).astype(dt)
            vc = rand((n // bs, hkv, bs, d)).astype(dt)
            table_h = rng.permutation(n // bs).reshape(1, -1).astype(np.int32)
            keys, vals = gather_pages(kc, table_h, lens), gather_pages(vc, table_h, lens)
        else:
            kc, vc = (rand((b, hkv, n, d)) * 0.3).astype(dt), rand((b, hkv, n, d)).astype(dt)
            keys, vals = [kc[0, :, : lens[0]]], [vc[0, :, : lens[0]]]
        args = (up(q), up(kc), up(vc), up(lens))
        table = up(table_h) if table_h is not None else None
        out = gp.empty((b, hq, d), dt)
        attn.decode(*args, block_table=table, out=out)
        before = gp.memory.stats()["alloc_count"]
        attn.decode(*args, block_table=table, out=out)
        assert gp.memory.stats()["alloc_count"] == before
        want = ops.decode_attention(*args, block_table=table).to_numpy()
    np.testing.assert_array_equal(out.to_numpy(), want)
    assert rel_err(out.to_numpy(), ref_decode(q, keys, vals)) < 1e-2


@pytest.mark.parametrize("kernel", ["auto", "mma", "wgmma_pipe"])
def test_prefill_layer_matches_the_function(rand: Rand, kernel: str) -> None:
    q, k, v = qkv(rand, 2, 8, 2, 300, 300, 128, gp.bfloat16)
    with config.override(attention_kernel=kernel):
        attn = Attention(8, 2, 128)
        got = attn.prefill(up(q), up(k), up(v)).to_numpy()
        want = ops.scaled_dot_product_attention(up(q), up(k), up(v), is_causal=True).to_numpy()
    np.testing.assert_array_equal(got, want)
    assert rel_err(got, ref_sdpa(q, k, v, causal=True)) < 1e-2


def test_layer_plans_survive_a_config_change(rand: Rand) -> None:
    """A decode layer built under mma2 keeps its kernel after the knob changes to simt."""
    q, kc, vc = (up(a) for a in qkv(rand, 1, 8, 2, 1, 512, 64, gp.float16))
    lens = up(np.array([300], np.int32))
    q3 = q.reshape(1, 8, 64)
    with config.override(decode_kernel="mma2"):
        attn = Attention(8, 2, 64)
        attn.decode(q3, kc, vc, lens)
    lookups = sum(c.hits + c.misses for c in plan_caches().values())
    with config.override(decode_kernel="simt"):
        attn.decode(q3, kc, vc, lens)
    assert sum(c.hits + c.misses for c in plan_caches().values()) == lookups
    ((plan, _, _),) = attn._decode.values()
    assert "mma2" in plan.launch.kernel.name

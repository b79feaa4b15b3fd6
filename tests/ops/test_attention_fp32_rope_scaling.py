"""float32 attention (both backends' float32 paths) and the long-context RoPE frequency scalings.

The RoPE scalings are checked against independent transcriptions of the formulas in the
``rope_scaling`` documentation of Hugging Face configs (written here in a different form: a
per-dimension loop in plain Python floats).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from ops_references import ref_decode, ref_sdpa, rel_err

import pygpukit as gp
from pygpukit import ops


@pytest.mark.parametrize(("hq", "hkv", "sq", "sk"), [(4, 2, 9, 9), (2, 1, 5, 12), (3, 3, 1, 7)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_float32(rand, hq, hkv, sq, sk, causal):
    q, k, v = rand((2, hq, sq, 64)), rand((2, hkv, sk, 64)), rand((2, hkv, sk, 64))
    mask = rand((sq, sk))
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v),
        attn_mask=gp.from_numpy(mask), is_causal=causal,
    )  # fmt: skip
    assert got.dtype == np.float32
    assert rel_err(got.to_numpy(), ref_sdpa(q, k, v, mask, causal)) < 1e-5


def test_decode_float32(rand):
    lens = np.array([0, 1, 7, 16], np.int32)
    q, kc, vc = rand((4, 4, 64)), rand((4, 2, 16, 64)), rand((4, 2, 16, 64))
    got = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens)
    ).to_numpy()
    ref = ref_decode(
        q, [kc[i, :, : lens[i]] for i in range(4)], [vc[i, :, : lens[i]] for i in range(4)]
    )
    assert rel_err(got, ref) < 1e-5
    assert np.all(got[0] == 0)


def _llama3_loop(inv, factor, low, high, old):
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def _yarn_loop(dim, base, factor, original):
    def corr(rot):
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), dim - 1)
    out = []
    for i in range(dim // 2):
        extrap = 1.0 / base ** (2 * i / dim)
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out.append(extrap / factor * ramp + extrap * (1 - ramp))
    return np.array(out), 0.1 * math.log(factor) + 1.0


def test_rope_scalings():
    base_inv = np.array([1.0 / 500000.0 ** (2 * i / 64) for i in range(32)])
    inv, att = ops.rope_inv_freq(64, 500000.0)
    assert np.allclose(inv, base_inv, rtol=1e-12) and att == 1.0
    inv, _ = ops.rope_inv_freq(64, 500000.0, {"rope_type": "linear", "factor": 4.0})
    assert np.allclose(inv, base_inv / 4.0, rtol=1e-12)
    sc = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}  # fmt: skip
    inv, _ = ops.rope_inv_freq(64, 500000.0, sc)
    ref = _llama3_loop(base_inv, 8.0, 1.0, 4.0, 32)
    assert np.allclose(inv, ref, rtol=1e-12)
    assert (inv != base_inv).any() and (inv == base_inv).any()  # all three bands present
    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    inv, att = ops.rope_inv_freq(64, 10000.0, sc, max_position_embeddings=256)
    ref, ref_att = _yarn_loop(64, 10000.0, 4.0, 64)
    assert np.allclose(inv, ref, rtol=1e-12) and math.isclose(att, ref_att)


def test_rope_cos_sin_takes_scaled_frequencies():
    inv, att = ops.rope_inv_freq(
        64, 10000.0, {"rope_type": "yarn", "factor": 2.0}, max_position_embeddings=128
    )
    cos, sin = ops.rope_cos_sin(10, 64, inv_freq=inv, attention_factor=att)
    angles = np.outer(np.arange(10), inv)
    assert np.allclose(cos.to_numpy(), np.cos(angles) * att, atol=1e-6)
    assert np.allclose(sin.to_numpy(), np.sin(angles) * att, atol=1e-6)


@pytest.mark.parametrize(
    ("scaling", "match"),
    [
        ({"rope_type": "ntk"}, "not supported"),
        ({"rope_type": "linear"}, "factor"),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 32,
            },
            "high_freq_factor",
        ),
        ({"rope_type": "linear", "factor": "2"}, "finite number"),
    ],
)
def test_rope_scaling_errors(scaling, match):
    with pytest.raises(ValueError, match=match):
        ops.rope_inv_freq(64, 10000.0, scaling)
    with pytest.raises(ValueError, match="inv_freq"):
        ops.rope_cos_sin(4, 64, inv_freq=np.ones(16))


def test_sampling_into_out(rand):
    logits = rand((3, 50))
    out = gp.from_numpy(np.full(3, -1, np.int32))
    assert ops.argmax(gp.from_numpy(logits), out=out) is out
    assert np.array_equal(out.to_numpy(), logits.argmax(1))
    got = ops.sample(gp.from_numpy(logits), temperature=0.0, out=out)
    assert got is out and np.array_equal(out.to_numpy(), logits.argmax(1))
    with pytest.raises(ValueError, match="out"):
        ops.argmax(gp.from_numpy(logits), out=gp.from_numpy(np.zeros(2, np.int32)))


@pytest.mark.parametrize("mask_shape", [None, (9, 12), (1, 4, 9, 12), (2, 1, 9, 12)])
@pytest.mark.parametrize("causal", [False, True])
def test_composed_float32_path_on_this_backend(rand, mask_shape, causal):
    """The GPU's float32 composition (matmul, softmax, where) runs on any backend: check it."""
    from pygpukit.ops import _attention_fp32

    q, k, v = rand((2, 4, 9, 64)), rand((2, 2, 12, 64)), rand((2, 2, 12, 64))
    mask = None if mask_shape is None else rand(mask_shape)
    if mask is not None:
        mask[..., 0, :] = -np.inf  # a row that sees no key gives zeros
    out = gp.empty((2, 4, 9, 64), gp.float32)
    m = None if mask is None else gp.from_numpy(mask)
    _attention_fp32.sdpa(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), m, causal, 0.125, out
    )
    ref = ref_sdpa(q, k, v, mask, causal, 0.125)
    assert rel_err(out.to_numpy(), ref) < 1e-5
    if mask is not None:
        assert np.all(out.to_numpy()[:, :, 0] == 0)

    lens = np.array([0, 7], np.int32)
    q1, out1 = rand((2, 4, 64)), gp.empty((2, 4, 64), gp.float32)
    _attention_fp32.decode(
        gp.from_numpy(q1), gp.from_numpy(k), gp.from_numpy(v), gp.from_numpy(lens), 0.125, out1
    )
    ref1 = ref_decode(
        q1, [k[i, :, : lens[i]] for i in range(2)], [v[i, :, : lens[i]] for i in range(2)], 0.125
    )
    assert rel_err(out1.to_numpy(), ref1) < 1e-5

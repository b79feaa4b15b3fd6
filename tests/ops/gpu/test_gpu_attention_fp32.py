"""float32 attention on the GPU (matmul + softmax composition) against float64 NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from ops_references import ref_decode, ref_sdpa, rel_err

import pygpukit as gp
from pygpukit import ops

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("hq", "hkv", "sq", "sk"), [(8, 2, 33, 33), (4, 1, 5, 70), (2, 2, 1, 9)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_sdpa_float32(rand, hq, hkv, sq, sk, causal, d):
    q, k, v = rand((2, hq, sq, d)), rand((2, hkv, sk, d)), rand((2, hkv, sk, d))
    mask = rand((sq, sk))
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v),
        attn_mask=gp.from_numpy(mask), is_causal=causal,
    ).to_numpy()  # fmt: skip
    assert rel_err(got, ref_sdpa(q, k, v, mask, causal)) < 1e-5


def test_decode_float32_lengths_on_device(rand):
    lens = np.array([0, 1, 70, 200], np.int32)
    q, kc, vc = rand((4, 8, 128)), rand((4, 2, 200, 128)), rand((4, 2, 200, 128))
    got = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens)
    ).to_numpy()
    ref = ref_decode(
        q, [kc[i, :, : lens[i]] for i in range(4)], [vc[i, :, : lens[i]] for i in range(4)]
    )
    assert rel_err(got, ref) < 1e-5
    assert np.all(got[0] == 0)


def test_paged_float32_refused(rand):
    with pytest.raises(TypeError, match="paged"):
        ops.decode_attention(
            gp.from_numpy(rand((1, 2, 64))), gp.from_numpy(rand((2, 2, 16, 64))),
            gp.from_numpy(rand((2, 2, 16, 64))), gp.from_numpy(np.array([5], np.int32)),
            block_table=gp.from_numpy(np.zeros((1, 2), np.int32)),
        )  # fmt: skip

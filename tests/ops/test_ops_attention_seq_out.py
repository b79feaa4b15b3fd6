"""Prefill attention written token-major: ``out`` as the transposed view of ``[B, Sq, Hq, D]``.

The current backend (the CPU's reference here; every prefill kernel on a GPU machine, see
``tests/ops/gpu/test_gpu_ops_attention_seq_out.py``) must give the values of a C-contiguous
``out``, bit for bit, in the other layout; other strided ``out`` views are refused.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import qkv, ref_sdpa, rel_err

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.layers import Attention

Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize(("b", "hq", "hkv", "sq", "sk", "causal"),
                         [(1, 4, 2, 9, 9, True), (2, 2, 1, 5, 12, False)])  # fmt: skip
def test_seq_major_out_matches_contiguous(rand: Rand, b, hq, hkv, sq, sk, causal) -> None:
    q, k, v = qkv(rand, b, hq, hkv, sq, sk, 64, gp.float16)
    qd, kd, vd = gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v)
    want = ops.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).to_numpy()
    x = gp.empty((b, sq, hq, 64), gp.float16)
    view = x.transpose(0, 2, 1, 3)
    got = ops.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, out=view)
    assert got is view
    np.testing.assert_array_equal(x.to_numpy().transpose(0, 2, 1, 3), want)
    assert rel_err(want, ref_sdpa(q, k, v, causal=causal)) < 3e-3

    layer = Attention(hq, hkv, 64, causal=causal)
    y = gp.empty((b, sq, hq, 64), gp.float16)
    layer.prefill(qd, kd, vd, out=y.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(y.to_numpy().transpose(0, 2, 1, 3), want)


def test_other_strided_out_is_refused(rand: Rand) -> None:
    q, k, v = (gp.from_numpy(a) for a in qkv(rand, 1, 4, 2, 8, 8, 64, gp.float16))
    wide = gp.empty((1, 4, 8, 128), gp.float16)
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.scaled_dot_product_attention(q, k, v, out=wide[..., :64])
    with pytest.raises(ValueError, match="C-contiguous"):
        Attention(4, 2, 64).prefill(q, k, v, out=wide[..., 64:])

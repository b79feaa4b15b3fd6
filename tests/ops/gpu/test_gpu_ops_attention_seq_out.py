"""Every prefill kernel writes a token-major ``out`` (``[B, Sq, Hq, D]`` seen transposed).

Against the same kernel with a C-contiguous ``out``, bit for bit (each value is computed the
same way; only its address differs), and against float64 NumPy; the rows of the buffer that
belong to no (token, head) pair cannot exist, so a wrong stride shows as a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import qkv, ref_sdpa, rel_err

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config

pytestmark = pytest.mark.gpu

LIMIT = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16])
@pytest.mark.parametrize(("b", "hq", "hkv", "sq", "sk", "d", "causal"), [
    (1, 32, 8, 1024, 1024, 128, True),
    (3, 8, 2, 200, 200, 64, True),
    (2, 6, 1, 17, 300, 128, False),
    (1, 4, 4, 129, 129, 80, True),
    (2, 4, 2, 1, 333, 128, True),
])  # fmt: skip
def test_token_major_out(rand: Rand, dtype, b, hq, hkv, sq, sk, d, causal) -> None:
    q, k, v = qkv(rand, b, hq, hkv, sq, sk, d, dtype)
    qd, kd, vd = gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v)
    ref = ref_sdpa(q, k, v, causal=causal)
    for kernel in ("auto", "mma", "wgmma_pipe", "wgmma_tma"):
        with config.override(attention_kernel=kernel):
            want = ops.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).to_numpy()
            x = gp.from_numpy(rand((b, sq, hq, d), dtype))  # stale values, all overwritten
            out = x.transpose(0, 2, 1, 3)
            ops.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, out=out)
        np.testing.assert_array_equal(x.to_numpy().transpose(0, 2, 1, 3), want, err_msg=kernel)
        assert rel_err(want, ref) < LIMIT[np.dtype(dtype)], kernel
